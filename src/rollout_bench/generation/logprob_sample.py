"""What a generation cell keeps for its mismatch beside speed (generation/mismatch.py scores it): rows of its last
timed round spread over the batch, their prompts and tokens, and the engine's logprob of each token. A module of its
own so that editing the scoring does not rerun the generation jobs that import this.
"""
from ..core.workload import spread_rows

ROWS = 4  # rows a cell keeps: first, last and two between


def sample(gen, spec, prompts: list[list[int]], outputs: list[list[int]], rows: int = ROWS) -> dict | None:
    """The rows of a cell's last round its mismatch is scored on (prompt-major outputs, n per prompt), or None for a
    generator that returns no logprobs (or whose options turn them off). `temperature`: the one the engine's
    logprobs are at (1 for greedy)."""
    if not hasattr(gen, "row_logprobs") or not outputs:
        return None
    picked = spread_rows(len(outputs), rows)
    lps = gen.row_logprobs(picked)
    if lps is None:  # the engine's options turn its logprobs off
        return None
    assert all(len(lp) == len(outputs[i]) for lp, i in zip(lps, picked)), "a logprob per sampled token"
    s = spec.sampling
    return {"temperature": 1.0 if s.greedy else s.temperature, "rows": picked,
            "prompts": [list(prompts[i // spec.num_generations]) for i in picked],
            "tokens": [list(outputs[i]) for i in picked],
            "logprobs": [[round(float(x), 6) for x in lp] for lp in lps]}
