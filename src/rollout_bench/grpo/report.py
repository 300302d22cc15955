"""GRPO results rendered: the training table, the equivalence table, per-step charts (reward, KL, step time)."""
import statistics

import altair as alt
import pandas as pd

from .. import stats
from ..render import LEGEND, save_chart  # noqa: F401  (save_chart: HTML, SVG and PNG, re-exported for the CLI)
from .phases import PHASES

EQUIVALENCE_CAPTION = (
    "Equivalence on random weights. The model's completions are noise, so two backends sample different "
    "tokens and their rewards and losses differ for that reason alone; the |diff| columns measure that, "
    "they are not the test. A backend is equivalent to the reference when every step has a finite loss, "
    "its KL stays non-negative and within the bound (the larger of an absolute floor and a multiple of "
    "the reference's largest KL), both runs' optimizers held the LoRA parameters and moved them, it ran "
    "the identical reward code (rewards.py sha256), hyper-parameters and optimizer, and it produced the same number "
    "of completions at every step (over the steps both ran, when one ran fewer: the notes say so). "
    "Step-time ratio = candidate median step / reference median step, both over steps 4..N of the steps both "
    "ran."
)
CHART_METRICS = {"reward": "mean reward", "kl": "KL to reference", "step_wall_s": "step wall (s)"}


def _fmt(v, spec=".3g"):
    return "" if v is None or (isinstance(v, float) and v != v) else format(v, spec)


def equivalence_table(comparison_paths) -> str:
    rows = [stats.read_json(p) for p in comparison_paths]
    if not rows:
        return EQUIVALENCE_CAPTION + "\n\nNo comparisons in these results (one backend ran).\n"
    lines = [EQUIVALENCE_CAPTION, "",
             "| model | reference | candidate | equivalent | max \\|Δloss\\| | max \\|Δreward\\| (mean) "
             "| max \\|ΔKL\\| | max \\|Δgrad_norm\\| | KL range ref / cand | step-time ratio | notes |",
             "|---|---|---|---|--:|--:|--:|--:|---|--:|---|"]
    for r in sorted(rows, key=lambda r: (r["model"], r["ref_backend"], r["cand_backend"])):
        head = f"| {r['model']} | {r['ref_backend']} | {r['cand_backend']} "
        if r["status"] != "ok":
            lines.append(head + f"| {r['status']} | | | | | | | {r['reason']} |")
            continue
        d, g = r["diff"], r["gate"]
        failed = [f"{k}: {c['detail']}" for k, c in g["checks"].items() if not c["ok"]]
        n = r.get("steps") or {}
        if n and n["ref"] != n["cand"]:
            failed.insert(0, f"steps: reference {n['ref']}, candidate {n['cand']}; compared over {r['common_steps']}")
        dmax = lambda k: _fmt(d[k]["max_abs"]) if d[k] else "n/a"  # noqa: E731
        reward = f"{dmax('reward')} ({_fmt(d['reward']['mean_abs'])})" if d["reward"] else "n/a"
        kl = r["range"]["kl"]
        kl_range = " / ".join(f"[{_fmt(x[0])}, {_fmt(x[1])}]" if x else "n/a" for x in (kl["ref"], kl["cand"]))
        lines.append(head + f"| {'yes' if g['passed'] else 'NO'} | {dmax('loss')} | {reward} | {dmax('kl')} "
                            f"| {dmax('grad_norm')} | {kl_range} | {_fmt(r['step_time_ratio'], '.2f')} "
                            f"| {'; '.join(failed)} |")
    return "\n".join(lines) + "\n"


def _window(r: dict) -> list[dict]:
    """The steps the median step is taken over (4..N), so every per-step median in a row shares them."""
    lo, hi = r.get("median_step_window") or (r["steps"][0]["step"], r["steps"][-1]["step"])
    return [s for s in r["steps"] if lo <= s["step"] <= hi]


def _step_median(r: dict, key: str):
    vals = [s[key] for s in _window(r) if isinstance(s.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def _is_cell(r: dict) -> str:
    """'no', or the IS mode with the per-step medians of the sampler-vs-trainer logprob gap and IS ratio."""
    if not r.get("is_correction"):
        return "no"
    gap = _step_median(r, "sampling/sampling_logp_difference/mean")
    ratio = _step_median(r, "sampling/importance_sampling_ratio/mean")
    kind = f" ({r['sampler_logprobs']} logprobs)" if r.get("sampler_logprobs") else ""
    return f"{r.get('is_mode')}{kind}: mean \\|Δlogp\\| {_fmt(gap)}, mean ratio {_fmt(ratio)}"


def _steps_cell(r: dict) -> str:
    """Steps run, and the plan where a wall budget stopped the run early."""
    n, planned = len(r["steps"]), r.get("steps_planned")
    if planned is None or planned == n:
        return str(n)
    budget = (r.get("wall_budget") or {}).get("max_wall_s")
    return f"{n} of {planned} (wall budget {_fmt(budget, '.0f')} s)"


def training_table(stats_paths) -> str:
    """Backend rows: median step, train wall, peak memory, optimizer, IS correction, step-time breakdown."""
    recs = [stats.load(p) for p in stats_paths]
    phase_cols = " | ".join(f"{p} s" for p in PHASES)
    lines = ["Median step over steps 4..N (all steps when N < 4); phase columns are per-step medians over "
             "the same steps of exclusive time (time/<phase>_s in the stats). IS correction: TRL's "
             "importance-sampling mode (and the sampler's logprobs: policy = log_softmax(z / T); processed = "
             "renormalised over the tokens top-k/top-p/min-p kept, as vLLM returns them to TRL), with per-step "
             "medians of the mean |sampler logprob - trainer logprob| per token and of the mean IS ratio "
             "(a sequence mode multiplies the per-token ratios over the whole completion).", "",
             f"| model | backend | status | steps | median step s | train wall s | peak alloc GB | optimizer "
             f"| IS correction | {phase_cols} |",
             "|---|---|---|--:|--:|--:|--:|---|---|" + "--:|" * len(PHASES)]
    for r in sorted(recs, key=lambda r: (r["model"], r["backend"])):
        head = f"| {r['model']} | {r['backend']} "
        if r["status"] != "ok":
            lines.append(head + f"| {r['status']}: {r['reason']} |" + " |" * (7 + len(PHASES)))
            continue
        med = [_fmt(statistics.median(s.get(f"time/{p}_s") or 0.0 for s in _window(r)), ".3f") for p in PHASES]
        lines.append(head + f"| ok | {_steps_cell(r)} | {_fmt(r['median_step_s'], '.3f')} "
                            f"| {_fmt(r['train_wall_s'], '.1f')} | {_fmt(r['peak_memory_gb'].get('allocated'), '.2f')} "
                            f"| {r.get('optimizer', '')} | {_is_cell(r)} "
                            f"| {' | '.join(med)} |")
    return "\n".join(lines) + "\n"


def trajectory_frame(stats_paths) -> pd.DataFrame:
    """Long format: model, backend, step, metric, value (ok runs only)."""
    rows = []
    for r in (stats.load(p) for p in stats_paths):
        if r["status"] != "ok":
            continue
        for s in r["steps"]:
            for m in CHART_METRICS:
                if s.get(m) is not None:
                    rows.append({"model": r["model"], "backend": r["backend"], "step": s["step"],
                                 "metric": m, "value": s[m]})
    return pd.DataFrame(rows, columns=["model", "backend", "step", "metric", "value"])


# step times span 3 s (flex, vLLM) to 60 s (HF generate): on a linear axis the fast ones share one line
LOG_SCALE = {"step_wall_s"}


def trajectory_chart(df: pd.DataFrame, metric: str) -> alt.Chart:
    scale = alt.Scale(type="log") if metric in LOG_SCALE else alt.Undefined
    return (alt.Chart(df[df.metric == metric]).mark_line(point=True)
            .encode(x=alt.X("step:Q", title="optimizer step"),
                    y=alt.Y("value:Q", title=CHART_METRICS[metric], scale=scale),
                    color=alt.Color("backend:N", legend=LEGEND), tooltip=["backend", "step", "value"])
            .properties(width=260, height=180, title=CHART_METRICS[metric]))


def trajectory_charts(df: pd.DataFrame):
    """One row per model: reward, KL and step time per step, one line per backend."""
    if df.empty:
        return alt.Chart(pd.DataFrame({"text": ["no training run finished with status ok"]})).mark_text().encode(text="text")
    rows = [alt.hconcat(*(trajectory_chart(df[df.model == m], k) for k in CHART_METRICS)).properties(title=m)
            for m in sorted(df.model.unique())]
    return alt.vconcat(*rows).properties(title="GRPO per-step trajectories")
