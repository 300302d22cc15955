"""Plain `model.generate` with the LoRA adapter unmerged through PEFT: TRL's default rollout path."""
from .hf_model import Generator

REQUIRES = ("torch", "transformers", "peft")
NEEDS_GPU = False
VARIANTS = ("default",)


def unavailable(variant, gpu_count):
    return None


def load(spec):
    return Generator(spec)
