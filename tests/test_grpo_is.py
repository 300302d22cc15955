"""What the IS correction did (importance.effect) and how completions came out (outcomes), on hand-made batches."""
import math

import pytest
import torch

from rollout_bench.grpo import importance, outcomes


def batch(trainer_lp, sampler_lp, mask, ratio):
    return {"old_per_token_logps": torch.tensor(trainer_lp), "sampling_per_token_logps": torch.tensor(sampler_lp),
            "completion_mask": torch.tensor(mask), "importance_sampling_ratio": torch.tensor(ratio)}


def test_token_truncate_weights_each_token_and_counts_the_clipped():
    # completion 0: gaps +0.1, -0.1, 2.0 (ratio e^2 = 7.4 clipped to 3); completion 1: one token, then padding
    tr, sa = [[-1.0, -1.2, -0.5], [-2.0, 0.0, 0.0]], [[-1.1, -1.1, -2.5], [-2.0, 9.0, 9.0]]
    ratio = [[math.exp(0.1), math.exp(-0.1), 3.0], [1.0, 1.0, 1.0]]
    e = importance.effect(batch(tr, sa, [[1, 1, 1], [1, 0, 0]], ratio), sequence_level=False)
    assert e["logp_gap/mean"] == pytest.approx((0.1 + 0.1 + 2.0 + 0.0) / 4, rel=1e-5)
    assert e["logp_bias/mean"] == pytest.approx((0.1 - 0.1 + 2.0) / 4, rel=1e-5)
    assert e["seq_log_ratio/mean"] == pytest.approx((2.0 + 0.0) / 2, rel=1e-5)
    assert e["weight/mean"] == pytest.approx((math.exp(0.1) + math.exp(-0.1) + 3.0 + 1.0) / 4, rel=1e-5)
    assert e["clipped/token_frac"] == pytest.approx(1 / 4) and e["zeroed/token_frac"] == 0.0
    assert 1.9 < e["logp_gap/p99"] <= 2.0


def test_a_sequence_mask_ratio_that_underflows_zeroes_the_whole_completion():
    """TRL's default on a 512-token bf16 rollout: the per-token gaps sum to -20 nats, the sequence weight is ~0."""
    tr, sa = [[-1.0] * 4, [-1.0] * 4], [[4.0] * 4, [-1.0] * 4]  # completion 0: trainer 5 nats below per token
    ratio = [[0.0], [1.0]]  # TRL's exp(-20) masked to 0 / kept at 1, broadcast over the completion
    e = importance.effect(batch(tr, sa, [[1] * 4, [1] * 4], ratio), sequence_level=True)
    assert e["seq_log_ratio/mean"] == pytest.approx(-10.0) and e["weight/mean"] == pytest.approx(0.5)
    assert e["zeroed/seq_frac"] == 0.5 and e["zeroed/token_frac"] == 0.5 and e["clipped/token_frac"] == 0.0


def test_tokens_the_sampler_could_not_score_carry_no_gap():
    e = importance.effect(batch([[-1.0, -1.0]], [[-1.5, float("nan")]], [[1, 1]], [[math.exp(0.5), 1.0]]),
                          sequence_level=False)
    assert e["logp_gap/mean"] == pytest.approx(0.5) and e["weight/mean"] == pytest.approx((math.exp(0.5) + 1) / 2)


def test_a_completion_ends_with_eos_or_at_the_length_limit():
    eos = {2}
    assert outcomes.cut_short([[5, 6, 2], [5, 6, 7, 8]], eos, 4) == 0.0  # eos; the limit
    assert outcomes.cut_short([[5, 6], [5, 6, 7, 8], [2]], eos, 4) == pytest.approx(1 / 3)  # [5, 6]: no eos, short
