import pytest

from rollout_bench.assets import warm_card
from rollout_bench.assets.warm_card import Gates

GOOD = {"eos_rate": 0.99, "format_rate": 0.9, "group_std_rate": 0.8, "accuracy": 0.05,
        "length_p10": 27, "length_p50": 70, "length_p90": 190}


def test_passing_figures_give_a_passing_card(tmp_path):
    c = warm_card.card(GOOD, Gates(), {"steps": 80})
    assert c["passed"] and set(c["gates"]) == {"eos_rate", "format_rate", "group_std_rate"}
    warm_card.enforce(c)
    warm_card.write(c, tmp_path)
    assert warm_card.read(tmp_path) == c


@pytest.mark.parametrize("key,value", [("eos_rate", 0.94), ("format_rate", 0.79), ("group_std_rate", 0.49)])
def test_each_gate_fails_below_its_threshold_with_the_numbers(key, value):
    c = warm_card.card({**GOOD, key: value}, Gates(), {})
    assert not c["passed"] and [k for k, g in c["gates"].items() if not g["ok"]] == [key]
    with pytest.raises(warm_card.GateError, match=rf"{key} = {value:.3f}, needs >= .*p10/p50/p90 27/70/190"):
        warm_card.enforce(c)


def test_accuracy_is_recorded_and_gated_only_with_a_band():
    assert "accuracy" not in warm_card.check(GOOD, Gates())  # tiny CPU models: recorded in figures only
    band = Gates(accuracy_band=(0.15, 0.70))
    assert not warm_card.check(GOOD, band)["accuracy"]["ok"]
    assert warm_card.check({**GOOD, "accuracy": 0.4}, band)["accuracy"]["ok"]
    assert not warm_card.check({**GOOD, "accuracy": 0.71}, band)["accuracy"]["ok"]
