"""One training job: run GRPO with one backend, write the stats contract (kind "train").

The driver (transformers, TRL) is imported only after the availability check: for unsloth that check
imports unsloth, which has to precede transformers and TRL in the process.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from ..backends import kernel_tuning
from ..core import envinfo, stats
from ..host import compile_cache as caches
from . import availability, timing
from .config import TrainSpec

if TYPE_CHECKING:
    from . import driver

CONTRACT = ("step", "loss", "reward", "reward_std", "kl", "grad_norm", "step_wall_s", "completion_len", "mem_gb")


def steps_done(run: driver.Run, steps: int) -> int:
    """The planned steps, or fewer where the wall budget stopped the run (wall_budget.py)."""
    stopped = (run.info.get("wall_budget") or {}).get("stopped_after_step")
    return stopped if stopped is not None else steps


def gate(run: driver.Run, spec: TrainSpec, steps: int) -> str | None:
    """A run whose trajectory cannot be compared reports no speed: finite gradients, every step it ran
    logged, finite loss, and the configured number of completions per step."""
    bad_step = run.info.get("nonfinite_grad_step")
    if bad_step is not None:
        first = run.info.get("nonfinite_grad_params") or ["?"]
        return (f"non-finite gradient at optimizer step {bad_step} (before clipping in {len(first)} parameter(s), "
                f"first {first[0]}): its update was dropped and training stopped there (finite_grads.py); the "
                f"stats hold every step up to it, that one with its loss and non-finite grad norm")
    # a non-finite gradient, clipped by its total norm, reaches every weight: the run trained a corrupted policy
    # from that step on (the H200 learn run of results/published/h200-2026-12-01-session6 went on `ok` for 72 steps)
    nan_norm = [s["step"] for s in run.steps if "grad_norm" in s.get("nonfinite", ())]  # stats_callback.records
    update = run.info.get("adapter_update_norm")
    if nan_norm or (isinstance(update, float) and not math.isfinite(update)):
        return (f"non-finite gradient norm at step(s) {nan_norm[:5]} (adapter update norm {update}): the optimizer "
                f"applied it, so every later step trained a corrupted policy")
    done = steps_done(run, steps)
    if len(run.steps) != done:
        return f"{len(run.steps)} step records for {done} optimizer steps"
    bad = [s["step"] for s in run.steps if s["loss"] is None]
    if bad:
        return f"loss missing or non-finite at step(s) {bad}"
    want = spec.batch_size * spec.gradient_accumulation_steps
    wrong = [(s["step"], s["n_completions"]) for s in run.steps if s.get("n_completions") != want]
    if wrong:
        return f"expected {want} completions per step, got (step, count) {wrong}"
    return None


def run_job(*, backend: str, model: str, workload: dict, model_dir: str, adapter_dir: str | None,
            dataset_dir: str, steps: int, out: str, variant: str = "default",
            max_wall_s: float | None = None, autotune: str | None = None, compile_cache: dict | None = None) -> dict:
    """autotune: a kernel_tuning record whose decode kernel options the flex rollout engine replays, as a
    generation job of as many rows (one rollout's), unless the workload's engine options set them.
    compile_cache: what compile_cache.use said of the job's caches (recorded)."""
    record = stats.base("train", backend=backend, variant=variant, model=model, workload=workload)
    if compile_cache:
        record["compile_cache"] = compile_cache
    reason = availability.unavailable(backend, envinfo.gpu_info()["gpu_count"], model_dir)
    if reason:
        return stats.finish(stats.skipped(record, reason), out)

    from . import driver

    spec = TrainSpec.from_workload(workload)
    if autotune:
        if backend != "flex":
            raise ValueError(f"--autotune: only the flex rollout replays an autotune record, not {backend}: drop it")
        engine, record["autotune"] = kernel_tuning.replay(autotune, spec.batch_size * spec.gradient_accumulation_steps,
                                                          spec.options.get("engine", {}))
        spec = dataclasses.replace(spec, options={**spec.options, "engine": engine})
    run = driver.train(backend, spec, model_dir=model_dir, adapter_dir=adapter_dir or None,
                       dataset_dir=dataset_dir, steps=steps, max_wall_s=max_wall_s)
    record.update(run.info, steps_planned=steps)
    if compile_cache:  # what the run compiled, whether or not it passes its gate
        record["compile_cache"] = caches.settle(compile_cache)
    record["steps"] = [{**{k: s.get(k) for k in CONTRACT}, **s} for s in run.steps]
    bad = gate(run, spec, steps)
    if bad:
        return stats.finish(stats.failed(record, bad), out)
    median, window = timing.median_step(run.steps)
    record.update(median_step_s=round(median, 4), median_step_window=window, train_wall_s=run.train_wall_s,
                  peak_memory_gb=run.peak_memory_gb, timed_s=run.train_wall_s)
    age = envinfo.process_age_s()
    if age is not None:  # the process's wall but its training loop: imports, loads, engines, compiles
        record["setup_s"] = round(max(0.0, age - run.train_wall_s), 3)
    return stats.finish(record, out)
