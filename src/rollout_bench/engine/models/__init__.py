"""Per-architecture pieces of the layer walk (models/arch.py says which); model_runner.py stays generic."""
from . import gemma4, llama, qwen3
from .arch import Arch, LayerPlan

ARCHS = {"qwen3": qwen3.ARCH, "llama": llama.ARCH, "gemma4_text": gemma4.ARCH}


def arch(model_type: str) -> Arch:
    if model_type not in ARCHS:
        raise NotImplementedError(f"flex engine: no attention patch for model_type {model_type!r} "
                                  f"({', '.join(ARCHS)})")
    return ARCHS[model_type]


__all__ = ["ARCHS", "Arch", "LayerPlan", "arch"]
