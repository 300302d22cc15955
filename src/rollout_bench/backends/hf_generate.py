"""Plain `model.generate` with the LoRA adapter unmerged through PEFT: TRL's default rollout path."""
from .hf_model import Generator

REQUIRES = ("torch", "transformers", "peft")
NEEDS_GPU = False
VARIANTS = ("default",)
RETARGET = True  # one generator serves a job's cells (retarget), built once
ONE_BUDGET_CALL = True  # generate(prompts, n, max_new_tokens=[m] * rows): the prefill probe's one-token call


def unavailable(variant, gpu_count):
    return None


def load(spec):
    return Generator(spec)
