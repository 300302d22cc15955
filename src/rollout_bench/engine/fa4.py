"""Capability guard for the FlashAttention-4 prefill backend of flex_attention (BACKEND='FLASH').

FA4 is CuTeDSL code for Hopper and Blackwell (compute capability >= 9) shipped by flash-attn-4.
'auto' uses it where it can and falls back to flex's Triton kernel (the stats say why); 'on' raises
`Unavailable` where it cannot (a measurement asked of FA4 must not time Triton); 'off' never.
"""
import importlib.util

import torch

FA4_Q_BLOCK = 256  # FA4's query tile; the prefill BlockMask uses it as its Q block size
TRITON_Q_BLOCK = 128
# Largest head dim FA4's forward kernels are built for. Gemma-4's full-attention layers (head dim
# 512) are beyond it: the prefill then runs flex's Triton kernel for every layer, since one packed
# BlockMask (one Q block size) serves all layers.
FA4_MAX_HEAD_DIM = 256


def importable() -> bool:
    try:
        return importlib.util.find_spec("flash_attn.cute") is not None
    except (ImportError, ValueError):
        return False


def unsupported(device, head_dims=()) -> str | None:
    """Why FA4 prefill cannot run on `device` for attention of these head dims; None when it can."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        return f"compute capability {major}.{minor} < 9.0 (FA4 needs Hopper or Blackwell)"
    if not importable():
        return "flash-attn-4 is not installed (flash_attn.cute not importable)"
    too_big = [d for d in head_dims if d > FA4_MAX_HEAD_DIM]
    if too_big:
        return f"head_dim {max(too_big)} > {FA4_MAX_HEAD_DIM} (FA4's largest)"
    return None


def why_not(setting: str, device, head_dims=()) -> str | None:
    """Why the prefill does not run FA4 under `setting`; None when it does (the flex backend's stats
    record it as engine.fa4_prefill)."""
    assert setting in ("auto", "on", "off"), setting
    return "fa4_prefill='off'" if setting == "off" else unsupported(device, head_dims)


class Unavailable(RuntimeError):
    """fa4_prefill='on' where FA4 cannot run; `why` is the guard's reason."""

    def __init__(self, why: str):
        self.why = why
        super().__init__(f"fa4_prefill='on' but FA4 cannot run the prefill: {why}; run where it can (a Hopper or "
                         f"Blackwell GPU with flash-attn-4, envs/fa4.yaml) or set the flex option fa4_prefill to "
                         f"'auto' (flex's Triton prefill where FA4 cannot run, the stats say why) or 'off'")


def use_fa4(setting: str, device, head_dims=()) -> bool:
    """Whether FA4 runs the prefill; raises Unavailable for 'on' where it cannot."""
    why = why_not(setting, device, head_dims)
    if why is not None and setting == "on":
        raise Unavailable(why)
    return why is None


def prefill_options(setting: str, device, options: dict, head_dims=()) -> tuple[dict, int]:
    """(kernel options, Q block size) for the prefill flex_attention call of layers with these head dims."""
    if use_fa4(setting, device, head_dims):
        return {**options, "BACKEND": "FLASH"}, FA4_Q_BLOCK
    return {k: v for k, v in options.items() if k != "BACKEND" or v != "FLASH"}, TRITON_Q_BLOCK
