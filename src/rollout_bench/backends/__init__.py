"""Generation backends, one module each (DESIGN.md section 1).

A backend module provides:
    REQUIRES: tuple[str, ...]   distributions it imports (their versions key the skip re-check)
    NEEDS_GPU: bool
    VARIANTS: tuple[str, ...]   variant ids (path-safe)
    unavailable(variant, gpu_count) -> str | None
        why it cannot run here *and what would make it run*; None when it can.
    load(spec: GenSpec) -> generator with
        generate(prompts: list[list[int]], n: int) -> list[list[int]]
            n completions per prompt, prompt-major, token ids without the prompt;
        memory() -> dict  (optional) engine-reserved bytes, e.g. {"reserved_gb": 12.3}
        close()  (optional)
"""
import importlib

from .. import envinfo

NAMES = ("hf_generate", "hf_static", "transformers_cb", "cb_sync", "flex", "vllm", "unsloth")


def module(name: str):
    assert name in NAMES, name
    return importlib.import_module(f"{__name__}.{name}")


def missing_packages(mod) -> list[str]:
    return [p for p in mod.REQUIRES if envinfo.version(p) is None]


def unavailable(name: str, variant: str, gpu_count: int) -> str | None:
    mod = module(name)
    if variant not in mod.VARIANTS:
        return f"unknown variant {variant!r} for backend {name}; known: {', '.join(mod.VARIANTS)}"
    missing = missing_packages(mod)
    if missing:
        return (f"package(s) {', '.join(missing)} not installed; install the '{name}' environment "
                f"(envs/) and rerun: the job re-runs when the package versions change")
    if mod.NEEDS_GPU and gpu_count == 0:
        return f"{name} needs a CUDA GPU and none is visible; run on a GPU host with --resources gpu=N"
    return mod.unavailable(variant, gpu_count)


def fingerprint(name: str) -> str:
    """What decides whether `name` can run here; a change re-runs its jobs (a Snakemake param)."""
    mod = module(name)
    extra = [dist for dist, _ in getattr(mod, "VARIANT_REQUIRES", {}).values()]
    pkgs = ",".join(f"{p}={envinfo.version(p)}" for p in (*mod.REQUIRES, *extra))
    return f"{pkgs};gpus={envinfo.physical_gpu_count()}"
