"""Which GRPO rollout backends can run here, and if not, why and what would make them run.

Mirrors `rollout_bench.backends`: the reason names the missing piece and the fix; `fingerprint`
is the Snakemake param that re-runs a `skipped` job when packages or GPUs change.
"""
import importlib

from ..backends import host_fingerprint, host_reason

NAMES = ("hf_generate", "transformers_cb", "flex", "vllm", "unsloth")
CORE = ("torch", "transformers", "peft", "trl")
REQUIRES = {
    "hf_generate": CORE,
    "transformers_cb": CORE,
    "flex": CORE,
    "vllm": CORE + ("vllm",),
    "unsloth": CORE + ("unsloth",),
}
NEEDS_GPU = {"hf_generate": False, "transformers_cb": False, "flex": False, "vllm": True, "unsloth": True}


def unavailable(backend: str, gpu_count: int, model_dir: str | None = None) -> str | None:
    """Why GRPO on `backend` cannot run here (or on `model_dir`'s model, when given); None when it can."""
    assert backend in NAMES, f"unknown GRPO backend {backend!r}; known: {', '.join(NAMES)}"
    reason = host_reason(backend, REQUIRES[backend], NEEDS_GPU[backend], gpu_count, _install(backend))
    if reason:
        return f"GRPO backend {backend}: {reason}"
    if backend == "transformers_cb" and model_dir is not None:
        from ..backends import paged_cache

        # TRL's transformers_cb rollouts build the same paged cache as the generation backend
        reason = paged_cache.unsupported(model_dir)
        return f"GRPO backend transformers_cb: {reason}" if reason else None
    if backend == "vllm" and model_dir is not None:
        from ..backends import vllm

        # TRL's colocated vLLM builds the same ModelConfig from the model dir as the generation backend
        reason = vllm.unsupported(model_dir)
        return f"GRPO backend vllm: {reason}" if reason else None
    if backend == "flex":  # the project's own code: an import error fails the job with its traceback
        importlib.import_module("rollout_bench.engine").Engine  # noqa: B018
    if backend == "unsloth":
        from ..backends import unsloth

        # imports unsloth, which must come before transformers/TRL so its patches (and its GRPOTrainer) apply
        reason = unsloth.unavailable("default", gpu_count)
        return f"GRPO backend unsloth: {reason}" if reason else None
    return None


def _install(backend: str) -> str | None:
    """How to install a backend that has its own environment: its generation backend's recipe."""
    if backend == "vllm":
        from ..backends import vllm

        return vllm.INSTALL
    if backend == "unsloth":
        from ..backends import unsloth

        return unsloth.INSTALL
    return None


def fingerprint(backend: str) -> str:
    return host_fingerprint(REQUIRES[backend])
