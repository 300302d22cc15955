"""What the stats say about completions that EOS ends: lengths, endings, occupancy."""
from rollout_bench.generation import completions


def test_lengths_endings_and_the_engines_own_occupancy():
    eos = 2
    outs = [[5] * 9 + [eos], [5, eos], [5] * 20, [5] * 3 + [eos]]  # three ended by EOS, one hit the budget
    s = completions.summary(outs, eos_token_id=eos, ignore_eos=False, batch_size=4, median_wall_s=1.5,
                            engine_round={"rows_per_step": 2.5})
    assert s["completion_tokens"]["p50"] == 7.0 and s["completion_tokens"]["max"] == 20
    assert s["completion_tokens"]["mean"] == 9.0
    assert s["completion_tokens"]["p10"] <= s["completion_tokens"]["p50"] <= s["completion_tokens"]["p90"]
    assert s["eos_rate"] == 0.75 and s["time_to_last_s"] == 1.5 and s["decode_occupancy"] == 0.625


def test_without_eos_or_engine_counters_those_figures_are_absent_not_made_up():
    s = completions.summary([[7, 2, 7]] * 3, eos_token_id=2, ignore_eos=True, batch_size=3, median_wall_s=0.2)
    assert "eos_rate" not in s and "decode_occupancy" not in s  # an EOS sampled mid-way did not end anything
    assert s["completion_tokens"]["p90"] == 3.0
