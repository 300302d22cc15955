"""GRPO results rendered: the training table, the equivalence table (with the reference's noise band and what it
learned), per-step charts (reward, accuracy, KL, step time) over the band."""
import statistics

import altair as alt
import pandas as pd

from ..core import stats
from ..grpo import verdict
from ..grpo.phases import PHASES
from .render import LEGEND, one_line, save_chart  # noqa: F401  (save_chart: HTML, SVG and PNG, re-exported for the CLI)

EQUIVALENCE_CAPTION = (
    "Equivalence. Two backends sample different tokens, so their step-by-step rewards and losses differ for "
    "that reason alone; the |diff| columns measure that, they are not the test. A backend is equivalent to the "
    "reference when (1) the gate holds: every step has a finite loss, its KL stays non-negative and within the "
    "bound (the larger of an absolute floor and a multiple of the reference's largest KL), both runs' optimizers "
    "held the LoRA parameters and moved them, it ran the identical reward code (rewards.py sha256), "
    "hyper-parameters, importance-sampling setting and optimizer, it produced the same number of completions at "
    "every step (over the steps both ran, when one ran fewer: the notes say so), every completion ended with "
    "EOS or at the length limit, an importance-sampling correction, where one ran, weighted the policy "
    "gradient by 0.5 to 2 per token, and the rollout's own logprobs, where it returns them, matched the trainer's "
    "at every step within the trainer dtype's floor (logprob_match); and (2) its windowed means "
    "of reward, accuracy, KL, loss, completion length and truncated fraction stay inside the noise band of the "
    "reference's seeds (the band column: the largest excursion in band half-widths, 1 = on the edge; the notes "
    "say where a metric left it and by how much). Step-time ratio = candidate median step / reference median "
    "step, both over steps 4..N of the steps both ran."
)
CHART_METRICS = {"reward": "mean reward", "accuracy": "answer accuracy", "kl": "KL to reference",
                 "step_wall_s": "step wall (s)"}


def backend_label(r: dict) -> str:
    """The backend, marked when the run is the frozen control (learning rate 0: train.frozen_control)."""
    return f"{r['backend']} (frozen)" if (r.get("workload") or {}).get("frozen") else r["backend"]


def _fmt(v, spec=".3g"):
    return "" if v is None or (isinstance(v, float) and v != v) else format(v, spec)


def learning_lines(band_paths) -> list[str]:
    """One line per band: its seeds, window and what the reference learned (first vs last window)."""
    lines = []
    for b in sorted((stats.read_json(p) for p in band_paths), key=lambda b: str(b.get("model"))):
        head = f"- {b.get('model')}, {b.get('ref_backend')} seeds {b.get('seeds')}"
        if b["status"] != "ok":
            lines.append(f"{head}: no band ({b['reason']})")
            continue
        rise = "; ".join(
            f"{name} {_fmt(x['first'])} -> {_fmt(x['last'])} (steps {x['first_steps'][0]}-{x['first_steps'][1]} -> "
            f"{x['last_steps'][0]}-{x['last_steps'][1]}): {x['rise']:+.3g} ± {_fmt(x['sd'])} (sd over seeds; "
            f"band ± {_fmt(x['band_half_width'])})"
            for name, x in b["learning"].items()) or "one window: no rise measured"
        lines.append(f"{head}, windows of {b['window']} steps, alpha {b['alpha']}: {rise}")
        gains = [(name, x["over_control"]) for name, x in b["learning"].items() if x.get("over_control")]
        if gains:
            lines.append(f"  - over the frozen control (seed {b.get('control_seed')}, learning rate 0, same prompts): "
                         + "; ".join(_gain(name, g, b["window"]) for name, g in gains))
        ctrl = b.get("control")
        if ctrl and ctrl["status"] != "ok":
            lines.append(f"  - the frozen control did not run: {ctrl['status']} ({ctrl['reason']}), so no gain "
                         f"over it")
    return lines


def _gain(name: str, g: dict, window: int) -> str:
    """'accuracy @ steps 31-40: +0.12 ± 0.02 sd over seeds, over 0.30 (band ± 0.05; steps 1-10: +0.01): learned
    (2 of 4 complete windows above the band)'"""
    first = g["windows"][0]
    w = next(x for x in g["windows"] if x["steps"] == g["last_steps"])
    verdict = "learned" if g["learned"] else "not beyond the band"
    # the last window decides; how many others agree says whether it is a trend or one lucky window. Band files
    # older than the `complete` field: a window is complete when it spans `window` steps
    complete = [x for x in g["windows"] if x.get("complete", x["steps"][1] - x["steps"][0] + 1 == window)]
    above = sum(x["gain"] > x["half_width"] for x in complete)
    return (f"{name} @ steps {w['steps'][0]}-{w['steps'][1]}: {w['gain']:+.3g} ± {_fmt(w['sd'])} sd over seeds, "
            f"over {_fmt(w['control'])} (band ± {_fmt(w['half_width'])}; steps {first['steps'][0]}-"
            f"{first['steps'][1]}: {first['gain']:+.3g}): {verdict} ({above} of {len(complete)} complete windows above "
            f"the band)")


def learning_table(band: dict) -> str:
    """A band's learning against its frozen control, window by window (`verdict.band` with a control): the control's
    reward, the reference seeds' gain over it and the band's half-width, and the accuracy's gain; a gain beyond
    its half-width in bold."""
    rw, acc = band["learning"]["reward"]["over_control"], band["learning"]["accuracy"]["over_control"]
    steps = [f"{w['steps'][0]}-{w['steps'][1]}" for w in rw["windows"]]

    def gain(w, spec):
        text = f"{w['gain']:+{spec}}"
        return f"**{text}**" if w["gain"] > w["half_width"] else text

    widths = [w["half_width"] for w in acc["windows"]]
    k = len(band["seeds"])
    rows = [
        ("frozen control, reward", [f"{w['control']:.2f}" for w in rw["windows"]]),
        (f"reference ({k} seeds), gain over the control", [gain(w, ".2f") for w in rw["windows"]]),
        (f"the band's half-width ({k} seeds, alpha {band['alpha']} over {band['n_tests']} tests)",
         [f"{w['half_width']:.2f}" for w in rw["windows"]]),
        (f"accuracy gain over the control (half-width {min(widths):.3f}-{max(widths):.3f})",
         [gain(w, ".3f") for w in acc["windows"]]),
    ]
    lines = [f"| window of {band['window']} steps | " + " | ".join(steps) + " |", "|---|" + "--:|" * len(steps)]
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows]
    return "\n".join(lines) + "\n"


def _band_cell(r: dict) -> str:
    v = r.get("band")
    if not v:
        return "n/a"
    if v["status"] == "n/a":
        return f"n/a ({v['reason']})"
    word = "inside" if v["status"] == "inside" else "OUT"
    return f"{word} ({_fmt(v['max_half_widths'], '.2f')}, {v['windows_compared']} windows)"


def equivalence_table(comparison_paths, band_paths=()) -> str:
    rows = [stats.read_json(p) for p in comparison_paths]
    head_lines = [EQUIVALENCE_CAPTION, ""]
    learned = learning_lines(band_paths)
    if learned:
        head_lines += ["The reference's run-to-run band, and how much it learned (window means, first -> last):",
                       *learned, ""]
    if not rows:
        return "\n".join(head_lines) + "\nNo comparisons in these results (one backend ran).\n"
    lines = [*head_lines,
             ("| model | reference | candidate | equivalent | noise band | max \\|Δloss\\| | max \\|Δreward\\| (mean) "
              "| max \\|ΔKL\\| | max \\|Δgrad_norm\\| | KL range ref / cand | step-time ratio | notes |"),
             "|---|---|---|---|---|--:|--:|--:|--:|---|--:|---|"]
    for r in sorted(rows, key=lambda r: (r["model"], r["ref_backend"], r["cand_backend"])):
        head = f"| {r['model']} | {r['ref_backend']} | {r['cand_backend']} "
        if r["status"] != "ok":
            lines.append(head + f"| {r['status']} | | | | | | | | {one_line(r['reason'])} |")
            continue
        d, g = r["diff"], r["gate"]
        failed = [f"{k}: {c['detail']}" for k, c in g["checks"].items() if not c["ok"]]
        band = r.get("band") or {}
        failed += [verdict.describe(e) for e in band.get("excursions", [])]
        failed += [f"{m}: not logged by the candidate" for m in band.get("missing", [])]
        n = r.get("steps") or {}
        if n and n["ref"] != n["cand"]:
            failed.insert(0, f"steps: reference {n['ref']}, candidate {n['cand']}; compared over {r['common_steps']}")
        dmax = lambda k: _fmt(d[k]["max_abs"]) if d[k] else "n/a"  # noqa: E731
        reward = f"{dmax('reward')} ({_fmt(d['reward']['mean_abs'])})" if d["reward"] else "n/a"
        kl = r["range"]["kl"]
        kl_range = " / ".join(f"[{_fmt(x[0])}, {_fmt(x[1])}]" if x else "n/a" for x in (kl["ref"], kl["cand"]))
        equivalent = r.get("equivalent", g["passed"])
        lines.append(head + f"| {'yes' if equivalent else 'NO'} | {_band_cell(r)} | {dmax('loss')} | {reward} "
                            f"| {dmax('kl')} | {dmax('grad_norm')} | {kl_range} | {_fmt(r['step_time_ratio'], '.2f')} "
                            f"| {'; '.join(failed)} |")
    return "\n".join(lines) + "\n"


def _window(r: dict) -> list[dict]:
    """The steps the median step is taken over (4..N), so every per-step median in a row shares them."""
    lo, hi = r.get("median_step_window") or (r["steps"][0]["step"], r["steps"][-1]["step"])
    return [s for s in r["steps"] if lo <= s["step"] <= hi]


def step_median(r: dict, key: str):
    """The median of a per-step figure over the steps the median step is taken over; None where none records it."""
    vals = [s[key] for s in _window(r) if isinstance(s.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def _is_cell(r: dict) -> str:
    """'no', or the IS mode and bounds with per-step medians of the sampler-vs-trainer logprob gap and of the
    weight the correction put on the policy loss (importance.py; stats older than it: TRL's mean ratio)."""
    if not r.get("is_correction"):
        return "no"
    clip = r.get("is_clip")
    bounds = f" [{_fmt(clip[0]) or '-'}, {_fmt(clip[1]) or '-'}]" if clip else ""
    kind = f" ({r['sampler_logprobs']} logprobs)" if r.get("sampler_logprobs") else ""
    gap = step_median(r, "is/logp_gap/mean")
    if gap is None:
        gap = step_median(r, "sampling/sampling_logp_difference/mean")
    p99 = step_median(r, "is/logp_gap/p99")
    weight, zeroed = step_median(r, "is/weight/mean"), step_median(r, "is/zeroed/token_frac")
    parts = [f"mean \\|Δlogp\\| {_fmt(gap)}" + (f", p99 {_fmt(p99)}" if p99 is not None else "")]
    if weight is not None:
        parts.append(f"weight {_fmt(weight)}, zeroed {_fmt(100 * (zeroed or 0.0), '.0f')}%; "
                     f"log sequence ratio {_fmt(step_median(r, 'is/seq_log_ratio/mean'))}")
    else:
        parts.append(f"mean ratio {_fmt(step_median(r, 'sampling/importance_sampling_ratio/mean'))}")
    return f"{r.get('is_mode')}{bounds}{kind}: {'; '.join(parts)}"


def mismatch_cell(r: dict) -> str:
    """The rollout's logprobs against the trainer's on the same tokens: the median step's and the worst step's mean
    |gap| per token, and the worst step's KL(sampler || trainer) (importance.py); '—' where the rollout samples
    from the trainer's own model."""
    if not r.get("is_correction"):
        return "—"
    gaps = [s["is/logp_gap/mean"] for s in r["steps"] if isinstance(s.get("is/logp_gap/mean"), (int, float))]
    if not gaps:
        return "not recorded"
    kl = [s["is/kl/mean"] for s in r["steps"] if isinstance(s.get("is/kl/mean"), (int, float))]
    return (f"{_fmt(statistics.median(gaps))} (worst {_fmt(max(gaps))})"
            + (f"; KL {_fmt(max(kl))}" if kl else ""))


def _steps_cell(r: dict) -> str:
    """Steps run, and the plan where a wall budget stopped the run early."""
    n, planned = len(r["steps"]), r.get("steps_planned")
    if planned is None or planned == n:
        return str(n)
    budget = (r.get("wall_budget") or {}).get("max_wall_s")
    return f"{n} of {planned} (wall budget {_fmt(budget, '.0f')} s)"


def _seed(r: dict):
    return (r.get("workload") or {}).get("seed")


def training_table(stats_paths) -> str:
    """Backend rows: median step, train wall, peak memory, optimizer, IS correction, step-time breakdown."""
    recs = [stats.load(p) for p in stats_paths]
    phase_cols = " | ".join(f"{p} s" for p in PHASES)
    lines = [("Median step over steps 4..N (all steps when N < 4); phase columns are per-step medians over "
              "the same steps of exclusive time (time/<phase>_s in the stats). IS correction: TRL's "
              "importance-sampling mode and [clip_min, clip_max], the same setting on every backend "
              "(train.importance_sampling; it acts where the rollout returns its own logprobs), and the sampler's "
              "logprobs (policy = log_softmax(z / T); processed = renormalised over the tokens top-k/top-p/min-p "
              "kept, as vLLM returns them to TRL), with per-step medians of the mean and p99 |sampler logprob - "
              "trainer logprob| per completion token, of the mean weight the correction put on each token's policy "
              "loss (1 = unchanged) and of the tokens it zeroed, and of the mean log sequence ratio (the sum of the "
              "per-token log ratios over a completion: a sequence mode's weight is its exponential). Sampler vs trainer: "
              "the rollout's logprobs against the trainer's forward on the same tokens, every step: the median "
              "step's mean |Δlogp| per token, the worst step's, and the worst step's KL(sampler ‖ trainer) (k3 "
              "estimate), the equivalence gate's `logprob_match`. The reference "
              "backend runs once per seed (train.seeds); `(frozen)` is its control, the same run at learning rate 0 "
              "(train.frozen_control)."), "",
             (f"| model | backend | seed | status | steps | median step s | sampler vs trainer \\|Δlogp\\| "
              f"| train wall s | peak alloc GB | optimizer | IS correction | {phase_cols} |"),
             "|---|---|--:|---|--:|--:|---|--:|--:|---|---|" + "--:|" * len(PHASES)]
    for r in sorted(recs, key=lambda r: (r["model"], backend_label(r), _seed(r) or 0)):
        head = f"| {r['model']} | {backend_label(r)} | {_fmt(_seed(r), 'd')} "
        if r["status"] != "ok":
            lines.append(head + f"| {r['status']}: {one_line(r['reason'])} |" + " |" * (7 + len(PHASES)))
            continue
        med = [_fmt(statistics.median(s.get(f"time/{p}_s") or 0.0 for s in _window(r)), ".3f") for p in PHASES]
        lines.append(head + f"| ok | {_steps_cell(r)} | {_fmt(r['median_step_s'], '.3f')} | {mismatch_cell(r)} "
                            f"| {_fmt(r['train_wall_s'], '.1f')} | {_fmt(r['peak_memory_gb'].get('allocated'), '.2f')} "
                            f"| {r.get('optimizer', '')} | {_is_cell(r)} "
                            f"| {' | '.join(med)} |")
    return "\n".join(lines) + "\n"


def trajectory_frame(stats_paths) -> pd.DataFrame:
    """Long format: model, backend, seed, step, metric, value (ok runs only)."""
    rows = []
    for r in (stats.load(p) for p in stats_paths):
        if r["status"] != "ok":
            continue
        for s in r["steps"]:
            for m in CHART_METRICS:
                if s.get(m) is not None:
                    rows.append({"model": r["model"], "backend": backend_label(r), "seed": _seed(r), "step": s["step"],
                                 "metric": m, "value": s[m]})
    return pd.DataFrame(rows, columns=["model", "backend", "seed", "step", "metric", "value"])


# what a charted metric can be: its band is drawn within this (the verdict keeps the whole band)
CHART_RANGE = {"accuracy": (0.0, 1.0), "kl": (0.0, None)}


def band_frame(band_paths) -> pd.DataFrame:
    """The bands of the charted metrics as a step function: model, metric, step, lo, hi (two rows per window,
    at its edges, so adjacent windows meet in a vertical step)."""
    rows = []
    for b in (stats.read_json(p) for p in band_paths):
        for metric, m in (b.get("metrics") or {}).items():
            if metric not in CHART_METRICS:
                continue
            floor, ceil = CHART_RANGE.get(metric, (None, None))
            for w in m["windows"]:
                lo = w["lo"] if floor is None else max(floor, w["lo"])
                hi = w["hi"] if ceil is None else min(ceil, w["hi"])
                for step in (w["steps"][0] - 0.5, w["steps"][1] + 0.5):
                    rows.append({"model": b["model"], "metric": metric, "step": step, "lo": lo, "hi": hi})
    return pd.DataFrame(rows, columns=["model", "metric", "step", "lo", "hi"])


# step times span 3 s (flex, vLLM) to 60 s (HF generate): on a linear axis the fast ones share one line
LOG_SCALE = {"step_wall_s"}


def trajectory_chart(df: pd.DataFrame, metric: str, bands: pd.DataFrame | None = None) -> alt.Chart:
    """One metric per step, a line per backend and seed, over the reference seeds' band (grey) where there is one."""
    scale = alt.Scale(type="log") if metric in LOG_SCALE else alt.Undefined
    x = alt.X("step:Q", title="optimizer step")
    lines = (alt.Chart(df[df.metric == metric]).mark_line(point=True)
             .encode(x=x, y=alt.Y("value:Q", title=CHART_METRICS[metric], scale=scale),
                     color=alt.Color("backend:N", legend=LEGEND), detail="seed:N",
                     tooltip=["backend:N", "seed:N", "step:Q", "value:Q"]))
    band = bands[bands.metric == metric] if bands is not None else pd.DataFrame()
    chart = lines
    if not band.empty:
        area = (alt.Chart(band).mark_area(opacity=0.25, color="gray")
                .encode(x=x, y=alt.Y("lo:Q", scale=scale), y2="hi:Q", tooltip=["step:Q", "lo:Q", "hi:Q"]))
        chart = alt.layer(area, lines)
    return chart.properties(width=260, height=180, title=CHART_METRICS[metric])


def trajectory_charts(df: pd.DataFrame, bands: pd.DataFrame | None = None):
    """One row per model: reward, accuracy, KL and step time per step, one line per backend and seed, with the
    reference seeds' noise band behind them."""
    if df.empty:
        return alt.Chart(pd.DataFrame({"text": ["no training run finished with status ok"]})).mark_text().encode(text="text")
    rows = []
    for m in sorted(df.model.unique()):
        mb = bands[bands.model == m] if bands is not None else None
        panels = (trajectory_chart(df[df.model == m], k, mb) for k in CHART_METRICS)
        rows.append(alt.hconcat(*panels).properties(title=m))
    return alt.vconcat(*rows).properties(title="GRPO per-step trajectories (grey: the reference seeds' noise band)")
