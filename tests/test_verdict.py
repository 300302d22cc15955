"""The reference seeds' noise band and a candidate's verdict, on synthetic trajectories."""
import json
import random

import pytest

from rollout_bench.grpo import verdict
from rollout_bench.report import train as report


def rec(seed, backend="hf_generate", status="ok", n=8, **series):
    """A train stats record: steps 1..N with the given per-step series (None = not logged at that step)."""
    steps = max(len(v) for v in series.values())
    out = [{"step": i + 1, "n_completions": n} for i in range(steps)]
    for key, vals in series.items():
        for s, v in zip(out, vals):
            s[verdict.METRICS.get(key, key)] = v
    return {"backend": backend, "model": "m", "status": status, "reason": None if status == "ok" else "why it did not",
            "workload": {"seed": seed}, "steps": out}


def noisy(seed, mean, sd, steps=12):
    rng = random.Random(seed)
    return [mean(s) + rng.gauss(0, sd) for s in range(1, steps + 1)]


RISE = lambda s: 0.2 * s  # a reward that rises 0.2 a step


def refs(k=2, **kw):
    return [rec(100 + i, reward=noisy(100 + i, RISE, 0.5, **kw)) for i in range(k)]


def test_student_quantiles():
    assert verdict.t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-3)
    assert verdict.t_quantile(0.975, 3) == pytest.approx(3.1824, abs=1e-3)
    assert verdict.t_quantile(0.9995, 16) == pytest.approx(4.0150, abs=1e-3)
    assert verdict.t_quantile(0.975, 1000) == pytest.approx(1.9623, abs=1e-3)


def test_band_windows_centres_and_what_the_reference_learned():
    b = verdict.band(refs(3), window=4, alpha=0.05)
    assert b["status"] == "ok" and b["seeds"] == [100, 101, 102] and list(b["metrics"]) == ["reward"]
    assert set(b["not_logged"]) == set(verdict.METRICS) - {"reward"}
    rows = b["metrics"]["reward"]["windows"]
    assert [w["steps"] for w in rows] == [[1, 4], [5, 8], [9, 12]]
    assert rows[0]["lo"] < rows[0]["centre"] < rows[0]["hi"] and rows[0]["centre"] == pytest.approx(0.5, abs=0.5)
    rise = b["learning"]["reward"]
    assert rise["first_steps"] == [1, 4] and rise["last_steps"] == [9, 12]
    assert rise["rise"] == pytest.approx(1.6, abs=0.6) and rise["sd"] > 0  # 0.2 x 8 steps between the centres
    assert rise["band_half_width"] == rows[-1]["half_width"]


def test_a_candidate_like_the_reference_is_inside_and_a_shifted_one_is_out_where_and_by_how_much():
    b = verdict.band(refs(3), window=4, alpha=0.05)
    same = verdict.verdict(b, rec(7, backend="flex", reward=noisy(7, RISE, 0.5)))
    assert same["status"] == "inside" and same["windows_compared"] == 3 and 0 < same["max_half_widths"] <= 1
    # the same run, 3 reward lower from step 5 on: windows 2 and 3 leave the band, below it
    shifted = noisy(7, RISE, 0.5)
    shifted[4:] = [v - 3 for v in shifted[4:]]
    out = verdict.verdict(b, rec(7, backend="flex", reward=shifted))
    assert out["status"] == "outside" and [e["steps"] for e in out["excursions"]] == [[5, 8], [9, 12]]
    e = out["excursions"][0]
    assert e["metric"] == "reward" and e["by"] < 0 and e["value"] == pytest.approx(e["lo"] + e["by"])
    assert e["half_widths"] < -1
    assert verdict.describe(e).startswith("reward @ steps 5-8: ") and " below [" in verdict.describe(e)


def test_false_alarms_stay_near_alpha():
    """Candidates that are the reference under other seeds leave the band in about alpha of the cases."""
    trials, alpha = 300, 0.1
    out = 0
    for t in range(trials):
        b = verdict.band([rec(s, reward=noisy(s, RISE, 0.5)) for s in (3 * t, 3 * t + 1)], window=3, alpha=alpha)
        out += verdict.verdict(b, rec(3 * t + 2, reward=noisy(3 * t + 2, RISE, 0.5)))["status"] == "outside"
    assert out / trials < 2 * alpha, out


def test_a_run_stopped_early_is_judged_on_its_complete_windows():
    b = verdict.band(refs(2), window=4, alpha=0.05)
    short = rec(7, reward=noisy(7, RISE, 0.5)[:6])  # steps 1-6: window 5-8 incomplete
    assert verdict.verdict(b, short)["windows_compared"] == 1
    v = verdict.verdict(b, rec(7, reward=noisy(7, RISE, 0.5)[:3]))
    assert v["status"] == "n/a" and "no complete window of 4 steps" in v["reason"]


def test_a_banded_metric_the_candidate_did_not_log_fails():
    b = verdict.band([rec(s, reward=noisy(s, RISE, 0.5), kl=noisy(s + 50, lambda _: 0.01, 0.001)) for s in (1, 2)],
                     window=4, alpha=0.05)
    v = verdict.verdict(b, rec(3, reward=noisy(3, RISE, 0.5)))
    assert v["status"] == "outside" and v["missing"] == ["kl"]


def test_rates_keep_binomial_noise_when_the_seeds_agree():
    """No reference completion was truncated: one truncation in a window is noise, all of them is a broken backend."""
    zeros = [rec(s, truncated=[0.0] * 8) for s in (1, 2)]
    b = verdict.band(zeros, window=2, alpha=0.05)
    assert verdict.verdict(b, rec(3, truncated=[0.125, 0.0] + [0.0] * 6))["status"] == "inside"
    out = verdict.verdict(b, rec(3, truncated=[1.0] * 8))
    assert out["status"] == "outside" and len(out["excursions"]) == 4 and out["excursions"][0]["by"] > 0.5


def test_a_constant_metric_gets_a_float_tolerance_not_a_zero_band():
    b = verdict.band([rec(s, reward=[-7.5] * 4) for s in (1, 2)], window=2, alpha=0.05)
    assert verdict.verdict(b, rec(3, reward=[-7.5] * 4))["status"] == "inside"
    assert verdict.verdict(b, rec(3, reward=[-7.5, -7.5, -7.0, -7.5]))["status"] == "outside"


@pytest.mark.parametrize("runs, why", [
    ([rec(1, reward=[1.0, 2.0])], "one reference seed gives no run-to-run noise (give train.seeds two or more)"),
    ([rec(1, reward=[1.0, 2.0]), rec(2, status="skipped", reward=[0.0])], "seed 2: skipped (why it did not)"),
])
def test_no_band_without_two_good_reference_seeds(runs, why):
    b = verdict.band(runs, window=1, alpha=0.05)
    assert b["status"] == "n/a" and b["reason"] == why
    v = verdict.verdict(b, rec(3, reward=[1.0, 2.0]))
    assert v["status"] == "n/a" and v["reason"] == f"no band: {why}"


def test_learning_is_measured_against_the_frozen_control_on_the_same_prompts():
    # the prompts' difficulty moves every run alike (same prompt order); the reference learns 0.2 a step on top
    def run(seed, learns):
        return rec(seed, reward=noisy(seed, lambda s: (-1) ** s * 2.0 + (RISE(s) if learns else 0.0), 0.3))

    ref = [run(100 + i, learns=True) for i in range(3)]
    frozen = run(9, learns=False)
    frozen["workload"].update(seed=100, frozen=True)
    b = verdict.band(ref, window=4, alpha=0.05, control=frozen)
    g = b["learning"]["reward"]["over_control"]
    assert b["control_seed"] == 100 and [w["steps"] for w in g["windows"]] == [[1, 4], [5, 8], [9, 12]]
    assert g["windows"][0]["gain"] == pytest.approx(0.5, abs=0.4)  # 0.2 x mean step 2.5
    assert g["gain"] == pytest.approx(2.1, abs=0.4) and g["learned"] and g["gain"] > g["half_width"]
    # a reference that does not learn is no better than its control
    flat = [run(100 + i, learns=False) for i in range(3)]
    assert not verdict.band(flat, window=4, alpha=0.05, control=frozen)["learning"]["reward"]["over_control"]["learned"]
    # no control, or a failed one: the rise alone
    assert "over_control" not in verdict.band(ref, window=4, alpha=0.05)["learning"]["reward"]
    broken = {**frozen, "status": "failed", "reason": "crashed"}
    assert "over_control" not in verdict.band(ref, window=4, alpha=0.05, control=broken)["learning"]["reward"]


def test_a_control_that_stopped_early_is_compared_on_the_windows_it_completed():
    ref = refs(3)
    frozen = rec(100, reward=noisy(9, lambda s: 0, 0.5, steps=6))
    g = verdict.band(ref, window=4, alpha=0.05, control=frozen)["learning"]["reward"]["over_control"]
    assert [w["steps"] for w in g["windows"]] == [[1, 4]] and g["last_steps"] == [1, 4]


def report_lines(tmp_path, band: dict) -> list[str]:
    """The train report's learning lines for one band, read from its JSON file as render_train reads it."""
    (tmp_path / "band.json").write_text(json.dumps(band))
    return report.learning_lines([tmp_path / "band.json"])


def test_learned_is_read_on_the_last_complete_window_not_a_short_tail(tmp_path):
    # the seeds stopped at 10, 11 and 12 steps (a wall budget): the band's last window is steps 9-10, 2 of 4
    def run(seed, steps, learns, tail=0.0):
        # learns 0.5 a step from step 1; the short tail (steps 9-10) is where a learner would look flat
        return rec(seed, reward=[(0.5 * s if learns else 0.0) + (tail if s > 8 else 0.0)
                                 + random.Random(seed * 100 + s).gauss(0, 0.05) for s in range(1, steps + 1)])

    ref = [run(100, 10, True, tail=-6.0), run(101, 11, True, tail=-6.0), run(102, 12, True, tail=-6.0)]
    frozen = run(9, 12, False)
    frozen["workload"].update(seed=100, frozen=True)
    b = verdict.band(ref, window=4, alpha=0.05, control=frozen)
    g = b["learning"]["reward"]["over_control"]
    assert [(w["steps"], w["complete"]) for w in g["windows"]] == [([1, 4], True), ([5, 8], True), ([9, 10], False)]
    # steps 5-8 decide (+3.25 against a narrow band), not the two-step tail, where the gain fell to ~ -1.25
    assert g["last_steps"] == [5, 8] and g["gain"] == pytest.approx(3.25, abs=0.2) and g["learned"]
    line = next(x for x in report_lines(tmp_path, b) if "over the frozen control" in x)
    # both complete windows pass (+1.2 and +3.2 against ± 0.1); the short tail is not counted
    assert "reward @ steps 5-8: " in line and ": learned (2 of 2 complete windows above the band)" in line
    # a learner that starts late: its first complete window is inside the band, and the count says so
    late = [run(100 + i, 12, False) for i in range(3)]
    for r in late:
        for x in r["steps"]:
            x["reward"] += 0.5 * max(0, x["step"] - 4)
    b = verdict.band(late, window=4, alpha=0.05, control=frozen)
    line = next(x for x in report_lines(tmp_path, b) if "over the frozen control" in x)
    assert "reward @ steps 9-12: " in line and ": learned (2 of 3 complete windows above the band)" in line
    # a band file from before windows said whether they were complete: their length says it
    for w in b["learning"]["reward"]["over_control"]["windows"]:
        del w["complete"]
    assert "(2 of 3 complete windows above the band)" in "".join(report_lines(tmp_path, b))
    # no complete window: no verdict, rather than one on a fragment
    row = {"steps": [1, 3], "centre": 2.0, "runs": [1.9, 2.0, 2.1], "half_width": 0.5}
    assert verdict.over_control([row], {1: 0.0, 2: 0.0, 3: 0.0}, window=4) is None


def test_a_failed_control_is_named_in_the_band_and_its_report(tmp_path):
    frozen = {**rec(100, reward=[0.0] * 12), "status": "failed", "reason": "crashed at step 3"}
    b = verdict.band(refs(3), window=4, alpha=0.05, control=frozen)
    assert b["control"] == {"status": "failed", "reason": "crashed at step 3"} and b["control_seed"] is None
    assert verdict.band(refs(3), window=4, alpha=0.05)["control"] is None
    lines = report_lines(tmp_path, b)
    assert any("the frozen control did not run: failed (crashed at step 3)" in line for line in lines)
