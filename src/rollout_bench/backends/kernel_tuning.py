"""The autotune record replayed: the decode kernel options the autotune pass (diagnostics/autotune.py) measured
once per model and GPU, in every flex job of that model.

`options_for` picks the entry a flex job of batch size B replays: the smallest tuned batch >= B, else the
largest; `replay` merges it into a job's engine options (generation jobs, and GRPO's flex rollout for the rows one
rollout decodes). A record made without CUDA says so and replays nothing.
"""
from ..core import stats


def options_for(tuned: dict, batch_size: int) -> dict:
    """Decode kernel options a flex job of `batch_size` sequences replays from a `run` record."""
    if tuned.get("status") != "ok" or not tuned.get("by_batch"):
        return {}
    sizes = sorted(int(b) for b in tuned["by_batch"])
    pick = next((b for b in sizes if b >= batch_size), sizes[-1])
    return dict(tuned["by_batch"][str(pick)]["best"])


def load(path) -> dict:
    return stats.read_json(path)  # a corrupt record fails naming the file


def replay(path, batch_size: int, options: dict) -> tuple[dict, dict]:
    """A flex job's decode kernel options with the record at `path` replayed for `batch_size` rows, unless
    `options` (the job's own engine options) set decode_kernel_options themselves; and what the job's stats
    record of it (`autotune`: the file, its status, what was tuned for that size and what was replayed)."""
    tuned = load(path)
    picked = options_for(tuned, batch_size)
    own = "decode_kernel_options" in options
    info = {"file": str(path), "status": tuned["status"], "replayed": {} if own else picked, "tuned": picked}
    if picked and not own:
        options = {**options, "decode_kernel_options": picked}
    return options, info


def table(tuned: dict) -> dict:
    """{batch size: options} of every batch a `run` record tuned (none where it did not run)."""
    if tuned.get("status") != "ok":
        return {}
    return {int(b): dict(r["best"]) for b, r in (tuned.get("by_batch") or {}).items()}


def replay_by_batch(path, batch_sizes: list[int], options: dict) -> tuple[dict, dict]:
    """One engine serving several batch sizes (a generation job's cells): the record's whole table as the engine's
    decode_kernel_options_by_batch, so that each decode bucket is captured with the entry `options_for` gives it,
    unless `options` set decode_kernel_options themselves; and per batch size what its cell's stats record of it
    (as `replay` gives it)."""
    tuned = load(path)
    own = "decode_kernel_options" in options or "decode_kernel_options_by_batch" in options
    info = {}
    for b in batch_sizes:
        picked = options_for(tuned, b)
        info[b] = {"file": str(path), "status": tuned["status"], "replayed": {} if own else picked, "tuned": picked}
    by_batch = table(tuned)
    if by_batch and not own:
        options = {**options, "decode_kernel_options_by_batch": by_batch}
    return options, info
