"""One generation job: one process, one engine, every cell of (model, backend, variant, LoRA on or off).

The engine is built once, sized for the job's largest batch and longest sequence, gated once (engines we wrote),
then serves the cells in the config's order (measure.measure_cell), each cell's stats file written atomically
when it ends: a cell that fails is recorded `failed` with its reason and the next one runs; a job that dies leaves
no file for the cells it did not reach. A backend whose generator cannot take a cell it was not built for
(`retarget`) is rebuilt for it.

Time is accounted per cell without gaps: a cell's window runs from the end of the one before (the first's from
the process's start) to its own end; `setup_s` is the part before its first timed round (imports, load, compile,
capture and the gate for the first; warm-up for the rest), `timed_s` its timed rounds. The job's record
(jobs.GenGroup.record) lists its cells with both, beside the process's wall.
"""
import json
import time
import traceback
from dataclasses import dataclass, replace

from .. import backends
from ..backends import kernel_tuning
from ..core import atomic, envinfo, stats
from ..host import compile_cache as caches
from . import completions, logprob_sample, measure, prefill


@dataclass
class Cell:
    case: str
    workload: dict
    dataset: str
    out: str


class Clock:
    """perf_counter time since the process started, and its wall-clock date."""

    def __init__(self, started: float | None = None):
        age = envinfo.process_age_s()
        self.t0 = started if started is not None else time.perf_counter() - (age or 0.0)
        self.wall0 = time.time() - (time.perf_counter() - self.t0)

    def iso(self, t: float) -> str:
        return envinfo.utc_iso(self.wall0 + (t - self.t0))


def base_record(cell: Cell, backend: str, variant: str, model: str, clock: Clock, start: float, extra: dict) -> dict:
    record = stats.base("generate", backend=backend, variant=variant, model=model, workload=cell.workload,
                        case=cell.case)
    record.update(started_at=clock.iso(start), _t0=start, **extra)
    return record


def engine_spec(specs: list) -> object:
    """The spec an engine serving every one of `specs` is built for: the largest batch, longest prompt and budget."""
    return replace(specs[0], batch_size=max(s.batch_size for s in specs),
                   max_prompt_tokens=max(s.max_prompt_tokens for s in specs),
                   max_new_tokens=max(s.max_new_tokens for s in specs),
                   per_request_lengths=any(s.per_request_lengths for s in specs))


def lengths_reason(mod, backend: str, spec) -> str | None:
    if spec.per_request_lengths and not getattr(mod, "PER_REQUEST_LENGTHS", False):
        return (f"{backend} takes one max_new_tokens per generate call, and this trace case gives each completion a "
                f"budget of its own (workload.cases.<case>.trace); run it on flex or vllm")
    return None


@dataclass
class Plan:
    cell: Cell
    spec: object
    attempts: list
    warmup: list


def plan_cells(mod, backend: str, variant: str, cells: list[Cell], model_dir: str, adapter_dir: str | None,
               write) -> tuple[object, list[Plan]]:
    """(the tokenizer, prompts and spec of every cell the backend can run); a cell it cannot is written `skipped`
    at once."""
    from ..assets import prompts as prompt_assets

    templates = {c.workload["chat_template"] for c in cells}
    assert len(templates) == 1, f"one chat template a job, got {templates}"
    tok = prompt_assets.load_tokenizer(model_dir, templates.pop())
    plans = []
    for c in cells:
        wl = c.workload
        try:
            sets, warmup = prompt_assets.select(tok, wl, c.dataset, sets=1 + wl.get("spread_retries", 0))
        except ValueError as e:  # too few prompts in the window: this cell's, the next may have enough
            write(c, "failed", str(e))
            continue
        longest = max(len(p) for ps in [*sum(sets, []), warmup] for p in ps)
        spec = measure.spec_from_workload(wl, model_dir, adapter_dir, variant, tok.eos_token_id,
                                          tok.pad_token_id, longest)
        reason = getattr(mod, "unsupported_spec", lambda spec: None)(spec) or lengths_reason(mod, backend, spec)
        if reason:
            write(c, "skipped", reason)
            continue
        plans.append(Plan(c, spec, sets, warmup))
    return tok, plans


def run_group(*, backend: str, variant: str, model: str, cells: list[Cell], model_dir: str,
              adapter_dir: str | None, out: str | None = None, autotune: str | None = None,
              compile_cache: dict | None = None, clock: Clock | None = None) -> dict:
    """Run every cell; -> the job's record (written to `out` when given). autotune: a kernel_tuning record whose
    entries the engine replays per decode bucket (flex), unless the workload's options set decode options."""
    clock = clock or Clock()
    cuda = envinfo.cuda()
    job = {"kind": "generate_job", "backend": backend, "variant": variant, "model": model,
           "started_at": clock.iso(clock.t0), "compile_cache": compile_cache, "env": envinfo.collect(), "cells": []}
    state = {"mark": clock.t0}  # where the next cell's window starts
    extra = {"compile_cache": compile_cache} if compile_cache else {}

    def finish(cell: Cell, record: dict, setup_s: float | None = None, timed_s: float = 0.0) -> dict:
        """Write the cell's stats; its job entry splits its window into set-up, timed rounds and the rest (what
        follows its last round: memory, the copy rate, its summary). A cell that did not time a round spent its
        whole window setting up."""
        now = time.perf_counter()
        wall = now - record["_t0"]
        setup_s = round(wall, 3) if setup_s is None else setup_s
        record["job"] = {"record": out, "index": len(job["cells"]), "cells": len(cells)}
        rec = stats.finish(record, cell.out)
        job["cells"].append({"out": cell.out, "case": cell.case, "batch_size": cell.workload["batch_size"],
                             "status": rec["status"], "setup_s": setup_s, "setup_phases": rec.get("setup_phases"),
                             "timed_s": round(timed_s, 3), "other_s": round(max(0.0, wall - setup_s - timed_s), 3),
                             "wall_s": round(wall, 3)})
        state["mark"] = now
        return rec

    def write(cell: Cell, status: str, reason: str) -> dict:
        record = base_record(cell, backend, variant, model, clock, state["mark"], extra)
        return finish(cell, {**record, "status": status, "reason": reason})

    reason = backends.unavailable(backend, variant, envinfo.gpu_info()["gpu_count"], model_dir)
    if reason:
        for c in cells:
            write(c, "skipped", reason)
        return close_job(job, clock, out)
    mod = backends.module(backend)
    tok, plans = plan_cells(mod, backend, variant, cells, model_dir, adapter_dir, write)
    if plans:
        espec = engine_spec([p.spec for p in plans])
        replayed = {}
        if autotune:
            options, replayed = kernel_tuning.replay_by_batch(autotune, [p.spec.batch_size for p in plans],
                                                              espec.options)
            espec = replace(espec, options=options)
            plans = [replace(p, spec=replace(p.spec, options=options)) for p in plans]
        serve(mod, espec, plans, replayed, tok, cuda, clock, state, extra, backend, variant, model, finish)
    return close_job(job, clock, out)


def serve(mod, espec, plans: list[Plan], replayed: dict, tok, cuda, clock: Clock, state: dict, extra: dict,
          backend: str, variant: str, model: str, finish) -> None:
    """Build (and gate) the engine, then run the planned cells in order on it. A backend that cannot serve several
    cells (no RETARGET) is built for each cell instead. A build or gate that raises fails every planned cell."""
    gate, gen, first = None, None, None
    try:
        if getattr(mod, "RETARGET", False):
            first = measure.build(mod.load, espec)
            gen = first.gen
            if hasattr(mod, "gate"):  # engines we wrote prove equality with HF before any speed is reported
                t0 = time.perf_counter()
                gate = {**mod.gate(espec, gen), "seconds": round(time.perf_counter() - t0, 3)}
    except Exception as e:  # noqa: BLE001 -- out of memory at the job's largest batch, say: every cell says so
        traceback.print_exc()
        from ..engine import fa4

        for plan in plans:
            record = base_record(plan.cell, backend, variant, model, clock, state["mark"], extra)
            if isinstance(e, fa4.Unavailable):  # fa4_prefill 'on' where FA4 cannot run: the guard's reason
                record["prefill_kernel"] = {"kernel": None, "reason": e.why}
            finish(plan.cell, stats.failed(record, f"building the job's engine ({espec.batch_size} rows, "
                                                   f"{espec.max_seq_len} tokens): {type(e).__name__}: {e}"[:2000]))
        return
    for plan in plans:
        cell = plan.cell
        record = base_record(cell, backend, variant, model, clock, state["mark"], extra)
        if plan.spec.batch_size in replayed:
            record["autotune"] = replayed[plan.spec.batch_size]
        if gate is not None:
            record["gate"] = gate
        if gate is not None and not gate["passed"]:
            finish(cell, stats.failed(record, f"correctness gate failed against HF on the same weights: "
                                              f"{json.dumps(gate)[:400]}"))
            continue
        try:
            gen, first = on_generator(mod, gen, first, plan.spec)
            rec, setup_s, timed_s = run_cell(mod, gen, plan, record, tok, cuda, first)
        except Exception as e:  # noqa: BLE001 -- one cell's failure is its result; the next cells still run
            traceback.print_exc()
            finish(cell, stats.failed(record, f"{type(e).__name__}: {e}"[:2000]))
            # what the cell left queued or half-decoded must not run inside the next cell's rounds
            if hasattr(gen, "abort"):
                gen.abort()
            elif gen is not None:  # no way to clear it: the next cell gets a generator of its own
                getattr(gen, "close", lambda: None)()
                gen = None
            first = None
            continue
        first = None  # only the first cell's peaks include the build
        finish(cell, rec, setup_s, timed_s)
    getattr(gen, "close", lambda: None)()


def on_generator(mod, gen, built, spec):
    """The generator for a cell: the job's, retargeted to the cell, or (a backend that cannot) one built for it,
    the old one closed first (its model freed)."""
    if gen is not None and getattr(gen, "retarget", lambda s: False)(spec):
        return gen, built
    if gen is not None:
        getattr(gen, "close", lambda: None)()
    del gen, built
    rebuilt = measure.build(mod.load, spec)
    return rebuilt.gen, rebuilt


def run_cell(mod, gen, plan: Plan, record: dict, tok, cuda, built) -> tuple[dict, float, float]:
    """-> (the cell's record, its set-up seconds, its timed seconds)."""
    from ..assets import prompts as prompt_assets

    if cuda:
        cuda.reset_peak_memory_stats()
    spec = plan.spec
    result = measure.measure_cell(gen, spec, plan.cell.workload, plan.attempts, plan.warmup, cuda)
    record["prefill_kernel"] = prefill.kernel(gen, record["backend"])  # no call into the engine
    setup_s = round(result["t_first_round"] - record["_t0"], 3)
    fields = result["fields"]
    peak, engine_info = measure.memory(gen, cuda, built)
    fields.update(engine=engine_info, peak_memory_gb=peak, setup_s=setup_s,
                  setup_phases=setup_phases(setup_s, result["phases"], built, record.get("gate")))
    bad = measure.check_lengths(result["outputs"], spec, result["budgets"])
    if bad:
        return stats.failed({**record, "attempts": fields["attempts"]}, bad), setup_s, fields["timed_s"]
    # engines we wrote: the timed round's own completions against HF (flex.Generator.check_round), never `ok` if not
    judged = getattr(gen, "check_round", lambda *a: None)(spec, result["prompts"], result["outputs"])
    if judged is not None:
        fields["round_gate"] = judged
        if not judged["passed"]:
            return (stats.failed({**record, "attempts": fields["attempts"], "round_gate": judged},
                                 round_gate_reason(judged)), setup_s, fields["timed_s"])
    record.update(fields)
    try:  # scored against the trainer by the model's mismatch job; the cell's speed stands without it
        if (smp := logprob_sample.sample(gen, spec, result["prompts"], result["outputs"])) is not None:
            record["logprob_sample"] = smp
    except Exception as e:  # noqa: BLE001 -- named in the stats, and the mismatch job says the cell has no sample
        traceback.print_exc()
        record["logprob_sample_error"] = f"{type(e).__name__}: {e}"[:500]
    record["completions"] = completions.summary(
        result["outputs"], eos_token_id=spec.eos_token_id, ignore_eos=spec.ignore_eos, batch_size=spec.batch_size,
        median_wall_s=record["median_wall_s"], engine_round=engine_info.get("last_round"))
    record["sample_completions"] = [prompt_assets.decode(tok, o)[:300] for o in result["outputs"][:3]]
    if prefill.wanted(plan.cell.workload):  # a prefill_rate case's cells only: the others call nothing more
        prefill_cell(mod, gen, spec, plan, result["prompts"], record, cuda)
    return record, setup_s, fields["timed_s"]


def prefill_cell(mod, gen, spec, plan: Plan, prompts: list, record: dict, cuda) -> None:
    """A prefill_rate cell's prefill: the engine's own name for its kernel, and the prefill-only call (after
    everything that reads the last round's outputs: its calls replace them)."""
    try:
        record["prefill_kernel"] = prefill.kernel(gen, record["backend"], ask_engine=True)
    except Exception as e:  # noqa: BLE001 -- the kernel read without the engine stands
        traceback.print_exc()
        record["prefill_kernel"] = {**record["prefill_kernel"],
                                    "reason": f"the engine did not name its kernel: {type(e).__name__}: {e}"[:300]}
    try:
        record["prefill"] = prefill.probe(gen, mod, record["backend"], spec, prompts, plan.warmup,
                                          cuda.synchronize if cuda else (lambda: None))
    except Exception as e:  # noqa: BLE001 -- named in the stats; the cell's speed stands without it
        traceback.print_exc()
        record["prefill"] = {"tps": None, "reason": f"the prefill-only call failed: {type(e).__name__}: {e}"[:500]}
        getattr(gen, "abort", lambda: None)()  # what it left queued must not run inside the next cell's rounds


def round_gate_reason(judged: dict) -> str:
    m = judged["first_mismatch"]
    if m is None:
        where = f"a token off by more than {judged['logit_tol']:.4g}"
    elif "logprob_error" in m:
        where = (f"row {m['row']}'s token at step {m['step']} has a logprob {m['logprob_error']} from HF "
                 f"{judged['reference']}'s (> {judged['logprob_tol']:.4g})")
    else:
        where = (f"row {m['row']}'s token at step {m['step']} is not HF {judged['reference']}'s argmax (its gap "
                 f"{m['gap']} > {judged['logit_tol']:.4g})")
    return (f"the timed round's completions diverge from HF in bucket {judged['bucket']}'s decode graphs: {where}; "
            f"{judged['mismatches']} of {judged['tokens']} tokens of rows {judged['rows']} fail")


def setup_phases(setup_s: float, cell: dict, built, gate: dict | None) -> dict:
    """Where a cell's set-up went: the engine's build and gate (the job's first cell pays them), the cell's own
    preparation (flex captures its sampling path) and warm-up; `before_s` is the rest: for the first cell the
    process's start (imports, tokenizer, prompts), for a later one the previous cell's tail."""
    paid = {"build_s": built.seconds if built else 0.0,
            "gate_s": gate["seconds"] if built and gate else 0.0, **cell}
    return {"before_s": round(max(0.0, setup_s - sum(paid.values())), 3), **{k: round(v, 3) for k, v in paid.items()}}


def close_job(job: dict, clock: Clock, out: str | None) -> dict:
    """The job's record: its cells' set-up and timed seconds beside the process's wall so far, and what it added to
    the compile caches."""
    job["compile_cache"] = caches.settle(job.get("compile_cache"))
    job["wall_s"] = round(time.perf_counter() - clock.t0, 3)
    job["setup_s"] = round(sum(c["setup_s"] for c in job["cells"]), 3)
    job["timed_s"] = round(sum(c["timed_s"] for c in job["cells"]), 3)
    if out:
        atomic.write_json(out, job)
    return job


def run_job(*, backend: str, variant: str, model: str, case: str, workload: dict, model_dir: str,
            adapter_dir: str | None, dataset_dir: str, out: str, autotune: str | None = None) -> dict:
    """A job of one cell (no job record); -> the cell's stats."""
    run_group(backend=backend, variant=variant, model=model, cells=[Cell(case, workload, dataset_dir, out)],
              model_dir=model_dir, adapter_dir=adapter_dir, autotune=autotune, clock=Clock(time.perf_counter()))
    return stats.read_json(out)
