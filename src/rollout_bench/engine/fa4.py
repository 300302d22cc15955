"""Capability guard for the FlashAttention-4 prefill backend of flex_attention (BACKEND='FLASH').

FA4 is CuTeDSL code for Hopper and Blackwell (compute capability >= 9) shipped by flash-attn-4.
'auto' uses it where it can and falls back silently; 'on' falls back with a warning; 'off' never.
"""
import importlib.util
import warnings

import torch

FA4_Q_BLOCK = 256  # FA4's query tile; the prefill BlockMask uses it as its Q block size
TRITON_Q_BLOCK = 128


def importable() -> bool:
    try:
        return importlib.util.find_spec("flash_attn.cute") is not None
    except (ImportError, ValueError):
        return False


def unsupported(device) -> str | None:
    """Why FA4 prefill cannot run on `device`; None when it can."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        return f"compute capability {major}.{minor} < 9.0 (FA4 needs Hopper or Blackwell)"
    if not importable():
        return "flash-attn-4 is not installed (flash_attn.cute not importable)"
    return None


def use_fa4(setting: str, device) -> bool:
    assert setting in ("auto", "on", "off"), setting
    if setting == "off":
        return False
    why = unsupported(device)
    if why is None:
        return True
    if setting == "on":
        warnings.warn(f"fa4_prefill='on' but {why}; falling back to the Triton flex_attention prefill",
                      RuntimeWarning, stacklevel=2)
    return False


def prefill_options(setting: str, device, options: dict) -> tuple[dict, int]:
    """(kernel options, Q block size) for the prefill flex_attention call."""
    if use_fa4(setting, device):
        return {**options, "BACKEND": "FLASH"}, FA4_Q_BLOCK
    return {k: v for k, v in options.items() if k != "BACKEND" or v != "FLASH"}, TRITON_Q_BLOCK
