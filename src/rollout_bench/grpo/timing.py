"""Which steps a GRPO run's step time is summarised over: steps 4..N, the first three paying compile,
CUDA-graph and allocator warm-up (all steps when a run has fewer than four)."""
import statistics

SKIP_STEPS = 3


def window(timed: list[dict]) -> list[dict]:
    return timed[SKIP_STEPS:] if len(timed) > SKIP_STEPS else timed


def median_step(steps: list[dict]) -> tuple[float, list[int]]:
    """Median step wall over steps 4..N, and the [first, last] step it is taken over."""
    timed = [s for s in steps if s.get("step_wall_s") is not None]
    assert timed, "no timed steps"
    w = window(timed)
    return statistics.median(s["step_wall_s"] for s in w), [w[0]["step"], w[-1]["step"]]


def common_median_steps(ref_steps: list[dict], cand_steps: list[dict]) -> tuple[float, float, list[int]]:
    """Both runs' median step over the same window (steps 4..M of the steps both timed), so a run the
    wall budget stopped early is not timed against a reference's later, differently loaded steps."""
    cand_timed = {s["step"] for s in cand_steps if s.get("step_wall_s") is not None}
    shared = [s for s in ref_steps if s.get("step_wall_s") is not None and s["step"] in cand_timed]
    assert shared, "no step timed in both runs"
    steps = {s["step"] for s in shared}
    ref_med, span = median_step(shared)
    cand_med, cand_span = median_step([s for s in cand_steps if s["step"] in steps])
    assert span == cand_span, (span, cand_span)
    return ref_med, cand_med, span
