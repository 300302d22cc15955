"""One cell of a generation job measured on a built generator: warm up, time `rounds` rounds (again, up to
spread_retries times, while the rounds spread more than max_round_spread), and the stats fields of what it did.

generation/job.py builds the generator once and runs its cells through `measure_cell`, in order.
"""
import statistics
import time
from dataclasses import dataclass

from ..core import envinfo
from ..core.workload import GenSpec, Sampling
from ..host import isolation
from . import round_probe, trace


def spec_from_workload(wl: dict, model_dir: str, adapter_dir: str | None, variant: str,
                       eos_token_id: int, pad_token_id: int, max_prompt_tokens: int) -> GenSpec:
    return GenSpec(
        model_dir=model_dir,
        adapter_dir=adapter_dir if wl["lora_rank"] > 0 else None,
        variant=variant,
        batch_size=wl["batch_size"],
        max_new_tokens=wl["max_new_tokens"],
        sampling=Sampling(**wl["sampling"]),
        ignore_eos=wl["ignore_eos"],
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        max_prompt_tokens=max_prompt_tokens,
        num_generations=wl["num_generations"],
        device=wl["device"],
        dtype=wl["dtype"],
        options=wl.get("options", {}),
        per_request_lengths=bool(wl.get("trace")),
        rows=wl["n_prompts"] * wl["num_generations"] if "n_prompts" in wl else None,
    )


@dataclass
class Built:
    """A generator built (and gated) before its first cell, and the peak memory of the build itself, so the first
    cell's peak_memory_gb still covers load + compile + capture."""
    gen: object
    peak_allocated: float | None = None
    peak_reserved: float | None = None
    seconds: float = 0.0  # the build's wall: weights loaded, compiled, graphs captured


def build(gen_factory, spec: GenSpec) -> Built:
    cuda = envinfo.cuda()
    t0 = time.perf_counter()
    if cuda:
        cuda.reset_peak_memory_stats()
    gen = gen_factory(spec)
    if cuda:
        cuda.synchronize()
        return Built(gen, cuda.max_memory_allocated(), cuda.max_memory_reserved(), time.perf_counter() - t0)
    return Built(gen, seconds=time.perf_counter() - t0)


@dataclass
class Draws:
    """Each completion's token budget where the cell replays a trace (workload.trace), else none: draw 0 is the
    warm-up's, then one per timed round (every attempt the same draws). A pure function of the workload, so every
    engine gets the same budgets, whichever attempt it reports."""
    workload: dict

    def budgets(self, draw: int, prompts: list[list[int]]) -> list[int] | None:
        t = self.workload.get("trace")
        if not t:
            return None
        return trace.lengths(t, len(prompts) * self.workload["num_generations"],
                             self.workload["sampling"]["seed"], draw)


def call(gen, prompts: list[list[int]], n: int, budgets: list[int] | None) -> list[list[int]]:
    """One generate call; budgets only to generators that take them (per_request_lengths)."""
    return gen.generate(prompts, n) if budgets is None else gen.generate(prompts, n, max_new_tokens=budgets)


def timed_rounds(gen, rounds: list[list[list[int]]], n: int, sync, draws: Draws):
    """-> (walls, last round's outputs, per-round records, isolation window, last round's budgets): one generate
    call per round, round i with draw 1 + i."""
    walls, outs, budgets = [], None, None
    per_round = []
    with isolation.window() as window:  # the other leases that overlap the rounds are named in the stats
        for i, prompts in enumerate(rounds):
            budgets = draws.budgets(1 + i, prompts)
            sync()
            with round_probe.probe() as process:
                t = time.perf_counter()
                outs = call(gen, prompts, n, budgets)
                sync()
                wall = time.perf_counter() - t
            assert len(outs) == len(prompts) * n, (len(outs), len(prompts), n)
            walls.append(wall)
            rec = {"wall_s": round(wall, 6), "decoded_tokens": sum(map(len, outs)),
                   "prompt_tokens": sum(map(len, prompts)) * n, "process": process}
            if budgets is not None:
                rec["budgets"] = {"digest": trace.digest(budgets), "tokens": sum(budgets)}
            per_round.append(rec)
    return walls, outs, per_round, window, budgets


def spread(walls: list[float]) -> float:
    """The slowest round over the fastest, less 1."""
    return max(walls) / min(walls) - 1


def measure_cell(gen, spec: GenSpec, workload: dict, attempts: list[list[list[list[int]]]], warmup: list[list[int]],
                 cuda) -> dict:
    """Warm the cell up, then time its rounds: `attempts` holds a set of rounds per allowed attempt (each its own
    prompts); the next set runs while the last one's rounds spread more than workload.max_round_spread. The
    fields describe the last attempt; `attempts` in them records every one."""
    sync = cuda.synchronize if cuda else (lambda: None)
    n, draws = spec.num_generations, Draws(workload)
    t_cell = time.perf_counter()
    getattr(gen, "prepare", lambda s: None)(spec)  # e.g. flex captures this cell's sampling path
    sync()
    t_prepared = time.perf_counter()
    if warmup:
        call(gen, warmup, n, draws.budgets(0, warmup))
    sync()
    frozen = round_probe.freeze_heap()  # inside setup: the timed rounds start on a frozen heap
    t_first = time.perf_counter()
    limit, tried = workload.get("max_round_spread"), []
    for rounds in attempts:  # every attempt replays draws 1.. again: its budgets are the other engine's too
        walls, outs, per_round, window, budgets = timed_rounds(gen, rounds, n, sync, draws)
        tried.append({"rounds": per_round, "round_spread": round(spread(walls), 4)})
        if limit is None or spread(walls) <= limit:
            break
    timed_s = sum(r["wall_s"] for a in tried for r in a["rounds"])
    decoded = round(statistics.mean(r["decoded_tokens"] for r in per_round))
    n_prompt_tokens = round(statistics.mean(r["prompt_tokens"] for r in per_round))
    # Each round has its own prompts, and with EOS on its own completion lengths: a rate is each round's tokens
    # over its own wall, and the cell's the median of those (under ignore_eos, decoded tokens / median wall)
    decode_rates = [r["decoded_tokens"] / w for r, w in zip(per_round, walls)]
    return {
        "outputs": outs,
        "prompts": rounds[-1],  # the last round's, whose outputs these are
        "budgets": budgets,
        "t_first_round": t_first,
        "phases": {"prepare_s": t_prepared - t_cell, "warmup_s": t_first - t_prepared},
        "fields": {
            "batch_size": spec.batch_size,
            "n_prompts": len(attempts[0][0]),
            "n_prompt_tokens": n_prompt_tokens,
            "n_decoded_tokens": decoded,
            "rounds": per_round,
            "attempts": tried,
            "round_spread": tried[-1]["round_spread"],
            "spread_ok": limit is None or tried[-1]["round_spread"] <= limit,
            "median_wall_s": round(statistics.median(walls), 6),
            "best_wall_s": round(min(walls), 6),
            "decode_tps": round(statistics.median(decode_rates), 2),
            "decode_tps_best": round(max(decode_rates), 2),
            "prompt_tps": round(statistics.median(r["prompt_tokens"] / w for r, w in zip(per_round, walls)), 2),
            "timed_s": round(timed_s, 3),
            "gc_frozen_objects": frozen,
            "isolation": isolation.record(window),
        },
    }


def memory(gen, cuda, built: Built | None) -> tuple[dict, dict]:
    """-> (peak GB, the engine's info): torch's peaks over the cell (and the build, for the first), beside the
    engine's own pool."""
    peak = {"allocated": None, "reserved": None}
    if cuda:
        b = built or Built(None)
        peak = {"allocated": round(max(cuda.max_memory_allocated(), b.peak_allocated or 0) / 1e9, 3),
                "reserved": round(max(cuda.max_memory_reserved(), b.peak_reserved or 0) / 1e9, 3)}
    engine_info = {**getattr(gen, "info", lambda: {})(), **getattr(gen, "memory", lambda: {})()}
    # the engine's own pool (KV blocks, vLLM's reservation) sits beside torch's peak counters
    for k, v in engine_info.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (k == "reserved" or k.endswith("_gb")):
            peak["engine_reserved_gb" if k == "reserved" else k] = v
    return peak, engine_info


def check_lengths(outs: list[list[int]], spec: GenSpec, budgets: list[int] | None = None) -> str | None:
    """With ignore_eos every backend must decode exactly its budget per sequence: max_new_tokens, or each
    completion's own (a trace)."""
    if not spec.ignore_eos:
        return None
    want = budgets or [spec.max_new_tokens] * len(outs)
    bad = [i for i, (o, w) in enumerate(zip(outs, want)) if len(o) != w]
    if bad:
        what = "its own budget" if budgets else f"max_new_tokens={spec.max_new_tokens}"
        return (f"ignore_eos is set but {len(bad)} of {len(outs)} completions do not have {what} tokens "
                f"(first: #{bad[0]} has {len(outs[bad[0]])}, wants {want[bad[0]]})")
    return None


def measure(gen_factory, spec: GenSpec, rounds: list[list[list[int]]], warmup: list[list[int]],
            workload: dict | None = None) -> dict:
    """One cell on a generator built for it alone: build, warm up, time the rounds, close. setup_s covers
    build and warm-up."""
    cuda = envinfo.cuda()
    workload = workload or {"num_generations": spec.num_generations, "sampling": spec.sampling.to_dict()}
    t0 = time.perf_counter()
    built = build(gen_factory, spec)
    if cuda:
        cuda.reset_peak_memory_stats()
    result = measure_cell(built.gen, spec, workload, [rounds], warmup, cuda)
    peak, engine_info = memory(built.gen, cuda, built)
    getattr(built.gen, "close", lambda: None)()
    result["fields"].update(engine=engine_info, peak_memory_gb=peak,
                            setup_s=round(result["t_first_round"] - t0, 3))
    return result
