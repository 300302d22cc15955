"""What a generation job's completions look like once EOS may end them: their lengths, how many
ended, when the last one came, and how full the engine kept its decode batch.

With `ignore_eos` every completion has max_new_tokens tokens and these figures say nothing; with EOS
on (the `realistic` cases on a warm start) lengths spread, and engines differ in what they do with a
batch whose rows finish at different steps: a static batch (HF generate) keeps decoding finished
rows until the longest ends, a continuous-batching engine drops them.
"""
import numpy as np


def summary(outs: list[list[int]], *, eos_token_id: int, ignore_eos: bool, batch_size: int,
            median_wall_s: float, engine_round: dict | None = None) -> dict:
    """outs: the token ids of one round's completions (EOS kept where it ended one).

    time_to_last_s: the round's wall; every backend returns a round when its last completion is done.
    decode_occupancy: rows the engine decoded per decode step / batch size, from the engine's own
    counters (`engine_round["rows_per_step"]`); absent for engines that do not count their rows.
    """
    assert outs, "no completions"
    lengths = np.array([len(o) for o in outs])  # [n]
    out = {"completion_tokens": {q: float(np.percentile(lengths, p)) for q, p in (("p10", 10), ("p50", 50),
                                                                                    ("p90", 90))}
           | {"mean": round(float(lengths.mean()), 2), "max": int(lengths.max())},
           "time_to_last_s": median_wall_s}
    if not ignore_eos:
        out["eos_rate"] = round(float(np.mean([bool(o) and o[-1] == eos_token_id for o in outs])), 4)
    rows = (engine_round or {}).get("rows_per_step")
    if rows is not None:
        out["decode_occupancy"] = round(rows / batch_size, 4)
    return out
