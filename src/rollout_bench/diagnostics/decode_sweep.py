"""Decode kernel options by measurement: each candidate's whole decode step, as its CUDA graph.

The decode step's attention is one Triton flex-decoding kernel per layer, and its best tile sizes,
warps, stages and KV splits depend on the GPU and the batch. A candidate is timed as the replay of
the full captured step (attention, GEMMs, sampling) mid-generation on real page tables, in rounds
that interleave the candidates so that clock or cache drift does not favour whichever ran first.
The pipeline's `autotune` job records the winner per batch size; flex jobs replay it.
"""
import json
import statistics
import time

import torch

from ..core.workload import Sampling

# No USE_TMA (a misaligned TMA access would poison the CUDA context for what runs after it), no
# BLOCKS_ARE_CONTIGUOUS (wrong for paged KV, see EngineConfig).
CANDIDATES = (
    {},
    {"BLOCK_N": 64, "num_stages": 2, "num_warps": 4},
    {"BLOCK_N": 128, "num_stages": 2, "num_warps": 8},
    {"SPLIT_KV": 2},
    {"SPLIT_KV": 4},
    {"PRESCALE_QK": True},
)
MIN_GAIN = 0.02  # keep the default unless a candidate is this much faster


def device_ms(fn, repeat: int) -> float:
    """Mean milliseconds of fn() over `repeat` calls, by CUDA events (wall clock without CUDA)."""
    if not torch.cuda.is_available():
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        return 1e3 * (time.perf_counter() - t) / repeat
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat


def best_options(ms: dict[str, float | str], min_gain: float = MIN_GAIN, baseline: str = "{}") -> dict:
    """The fastest candidate (keys: JSON of the options) if it beats the baseline (default: the default
    options, '{}') by more than min_gain, else the baseline; entries that are error strings never win, and
    nothing beats a baseline that has no time."""
    timed = {k: v for k, v in ms.items() if isinstance(v, float)}
    if baseline not in timed:
        return json.loads(baseline)
    best = min(timed, key=timed.get)
    return json.loads(best if timed[best] < (1 - min_gain) * timed[baseline] else baseline)


def to_mid_generation(engine, prompts: list[list[int]], new_tokens: int, timed_steps: int) -> list:
    """Submit `prompts` (ignore_eos, greedy) and decode about half of new_tokens, leaving each
    sequence at least `timed_steps` steps to go, with the pages for them reserved: the rows that a
    kernel timing then replays. Chunks are capped at what is left to the target, since without EOS
    a chunk runs up to decode_chunk_no_eos steps and would otherwise run the batch to its end."""
    assert new_tokens > timed_steps >= 1, \
        f"autotune needs max_new_tokens ({new_tokens}) above the timed chunk ({timed_steps} decode steps)"
    sched = engine.scheduler
    target = max(1, min(new_tokens // 2, new_tokens - timed_steps))  # completion tokens before the timing
    engine.submit(prompts, Sampling(), new_tokens, ignore_eos=True)
    engine.step(max_steps=0)  # prefill: every admitted sequence now has its first token
    while sched.running and (todo := target - min(s.num_generated for s in sched.running)) > 0:
        engine.step(max_steps=todo)
    sched.reserve(timed_steps)
    engine.runner.pages.sync()
    running = list(sched.running)
    assert running and all(s.remaining >= timed_steps for s in running), \
        f"no sequence left mid-generation to time ({len(running)} running of {len(prompts)})"
    return running


@torch.no_grad()
def step_sweep(engine, prompts: list[list[int]], new_tokens: int, candidates=CANDIDATES, rounds: int = 3) -> dict:
    """Decode-step ms of each candidate for len(prompts) rows, mid-generation (about half of
    new_tokens decoded); the winner against the first candidate. Needs CUDA graphs; the engine is left
    idle with its own options."""
    runner, sched = engine.runner, engine.scheduler
    assert runner.graphs_on, "step_sweep times CUDA graph replays"
    assert not sched.has_work, "step_sweep needs an idle engine"
    chunk = runner.cfg.decode_chunk
    running = to_mid_generation(engine, prompts, new_tokens, chunk)
    bucket = runner.bucket(len(running))
    own_opts, own_graph = runner.decode_options(), runner.graphs.pop((bucket, "greedy"), None)
    graphs, ms = {}, {}
    try:
        for opts in candidates:
            key = json.dumps(opts, sort_keys=True)
            runner.use_decode_options(opts)
            try:
                runner.capture([bucket], "greedy")  # compiles, autotunes nothing, captures
                graphs[key] = runner.graphs.pop((bucket, "greedy"))
            except Exception as e:  # noqa: BLE001 -- an option set the kernel rejects is a result too
                ms[key] = repr(e)[:300]

        def chunk_of_steps(graph):
            runner.set_rows(running, bucket)  # the same chunk of positions each time
            return device_ms(graph.replay, chunk)

        times = {key: [] for key in graphs}
        for _ in range(rounds):
            for key, graph in graphs.items():
                times[key].append(chunk_of_steps(graph))
        ms.update({key: round(statistics.median(t), 4) for key, t in times.items()})
    finally:
        runner.use_decode_options(own_opts)
        if own_graph is not None:
            runner.graphs[(bucket, "greedy")] = own_graph
        engine.abort()
    context = sum(s.num_tokens for s in running) / len(running)
    return {"rows": len(running), "bucket": bucket, "mean_context": round(context, 1), "step_ms": ms,
            "rounds": rounds, "best": best_options(ms, baseline=json.dumps(dict(candidates[0]), sort_keys=True))}
