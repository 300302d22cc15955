"""The reference backend's run-to-run noise band per window of GRPO steps, and a candidate's verdict against it.

One reference run says nothing about where a second run of the same code lands, so the reference
runs with several seeds (`train.seeds`). Per window of `window` steps, each run's mean of a metric is
one sample. The band of window j is where a further reference run's window mean falls:

    centre_j ± t · s_j · sqrt(1 + 1/k)

centre_j is the k seeds' mean. s_j is the run-to-run sd of a window mean: the larger of two pooled
estimates, the spread of the seeds' window means (it sees seeds drifting apart) and the spread of
their single steps divided by the window's length (more degrees of freedom). t is Student's quantile
at `alpha` shared (Bonferroni) by every window and metric, so a candidate that is the reference under
another seed leaves some band with probability at most about alpha. A rate (accuracy, truncated) whose
seeds happen to agree (all 0) still has the binomial noise of the window's completions: its band is
never narrower than that noise at the normal quantile of the same level. A candidate is equivalent when
every windowed metric it ran lies in its band; the verdict lists each excursion: metric, steps, value,
band and how far out.
"""
import math
import statistics
from functools import cache

# verdict name -> the per-step key in the stats (stats_callback.CONTRACT_KEYS, outcomes.ACCURACY)
METRICS = {"reward": "reward", "accuracy": "accuracy", "kl": "kl", "loss": "loss",
           "completion_len": "completion_len", "truncated": "completions/clipped_ratio"}
RATES = ("accuracy", "truncated")  # fractions of the window's completions
# the least half-width a band gets: a KL within 1e-4 nats per token of the reference's says nothing about a
# backend (a tiny learning rate's KL is ~1e-6, where seeds that happen to agree give a band narrower than that)
ABS_FLOOR = {"kl": 1e-4}
LEARNING = ("reward", "accuracy")  # what the reference should raise: first vs last window


@cache
def t_quantile(p: float, df: float) -> float:
    """Student's t quantile for p > 0.5, by bisection on its tail I_x(df/2, 1/2) / 2 (mpmath comes with torch)."""
    import mpmath

    assert 0.5 < p < 1 and df > 0, (p, df)

    def tail(t):  # P(T > t)
        return float(mpmath.betainc(df / 2, 0.5, 0, df / (df + t * t), regularized=True)) / 2

    lo, hi = 0.0, 1.0
    while tail(hi) > 1 - p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) > 1 - p else (lo, mid)
    return hi


def values(rec: dict, key: str) -> dict[int, float]:
    """step -> finite value of `key`."""
    return {s["step"]: float(s[key]) for s in rec.get("steps", [])
            if isinstance(s.get(key), (int, float)) and math.isfinite(s[key])}


def windows(steps: list[int], window: int) -> list[list[int]]:
    """Consecutive chunks of `window` steps; the last may be shorter."""
    assert window >= 1, window
    return [steps[i:i + window] for i in range(0, len(steps), window)]


def _seed(rec: dict):
    return (rec.get("workload") or {}).get("seed", (rec.get("grpo") or {}).get("seed"))


def _pooled(groups: list[list[float]]) -> tuple[float, int]:
    """Pooled variance of equal-sized groups around their own means, and its degrees of freedom."""
    ss = sum((x - statistics.fmean(g)) ** 2 for g in groups for x in g)
    df = sum(len(g) - 1 for g in groups)
    return (ss / df if df else 0.0), df


def _metric_band(runs: list[dict[int, float]], wins: list[list[int]], completions: float) -> dict | None:
    """Window centres and run-to-run variances of one metric (no t yet); None when the reference never logged it."""
    k = len(runs)
    steps = [s for w in wins for s in w if all(s in r for r in runs)]
    if not steps:
        return None
    var_step, df_step = _pooled([[r[s] for r in runs] for s in steps])
    rows = []
    for w in wins:
        ws = [s for s in w if all(s in r for r in runs)]
        if ws:
            rows.append({"steps": [ws[0], ws[-1]], "n_steps": len(ws),
                         "runs": [statistics.fmean(r[s] for s in ws) for r in runs]})
    var_win, df_win = _pooled([row["runs"] for row in rows])
    full = max(row["n_steps"] for row in rows)
    # the window spread sees a drift between seeds the step spread misses; the step spread has more df
    use_win = var_win > var_step / full
    for row in rows:
        row["centre"] = statistics.fmean(row["runs"])
        row["var"] = max(var_win if use_win else 0.0, var_step / row["n_steps"])
    return {"rows": rows, "df": df_win if use_win else df_step, "k": k, "completions": completions,
            "sd_step": math.sqrt(var_step), "sd_window": math.sqrt(var_win)}


def _rate_floor(p: float, n: float) -> float:
    """Binomial variance of a rate over n completions, Laplace-smoothed so that 0 and 1 keep some noise."""
    q = (p * n + 1) / (n + 2)
    return q * (1 - q) / n


def band(refs: list[dict], *, window: int, alpha: float, control: dict | None = None) -> dict:
    """The reference seeds' band per metric and window, and how much the reference learned: first vs last
    window, and each window against `control` (the reference at learning rate 0 on the same prompts) when given."""
    assert 0 < alpha < 1, alpha
    out = {"status": "ok", "reason": None, "window": window, "alpha": alpha,
           "ref_backend": refs[0]["backend"] if refs else None, "model": refs[0]["model"] if refs else None,
           "seeds": [_seed(r) for r in refs if r["status"] == "ok"]}
    bad = [f"seed {_seed(r)}: {r['status']} ({r['reason']})" for r in refs if r["status"] != "ok"]
    ok = [r for r in refs if r["status"] == "ok"]
    if bad or len(ok) < 2:
        why = "; ".join(bad) if bad else "one reference seed gives no run-to-run noise (give train.seeds two or more)"
        return {**out, "status": "n/a", "reason": why, "metrics": {}, "learning": {}}
    steps = sorted(set.intersection(*({s["step"] for s in r["steps"]} for r in ok)))
    wins = windows(steps, window)
    completions = statistics.fmean(s.get("n_completions") or 0 for r in ok for s in r["steps"]) or 1.0
    raw = {name: _metric_band([values(r, key) for r in ok], wins, completions) for name, key in METRICS.items()}
    banded = {name: b for name, b in raw.items() if b is not None}
    n_tests = sum(len(b["rows"]) for b in banded.values())
    metrics = {}
    for name, b in banded.items():
        assert b["df"] >= 1, (name, b["df"])  # k >= 2 seeds: at least k - 1
        p = 1 - alpha / (2 * n_tests)
        t, z = t_quantile(p, b["df"]), statistics.NormalDist().inv_cdf(p)
        rows = []
        for row in b["rows"]:
            spread = 1 + 1 / b["k"]
            half = t * math.sqrt(row["var"] * spread)
            if name in RATES:  # a known (binomial) variance: the normal quantile, not Student's
                half = max(half, z * math.sqrt(_rate_floor(row["centre"], row["n_steps"] * completions) * spread))
            # equal seeds (a constant metric): a tolerance for float noise, not a zero-width band
            half = max(half, 1e-9 + 1e-6 * abs(row["centre"]), ABS_FLOOR.get(name, 0.0))
            rows.append({"steps": row["steps"], "centre": row["centre"], "lo": row["centre"] - half,
                         "hi": row["centre"] + half, "half_width": half, "runs": row["runs"]})
        metrics[name] = {"windows": rows, "t": t, "df": b["df"], "sd_step": b["sd_step"], "sd_window": b["sd_window"]}
    ctrl_status = None if control is None else {"status": control["status"], "reason": control["reason"]}
    if control is not None and control["status"] != "ok":
        control = None  # a failed control measures nothing; the band stands without it, and says so
    out.update(metrics=metrics, not_logged=sorted(set(METRICS) - set(banded)), n_tests=n_tests,
               learning=learning(metrics, window, control), control_seed=_seed(control) if control else None,
               control=ctrl_status)
    return out


def learning(metrics: dict, window: int, control: dict | None = None) -> dict:
    """Per LEARNING metric: the seeds' mean in the first and last window, the mean rise, its sd over seeds, and
    the last window's band half-width (how far a further run of the reference may land).

    The rise mixes learning with the windows' prompts (a later window may be easier). With `control`, the frozen
    reference on the same prompts, each window also gets the gain over it, and `learned` says whether the last
    complete window's gain (`window` steps, all of which the control ran) is beyond the band's half-width: the
    gain's noise is one reference run's against the seeds' mean, the band's spread sqrt(1 + 1/k) (at its
    Bonferroni quantile, so the test is conservative). The control shares the first seed's sampler seed (the same
    run at learning rate 0), so its noise is not independent of that seed's: that too errs conservative."""
    out = {}
    for name in LEARNING:
        rows = (metrics.get(name) or {}).get("windows") or []
        if len(rows) < 2:
            continue
        first, last = rows[0], rows[-1]
        deltas = [b - a for a, b in zip(first["runs"], last["runs"])]
        out[name] = {"first_steps": first["steps"], "last_steps": last["steps"], "first": first["centre"],
                     "last": last["centre"], "rise": statistics.fmean(deltas), "sd": statistics.stdev(deltas),
                     "band_half_width": last["half_width"]}
        if control is not None:
            out[name]["over_control"] = over_control(rows, values(control, METRICS[name]), window)
    return out


def over_control(rows: list[dict], ctrl: dict[int, float], window: int) -> dict | None:
    """The band's windows against the frozen run's means over the same steps: per window the gain (seeds' mean
    minus control) and its sd over seeds; `learned` on the last complete window: `window` steps (the band's last
    window is cut short where the seeds stopped; 6 steps of 10 decided the verdict so on 2026-12-02), all of
    which the control ran. None where none is (under `learning`, which needs two windows or more, the first
    is complete, so None means the control stopped inside it)."""
    gains = []
    for row in rows:
        lo, hi = row["steps"]
        ws = [s for s in range(lo, hi + 1) if s in ctrl]
        if len(ws) < hi - lo + 1:
            continue
        c = statistics.fmean(ctrl[s] for s in ws)
        gains.append({"steps": row["steps"], "control": c, "gain": row["centre"] - c,
                      "sd": statistics.stdev(r - c for r in row["runs"]), "half_width": row["half_width"],
                      "complete": hi - lo + 1 == window})
    full = [g for g in gains if g["complete"]]
    if not full:
        return None
    last = full[-1]
    return {"windows": gains, "last_steps": last["steps"], "gain": last["gain"], "half_width": last["half_width"],
            "learned": last["gain"] > last["half_width"]}


def verdict(b: dict, cand: dict) -> dict:
    """"inside" when every window the candidate ran completely lies in the band of each metric, "outside" (with
    the excursions) when one does not or a banded metric is missing, "n/a" without a band or a complete window."""
    if b["status"] != "ok":
        return {"status": "n/a", "reason": f"no band: {b['reason']}", "excursions": [], "missing": []}
    excursions, missing, compared, worst = [], [], set(), 0.0
    for name, m in b["metrics"].items():
        v = values(cand, METRICS[name])
        if not v:
            missing.append(name)
            continue
        for row in m["windows"]:
            lo, hi = row["steps"]
            ws = [s for s in range(lo, hi + 1) if s in v]
            if len(ws) < hi - lo + 1:
                continue  # a window the candidate did not run to its end (wall budget)
            compared.add(tuple(row["steps"]))
            x = statistics.fmean(v[s] for s in ws)
            dev = (x - row["centre"]) / row["half_width"]
            worst = max(worst, abs(dev))
            if not row["lo"] <= x <= row["hi"]:
                excursions.append({"metric": name, "steps": row["steps"], "value": x, "lo": row["lo"], "hi": row["hi"],
                                   "by": x - (row["hi"] if x > row["hi"] else row["lo"]), "half_widths": dev})
    if missing or excursions:
        status, reason = "outside", None
    elif not compared:
        status, reason = "n/a", f"the candidate ran no complete window of {b['window']} steps"
    else:
        status, reason = "inside", None
    return {"status": status, "reason": reason, "windows_compared": len(compared), "max_half_widths": worst,
            "excursions": excursions, "missing": missing}


def describe(excursion: dict) -> str:
    """'reward @ steps 6-10: 1.9, 0.5 below [2.4, 3.1]'"""
    e = excursion
    where = "above" if e["by"] > 0 else "below"
    return (f"{e['metric']} @ steps {e['steps'][0]}-{e['steps'][1]}: {e['value']:.3g}, {abs(e['by']):.3g} {where} "
            f"[{e['lo']:.3g}, {e['hi']:.3g}]")
