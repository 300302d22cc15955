"""Unsloth `FastLanguageModel`, fast_inference=False: Unsloth's own HF inference path (Triton
RMSNorm/RoPE, its KV cache, fused LoRA linears), the path that backs Unsloth's GRPO sampling.

LoRA: `get_peft_model` with the shared adapter's r/alpha/targets, then the adapter's tensors are
copied in, so every backend runs the same weights. Variant `4bit` loads the base through
bitsandbytes (LoRA stays in 16 bit).

Importing unsloth patches transformers and replaces trl's trainers process-wide, so only this
module imports it, and each job is its own process.
"""
import json
import os
import re
from pathlib import Path

from ..core import envinfo

REQUIRES = ("torch", "unsloth")
NEEDS_GPU = True
VARIANTS = ("default", "4bit")
ENV = {"UNSLOTH_DISABLE_STATISTICS": "1", "HF_HUB_OFFLINE": "1"}  # GPU hosts have no network
INSTALL = ("install the 'unsloth' group: conda env envs/unsloth.yaml, or offline "
           "`python -m rollout_bench.host.wheelhouse build unsloth --constraints <host packages>` here, carry "
           "it, then `bash workflow/scripts/offline_gpu_host.sh` on the GPU host (README: Offline GPU hosts)")


def unavailable(variant, gpu_count):
    if variant == "4bit" and envinfo.version("bitsandbytes") is None:
        return f"package(s) bitsandbytes not installed; {INSTALL}"
    from . import BrokenBackend

    _set_env()
    try:
        import unsloth  # noqa: F401  (first, before transformers is patched by anything else)
    except Exception as e:  # ImportError on version caps, CUDA libraries, ...: a failure, not a skip
        raise BrokenBackend(f"unsloth {envinfo.version('unsloth')} is installed but does not import "
                            f"({type(e).__name__}: {str(e).strip()[:300]}); {INSTALL}") from e
    if variant == "4bit":
        try:
            import bitsandbytes  # noqa: F401
        except Exception as e:
            return f"variant 4bit needs a working bitsandbytes ({type(e).__name__}: {e}); {INSTALL}"
    return None


def _set_env():
    for k, v in ENV.items():
        os.environ.setdefault(k, v)


def core_key(name: str) -> str:
    """One name for a LoRA tensor however it is wrapped: PEFT's saved
    `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight` and the live parameter
    `base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight` both give
    `layers.0.self_attn.q_proj.lora_A.weight`."""
    while name.startswith("base_model.model."):
        name = name[len("base_model.model."):]
    name = name.removeprefix("model.")
    return re.sub(r"\.(lora_[AB]|lora_embedding_[AB]|lora_magnitude_vector)\.[^.]+\.(?=.)", r".\1.", name)


def copy_adapter(model, tensors: dict) -> int:
    """Copy the adapter's tensors into the model's LoRA parameters; every tensor must find its
    parameter (same core name and shape) and every LoRA parameter must be filled."""
    import torch

    own: dict[str, list] = {}
    for name, p in model.named_parameters():
        if ".lora_" in name:
            own.setdefault(core_key(name), []).append(p)
    unmatched, copied = [], 0
    with torch.no_grad():
        for key, t in tensors.items():
            targets = [p for p in own.get(core_key(key), []) if tuple(p.shape) == tuple(t.shape)]
            if not targets:
                unmatched.append(key)
            for p in targets:
                p.copy_(t.to(device=p.device, dtype=p.dtype))
                copied += 1
    n_own = sum(map(len, own.values()))
    if unmatched or copied != n_own:
        raise ValueError(f"adapter does not fit the model's LoRA layers: {len(unmatched)} of {len(tensors)} adapter "
                         f"tensors unmatched (first: {unmatched[:1]}), {copied} of {n_own} LoRA parameters filled")
    return copied


def adapter_config(adapter_dir) -> dict:
    return json.loads((Path(adapter_dir) / "adapter_config.json").read_text())


def load_model(spec):
    _set_env()
    import torch
    from unsloth import FastLanguageModel

    model, _ = FastLanguageModel.from_pretrained(
        model_name=spec.model_dir, max_seq_length=spec.max_seq_len, dtype=getattr(torch, spec.dtype),
        load_in_4bit=spec.variant == "4bit", fast_inference=False, **spec.options.get("from_pretrained", {}))
    if spec.adapter_dir:
        from safetensors.torch import load_file

        cfg = adapter_config(spec.adapter_dir)
        model = FastLanguageModel.get_peft_model(
            model, r=cfg["r"], lora_alpha=cfg["lora_alpha"], target_modules=cfg["target_modules"],
            lora_dropout=0.0, bias=cfg.get("bias", "none"), use_rslora=bool(cfg.get("use_rslora", False)),
            use_gradient_checkpointing=False, random_state=spec.sampling.seed)
        copy_adapter(model, load_file(str(Path(spec.adapter_dir) / "adapter_model.safetensors")))
    FastLanguageModel.for_inference(model)
    return model


def weights_info(model) -> dict:
    """What was loaded: bytes of the weights as stored (a 4-bit base packs two values a byte) and
    how many linears bitsandbytes quantised, so a `4bit` row shows it ran 4-bit."""
    tensors = list(model.parameters()) + list(model.buffers())
    return {"weights_gb": round(sum(t.numel() * t.element_size() for t in tensors) / 1e9, 3),
            "linear4bit_modules": sum(type(m).__name__ == "Linear4bit" for m in model.modules())}


class Generator:
    """hf_model's batched, left-padded model.generate (the HF rows' driver) on Unsloth's model."""

    def __init__(self, spec):
        from . import hf_model

        self._gen = hf_model.Generator(spec, model=load_model(spec))
        self.model = self._gen.model
        self._info = weights_info(self.model)

    def generate(self, prompts, n):
        return self._gen.generate(prompts, n)

    def info(self) -> dict:
        return self._info


def load(spec):
    return Generator(spec)
