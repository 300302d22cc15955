"""Generation backends, one module each (docs/design.md §5; adding one: §12). Beside them: `hf_model` and
`paged_cache` (what several share) and `kernel_tuning` (the autotune record a flex engine replays).

A backend module provides:
    REQUIRES: tuple[str, ...]   distributions it imports (their versions key the skip re-check)
    NEEDS_GPU: bool
    VARIANTS: tuple[str, ...]   variant ids (path-safe)
    INSTALL: str  (optional) how to install what REQUIRES names; the skip reason shows it
    VARIANT_REQUIRES: dict  (optional) variant -> (distribution, how to install it): what it imports beyond REQUIRES
    ENV_GROUPS: dict  (optional) variant -> the environment group (envs/GROUP.yaml) its jobs run in; else the
        backend's own (env_group)
    unavailable(variant, gpu_count) -> str | None
        why it cannot run here *and what would make it run*; None when it can. Asked only once
        REQUIRES are installed and, with NEEDS_GPU, a GPU is visible (host_reason says so first).
    alone_on_gpu(options: dict) -> bool  (optional) with these options (the job's `options`) it cannot share
        its GPU with other jobs where a GPU takes several (gpu.jobs_per_gpu > 1): its GPU lease takes every
        slot (GRPO's backend of that name too, asked with train.options)
    unsupported(model_dir) -> str | None  (optional)
        why it cannot run this model (its architecture, read from the config alone) and what would
        make it run; None when it can. Asked last, before anything loads.
    unsupported_spec(spec: GenSpec) -> str | None  (optional)
        why it cannot run this job's settings (its dtype, an adapter) and what would make it run;
        None when it can. Asked once the job's spec is built, before anything loads.
    load(spec: GenSpec) -> generator with
        generate(prompts: list[list[int]], n: int) -> list[list[int]]
            n completions per prompt, prompt-major, token ids without the prompt;
        memory() -> dict  (optional) engine-reserved bytes, e.g. {"reserved_gb": 12.3}
        close()  (optional)
        retarget(spec) -> bool  (optional) take the next cell of its job (same_engine, within what it was built
            for) without a rebuild; False: the job builds a generator for that cell
        prepare(spec)  (optional) before a cell's warm-up: whatever its first timed round must not pay for
        row_logprobs(rows) -> list[list[float]] | None  (optional, with LOGPROBS) the last call's logprob of each
            token of the rows asked for, None where its options turn them off (generation/mismatch.py scores them)
    RETARGET: bool  (optional) its generator retargets: the job builds it once, before its first cell (and gates
        it); without, the job builds one for each cell
    LOGPROBS: bool  (optional) its generator has row_logprobs: the model's mismatch job scores its cells
    PER_REQUEST_LENGTHS: bool  (optional) generate(prompts, n, max_new_tokens=[one per completion]) works (trace
        cases); a backend without it skips them
"""
import importlib

from ..core import envinfo

NAMES = ("hf_generate", "hf_static", "transformers_cb", "cb_sync", "flex", "vllm", "unsloth")


class BrokenBackend(RuntimeError):
    """A backend's package is installed but does not import: the job fails with the cause, it is not `skipped`
    (a skip is for what is absent by design: a package not installed, no GPU, a model it cannot run)."""


def module(name: str):
    assert name in NAMES, name
    return importlib.import_module(f"{__name__}.{name}")


def host_reason(what: str, requires, needs_gpu: bool, gpu_count: int, install: str | None = None) -> str | None:
    """Why `what` cannot run on this host (missing packages, no GPU) and what would make it run;
    `install`: how to install the packages, if more than their environment under envs/."""
    missing = [p for p in requires if envinfo.version(p) is None]
    if missing:
        install = install or f"install the '{what}' environment (envs/)"
        return (f"package(s) {', '.join(missing)} not installed; {install}, and rerun: the job re-runs when the "
                f"package versions change")
    if needs_gpu and gpu_count == 0:
        return f"{what} needs a CUDA GPU and none is visible; run on a GPU host with --resources gpu=N"
    return None


def variant_reason(variant_requires: dict, variant: str) -> str | None:
    """Why `variant` cannot run here where the distribution it imports beyond REQUIRES (a module's
    VARIANT_REQUIRES) is not installed, and how to install it; None when it is, or the variant needs none."""
    if variant not in variant_requires:
        return None
    dist, how = variant_requires[variant]
    return f"package {dist} is not installed; {how}, then rerun" if envinfo.version(dist) is None else None


def host_fingerprint(requires) -> str:
    """What decides whether a job can run here; a change re-runs it (a Snakemake param)."""
    pkgs = ",".join(f"{p}={envinfo.version(p)}" for p in requires)
    return f"{pkgs};gpus={envinfo.physical_gpu_count()}"


def unavailable(name: str, variant: str, gpu_count: int, model_dir: str | None = None) -> str | None:
    """Why backend `name` cannot run here (or on `model_dir`'s model, when given); None when it can."""
    mod = module(name)
    if variant not in mod.VARIANTS:
        return f"unknown variant {variant!r} for backend {name}; known: {', '.join(mod.VARIANTS)}"
    reason = (host_reason(name, mod.REQUIRES, mod.NEEDS_GPU, gpu_count, getattr(mod, "INSTALL", None))
              or mod.unavailable(variant, gpu_count))
    if reason or model_dir is None or not hasattr(mod, "unsupported"):
        return reason
    return mod.unsupported(model_dir)


def fingerprint(name: str) -> str:
    mod = module(name)
    extra = [dist for dist, _ in getattr(mod, "VARIANT_REQUIRES", {}).values()]
    return host_fingerprint((*mod.REQUIRES, *extra))


OWN_GROUPS = ("vllm", "unsloth")  # backends whose pins conflict with core's (vLLM pins torch exactly)


def env_group(name: str, variant: str) -> str:
    """The environment group (envs/GROUP.yaml) a job of backend `name`, variant `variant` runs in."""
    if name in OWN_GROUPS:
        return name
    return getattr(module(name), "ENV_GROUPS", {}).get(variant, "core")


def alone_on_gpu(name: str, options: dict) -> bool:
    """Whether a job of backend `name` with `options` must have its GPU alone (its lease takes every slot)."""
    ask = getattr(module(name), "alone_on_gpu", None)
    return bool(ask(options)) if ask else False


ENGINE_FIELDS = ("model_dir", "adapter_dir", "variant", "device", "dtype", "options")


def same_engine(built, spec) -> bool:
    """Whether a generator built for spec `built` runs `spec` as it would run one built for it: the same weights,
    adapter, variant, device, dtype and options (batch, lengths and sampling are each backend's own to check)."""
    return all(getattr(built, f) == getattr(spec, f) for f in ENGINE_FIELDS)
