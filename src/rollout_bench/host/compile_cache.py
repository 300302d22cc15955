"""Compile caches every GPU job shares (config `cache_dir`): start-up paid once per host, not once per job.

flex compiles its layer code and flex-attention kernels with Inductor and Triton, and vLLM compiles its model with
torch.compile; each library keeps what it compiled on disk, keyed by what it compiled, and reuses it in a later
process. `use` points them all under one directory before anything compiles (a variable the user set stays as it
is) and says whether the job found anything there; `settle`, at the job's end, what it added: its stats record both,
so a set-up time can be read as a cold start, a warm one, or a warm directory that still lacked this job's kernels
(files found, and files added: the job compiled what no earlier job had).
"""
import os
from pathlib import Path

VARS = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton", "VLLM_CACHE_ROOT": "vllm"}


def files_under(paths) -> int:
    return sum(len(files) for p in paths for _, _, files in os.walk(p))


def use(cache_dir: str | None, environ=os.environ) -> dict:
    """Set the libraries' cache variables under `cache_dir` -> what the job's stats record: the directories, the
    files in each at the job's start, and each one's `state`: warm (something cached) or cold; `default` where no
    cache_dir is configured (each library's own default then)."""
    if not cache_dir:
        return {"dir": None, "state": "default"}
    root = Path(cache_dir).resolve()
    dirs = {}
    for var, sub in VARS.items():
        environ.setdefault(var, str(root / sub))
        dirs[var] = environ[var]
        Path(dirs[var]).mkdir(parents=True, exist_ok=True)
    # per library: a vLLM job finds flex's Inductor kernels under the same root, which do not warm its own start
    files = {var: files_under([d]) for var, d in dirs.items()}
    return {"dir": str(root), "dirs": dirs, "files_at_start": files,
            "state": {var: "warm" if n else "cold" for var, n in files.items()}}


def settle(cache: dict | None) -> dict | None:
    """`cache` (what `use` said at the job's start) with the files each library added since: `files_added`, and
    `compiled` per library (True: the job compiled and wrote something the cache lacked; False: every compile it
    made, if any, was a hit or it made none). A directory warm at the start can still miss a job's own kernels.
    The directories are shared: where GPU jobs run at once (`--resources gpu=N`, N > 1, or several slots a GPU), a
    job also counts what the others wrote meanwhile, so `compiled` is the job's own only where it ran alone."""
    if not cache or not cache.get("dirs"):
        return cache
    added = {var: files_under([d]) - cache["files_at_start"][var] for var, d in cache["dirs"].items()}
    return {**cache, "files_added": added, "compiled": {var: n > 0 for var, n in added.items()}}


def snapshot(environ=os.environ) -> dict:
    """The cache variables as the user set them (None: unset), before anything imports torch."""
    return {var: environ.get(var) for var in VARS}


def restore(before: dict, environ=os.environ) -> None:
    """Undo what an import did to the cache variables since `snapshot`: importing torch's Inductor sets
    TORCHINDUCTOR_CACHE_DIR to its default in the importing process (Snakemake's, whose config checks import the
    engine), and every job would inherit that instead of cache_dir."""
    for var, value in before.items():
        if value is None:
            environ.pop(var, None)
        else:
            environ[var] = value
