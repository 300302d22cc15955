"""flex's speed targets (issue 48), each read from the headline run the README's answer comes from: the measured
value, whether it meets the target, and, where it does not, what the same run shows bounds it (its decode profile
at that batch, the rollout cell's own record, the GRPO runs' step phases). Regenerated into the README with the
answer (`python -m rollout_bench.report.standings`), never typed.

A ratio counts where both sides are `ok`. Where either side's rounds spread more than the run's max_round_spread, it
is flagged with its range over the rounds, as in the answer block, and meets its target only if the whole range does.
"""
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import aggregate, headline
from .headline import _of, _side, over_limit
from .render import PROFILE_CLASSES, decode_step_table, fmt, fmt_range, last_range, tps_range
from .train import step_median


@dataclass(frozen=True)
class Target:
    label: str
    kind: str  # tps: flex / vLLM tok/s; last: time to the last completion; grpo_step; grpo_peak; copy: of copy rate
    goal: float
    at_least: bool  # met where the value is >= goal (else <=)
    case: str = ""
    batch: int | None = None


# issue 48's table, in its order
TARGETS = [
    Target("greedy B = 1, tok/s flex / vLLM", "tps", 1.5, True, "greedy", 1),
    Target("greedy B = 8, tok/s flex / vLLM", "tps", 1.4, True, "greedy", 8),
    Target("greedy B = 64, tok/s flex / vLLM", "tps", 1.4, True, "greedy", 64),
    Target("greedy B = 256, tok/s flex / vLLM", "tps", 1.2, True, "greedy", 256),
    Target("LoRA r32 B = 64, tok/s flex / vLLM", "tps", 1.8, True, "lora", 64),
    Target("rollout, time to the last completion flex / vLLM", "last", 0.70, False, "rollout"),
    Target("GRPO step, s/step flex / vLLM", "grpo_step", 0.75, False),
    Target("GRPO step, peak memory flex / vLLM", "grpo_peak", 0.5, False),
    Target("greedy B = 8, flex's decode bytes over step time, of the copy rate", "copy", 0.80, True, "greedy", 8),
]


def _cell_pair(df: pd.DataFrame, t: Target, limit: float | None):
    """(flex's row, vLLM's row, why there is no value or None, why the value is flagged or None) for a generation
    target."""
    batch = t.batch
    if batch is None:  # the rollout: the case's one batch
        rows = df[df.case == t.case]
        batch = int(rows.batch_size.iloc[0]) if not rows.empty else None
    x, y = (_side(df, b, (t.case, batch)) if batch is not None else None for b in ("flex", "vllm"))
    if x is None or y is None:
        return x, y, "not run", None
    if x.status != "ok" or y.status != "ok":
        return x, y, f"flex {x.status}, vLLM {y.status}", None
    spread = [f"{s.backend} {100 * s.round_spread:.0f}%" for s in over_limit((x, y), limit)]
    return x, y, None, (f"rounds spread {', '.join(spread)}" if spread else None)


def _profile_at(profile: dict | None, batch: int, bw: dict | None) -> str:
    """Where a decode step's time goes at `batch`, from the run's decode profile, and the weights' read rate in its
    GEMMs against the copy rate (bw: the bytes and the rate flex's greedy cell at that batch recorded)."""
    if not profile:
        return "the run has no decode profile"
    at = profile["by_batch"].get(str(batch))
    if not at:
        return f"not profiled at B = {batch} (the profile ran B = {', '.join(profile['by_batch'])})"
    # shares of the profiled step, as the decode-profile table gives them
    step, profiled, classes = at["step_ms"], at["profiled_step_ms"], at["class_ms"]
    parts = [f"{PROFILE_CLASSES.get(k, k)} {v:.2f} ms ({v / profiled:.0%})" for k, v in
             sorted(classes.items(), key=lambda kv: -kv[1]) if v / profiled >= 0.02]
    parts.append(f"gaps {at['gaps_ms']:.2f} ms ({at['gaps_ms'] / profiled:.0%})")
    text = f"a decode step at B = {batch} takes {step:.2f} ms; profiled: " + ", ".join(parts)
    bw = bw or {}
    if bw.get("weights_gb_per_step") and bw.get("copy_gb_per_s") and classes.get("gemm"):
        rate = bw["weights_gb_per_step"] / (classes["gemm"] / 1e3)
        text += (f"; the GEMMs read the {bw['weights_gb_per_step']:.1f} GB of weights at {rate:,.0f} GB/s, "
                 f"{rate / bw['copy_gb_per_s']:.0%} of the copy rate")
    return text


def _rollout(rec: dict) -> str:
    """The rollout cell's own record of flex's last round: occupancy, steps, chunks, prefill."""
    last = ((rec.get("engine") or {}).get("last_round")) or {}
    if not last:
        return "flex's rollout cell records no last round"
    bw = (rec.get("engine") or {}).get("bandwidth") or {}
    return (f"flex's last round: {last['rows_per_step']:.0f} of {rec['batch_size']} rows in flight per decode step on "
            f"average, {last['decode_steps']} steps in {last['decode_chunks']} chunks, {last['prefill_passes']} "
            f"prefill passes ({last['prefill_s']:.2f} s of {last['wall_s']:.2f} s)"
            + (f", {bw['of_copy_rate']:.0%} of the copy rate" if bw.get("of_copy_rate") else ""))


def _grpo_phases(x: dict, y: dict) -> str:
    """Each side's median rollout seconds (TRL's generation phase) against its median step."""
    out = []
    for r in (x, y):
        roll = step_median(r, "time/rollout_s")
        out.append(f"{r['backend']} {roll:.2f} s of {r['median_step_s']:.2f} s" if roll is not None
                   else f"{r['backend']} not recorded")
    return "the median step's rollout: " + ", ".join(out)


def _grpo_memory(x: dict) -> str:
    eng = x.get("engine") or {}
    if not eng:
        return ""
    return (f"flex's engine reserved {fmt(eng.get('reserved'), '.1f')} GB (a KV pool of "
            f"{fmt(eng.get('kv_pool_gb'), '.1f')} GB, its merged weights {fmt(eng.get('weights_gb'), '.1f')} GB)")


def _decode_profile(recs: list[tuple[Path, dict]]) -> dict | None:
    return next((r for _, r in _of(recs, "decode_profile") if r.get("status") == "ok"), None)


def evaluate(recs: list[tuple[Path, dict]], limit: float | None) -> list[dict]:
    """One row per target: its value (None where there is none), why not, met, and what bounds it where not met."""
    df = aggregate.generation_frame([str(p) for p, _ in _of(recs, "generate")])
    by_path = {str(p): r for p, r in recs}
    profile = _decode_profile(recs)
    # the weights' bytes and the copy rate flex's greedy cell at each batch measured, for the GEMMs' read rate
    bw = {r["batch_size"]: r["engine"]["bandwidth"] for _, r in _of(recs, "generate")
          if r.get("backend") == "flex" and r.get("case") == "greedy" and (r.get("engine") or {}).get("bandwidth")}
    runs = {r["backend"]: r for _, r in _of(recs, "train") if not r["workload"].get("frozen")}
    out = []
    for t in TARGETS:
        value = why = spread = None
        bound = ""
        if t.kind in ("tps", "last", "copy"):
            x, y, why, flagged = _cell_pair(df, t, limit)
            if t.kind == "copy":
                why = why if x is None or x.status != "ok" else None
                value = None if why else x.of_copy_rate
                bound = _profile_at(profile, t.batch, bw.get(t.batch))
            elif why is None:
                value = (x.decode_tps / y.decode_tps if t.kind == "tps" else x.time_to_last_s / y.time_to_last_s)
                if flagged:  # the ratio's range over the rounds, the target judged on its far end
                    spread, why = (tps_range(x, y) if t.kind == "tps" else last_range(x, y)), flagged
            if t.kind == "tps":
                bound = _profile_at(profile, t.batch, bw.get(t.batch)) + (
                    " (flex's merged LoRA decodes as the base model does)" if t.case == "lora" else "")
            elif t.kind == "last" and x is not None and x.status == "ok":
                bound = _rollout(by_path[x.path])
        else:
            x, y = runs.get("flex"), runs.get("vllm")
            if not x or not y or x["status"] != "ok" or y["status"] != "ok":
                why = (f"flex {x['status'] if x else 'not run'}, vLLM {y['status'] if y else 'not run'}")
            elif t.kind == "grpo_step":
                value, bound = x["median_step_s"] / y["median_step_s"], _grpo_phases(x, y)
            else:
                value = x["peak_memory_gb"]["allocated"] / y["peak_memory_gb"]["allocated"]
                bound = _grpo_memory(x)
        judged = value if spread is None else (spread[0] if t.at_least else spread[1])
        met = None if value is None or pd.isna(judged) else bool(judged >= t.goal if t.at_least else judged <= t.goal)
        out.append({"target": t, "value": value, "why": why, "met": met, "bound": bound, "range": spread})
    return out


def table(rows: list[dict]) -> str:
    """The targets as a markdown table: what bounds a cell is said only where its target is not met."""
    lines = ["| target | goal | measured | met | where the time goes (same run), where not met |",
             "|---|--:|--:|---|---|"]
    for r in rows:
        t = r["target"]
        goal = f"{'≥' if t.at_least else '≤'} {t.goal:.0%}" if t.kind == "copy" else \
            f"{'≥' if t.at_least else '≤'} {t.goal:.2f}"
        if r["value"] is None:
            measured = f"— ({r['why']})"
        elif r.get("range"):
            measured = f"{r['value']:.2f} ⚑ ({fmt_range(r['range'])}; {r['why']})"
        else:
            measured = f"{r['value']:.0%}" if t.kind == "copy" else f"{r['value']:.2f}"
        met = "—" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(f"| {t.label} | {goal} | {measured} | {met} | {'' if r['met'] else r['bound']} |")
    return "\n".join(lines)


def block(root, run=None) -> str:
    """The README's targets block: the folder the answer comes from (headline.answer_run, or `run`: what it
    returned already), its targets' table."""
    run = run or headline.answer_run(root)
    if run is None:
        return "No headline run is published yet."
    folder, _, recs, cfg = run
    profile = _decode_profile(recs)
    return (f"flex's speed targets against what [`{folder.name}`](results/published/{folder.name}/) measured "
            f"(the run the answer above comes from). For a target not met: where the time goes in the same run, "
            f"from its decode profile, the rollout cell's record of its last round, or the GRPO runs' median step. "
            f"A value is shown only where both sides ran `ok` and their rounds spread at most the run's limit.\n\n"
            + table(evaluate(recs, headline.spread_limit(cfg)))
            + ("\n\nThe same run's decode profile. " + decode_step_table([profile]) if profile else ""))
