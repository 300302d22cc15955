"""Summary CSV -> markdown tables and altair charts (self-contained HTML, SVG and PNG)."""
from pathlib import Path

import altair as alt
import pandas as pd

from ..core import atomic


def fmt(v, spec=",.0f"):
    return "" if v is None or pd.isna(v) else format(v, spec)


def pct(v) -> str:
    return "" if v is None or pd.isna(v) else f"{100 * v:.1f}%"  # 5.3% is past the 5% a ratio needs


def _with_reference(df: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Add `pct_of_ref`: decode tok/s over the reference backend's on the same model/case/batch."""
    ref = (df[(df.backend == reference) & (df.status == "ok")]
           .groupby(["model", "case", "batch_size"])["decode_tps"].max().rename("ref_tps"))
    out = df.join(ref, on=["model", "case", "batch_size"])
    out["pct_of_ref"] = 100 * out["decode_tps"] / out["ref_tps"]
    return out


def generation_table(df: pd.DataFrame, reference: str) -> str:
    """One markdown section per model and case: backend/variant rows x batch size."""
    df = _with_reference(df, reference)
    lines = []
    for (model, case), g in df.groupby(["model", "case"], sort=True):
        first = g.iloc[0]
        if not g.ignore_eos.all():
            lines += _eos_section(model, case, g, reference)
            continue
        if any(c in g and g[c].fillna(False).astype(bool).any() for c in ("long_prompts", "prefill_rate")):
            lines += _prefill_section(model, case, g, reference)
            continue
        lines += [f"### {model} — {case} (LoRA r={first.lora_rank}, sampling {first.sampling}, "
                  f"n={first.num_generations})", "",
                  f"| backend | variant | batch | decode tok/s | best tok/s | % of {reference} | decode GB/s (of copy) "
                  f"| peak alloc GB | peak reserved GB | setup s | status |",
                  "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
        for r in g.sort_values(["backend", "variant", "batch_size"]).itertuples():
            lines.append(f"| {r.backend} | {r.variant} | {r.batch_size} | {fmt(r.decode_tps)} "
                         f"| {fmt(r.decode_tps_best)} | {fmt(r.pct_of_ref, '.1f')} | {_bandwidth(r)} "
                         f"| {fmt(r.peak_alloc_gb, '.2f')} | {fmt(r.peak_reserved_gb, '.2f')} "
                         f"| {fmt(r.setup_s, '.1f')} | {_status(r)} |")
        lines.append("")
    hw = ", ".join(sorted(set(df.gpu_name.astype(str))))
    lines.insert(0, f"Hardware: {hw}. Decode tok/s = the median over rounds of a round's decoded tokens / its wall; "
                    f"decode GB/s = the weights and K/V a decode step must read, over the last round's decode time, "
                    f"and its fraction of the device's measured copy rate (engines that count their bytes); skipped "
                    f"and failed rows say why.\n")
    return "\n".join(lines) + "\n"


PROFILE_CLASSES = {"gemm": "GEMM", "attention": "attention", "block_mask": "BlockMask",
                   "norm_rotary_elementwise": "norm/rotary/elementwise", "sampling": "sampling"}


def _class_ms(p: dict) -> list[float]:
    """A profiled batch's ms per step in each kernel class, then the gaps: the columns both decode tables show."""
    return [p["class_ms"][c] for c in PROFILE_CLASSES] + [p["gaps_ms"]]


def decode_step_table(records: list[dict]) -> str:
    """Decode-profile records (decode_profile.py) -> where a decode step's time goes: per model and batch,
    milliseconds per kernel class and the gaps, each with its share of the profiled step."""
    lines = ["| model | batch | steps run as | step ms | " + " | ".join(PROFILE_CLASSES.values())
             + " | gaps | kernels/step | hardware |",
             "|---|--:|---|--:|" + "--:|" * (len(PROFILE_CLASSES) + 2) + "---|"]
    for rec in sorted(records, key=lambda r: r["model"]):
        hw = rec["env"].get("gpu_name") or "cpu"
        for b, p in sorted(rec["by_batch"].items(), key=lambda kv: int(kv[0])):
            lines.append(f"| {rec['model']} | {b} | {p['replay']} | {p['step_ms']:.3f} | "
                         + " | ".join(_share(ms, p["profiled_step_ms"]) for ms in _class_ms(p))
                         + f" | {fmt(p['kernels_per_step'], '.0f')} | {hw} |")
    return ("Where one decode step's time goes (diagnostics/step_profile.py), mid-generation, greedy, with the "
            "kernel options flex jobs replay. Step ms: the step alone, unprofiled; each class and the gaps: "
            "milliseconds per step in the profiled steps, and their share of those. Off CUDA the steps are "
            "eager and CPU ops stand for kernels: a check of the code path, not a speed.\n\n"
            + "\n".join(lines) + "\n")


def decode_step_versus(labelled: list[tuple[str, dict]], model: str) -> str:
    """Decode-profile records of one model made by different code (label, record), batch by batch: the step and each
    kernel class in ms per step, so that a change's effect reads down a column."""
    lines = ["| code | batch | step ms | " + " | ".join(PROFILE_CLASSES.values()) + " | gaps | kernels/step |",
             "|---|--:|--:|" + "--:|" * (len(PROFILE_CLASSES) + 2)]
    batches = sorted({int(b) for _, rec in labelled for b in rec["by_batch"]})
    for b in batches:
        for label, rec in labelled:
            if rec["model"] != model:
                raise ValueError(f"decode profile {label!r} is of {rec['model']}, not {model}")
            p = rec["by_batch"].get(str(b))
            if p is None:
                continue
            lines.append(f"| {label} | {b} | {p['step_ms']:.2f} | " + " | ".join(f"{ms:.2f}" for ms in _class_ms(p))
                         + f" | {fmt(p['kernels_per_step'], '.0f')} |")
    return "\n".join(lines) + "\n"


def _share(ms: float, whole: float) -> str:
    """'0.412 (23%)': milliseconds and their share of the whole step."""
    return f"{ms:.3f} ({ms / whole:.0%})" if whole else f"{ms:.3f}"


def bandwidth(gbps, frac) -> str:
    """'3,120 (73%)': decode GB/s and its fraction of the copy rate, the fraction only where it was measured (CUDA)."""
    if gbps is None or pd.isna(gbps):
        return ""
    return fmt(gbps) + ("" if frac is None or pd.isna(frac) else f" ({frac:.0%})")


def _bandwidth(r) -> str:
    return bandwidth(getattr(r, "decode_gb_per_s", None), getattr(r, "of_copy_rate", None))


def one_line(text) -> str:
    """Text for one markdown table cell: a traceback's newlines would end the row, its pipes split it."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _status(r) -> str:
    return "ok" if r.status == "ok" else f"{r.status}: {one_line(r.reason)}"


def _eos_section(model: str, case: str, g: pd.DataFrame, reference: str) -> list[str]:
    """A case where EOS ends completions: how long they ran, when the last one came, how full the
    engine kept its decode batch, beside the speed."""
    first = g.iloc[0]
    lines = [f"### {model} — {case} (EOS on; LoRA r={first.lora_rank}, sampling {first.sampling}, "
             f"n={first.num_generations})", "",
             f"| backend | variant | batch | decode tok/s | % of {reference} | length p50 | length p90 | ended by EOS "
             f"| time to last s | decode occupancy | peak alloc GB | status |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in g.sort_values(["backend", "variant", "batch_size"]).itertuples():
        eos = fmt(100 * r.eos_rate, ".0f") + " %" if pd.notna(r.eos_rate) else "—"
        lines.append(f"| {r.backend} | {r.variant} | {r.batch_size} | {fmt(r.decode_tps)} "
                     f"| {fmt(r.pct_of_ref, '.1f')} | {fmt(r.len_p50)} | {fmt(r.len_p90)} | {eos} "
                     f"| {fmt(r.time_to_last_s, '.2f')} | {fmt(r.decode_occupancy, '.2f') or '—'} "
                     f"| {fmt(r.peak_alloc_gb, '.2f')} | {_status(r)} |")
    return lines + ["", "Lengths in tokens (EOS included); time to last = the median round wall, which ends with "
                        "the last completion; decode occupancy = rows the engine decoded per decode step / batch "
                        "(— where the engine does not count its rows).", ""]


def prefill_kernel(r) -> str:
    """'fa4', 'flex-triton (no CUDA device)' (the FA4 guard's reason, short), or the backend's own kernel."""
    kernel, why = getattr(r, "prefill_kernel", None), getattr(r, "prefill_kernel_reason", None)
    if kernel is None or pd.isna(kernel):
        return "—" if why is None or pd.isna(why) else f"— ({why})"
    return f"{kernel} ({why})" if kernel == "flex-triton" and isinstance(why, str) else str(kernel)


def _prefill_section(model: str, case: str, g: pd.DataFrame, reference: str) -> list[str]:
    """A prefill-heavy case (long prompts, few new tokens) or one that measures its prefill (prefill_rate): the
    prefill-only rate and the kernel that ran the prefill beside the round's speed."""
    first = g.iloc[0]
    long = "long_prompts" in g and g.long_prompts.fillna(False).astype(bool).any()
    lines = [f"### {model} — {case} ({'prefill-heavy: long prompts' if long else 'prefill rate'}; "
             f"LoRA r={first.lora_rank}, sampling "
             f"{first.sampling}, n={first.num_generations})", "",
             f"| backend | variant | batch | prompt tokens | round s | decode tok/s | % of {reference} "
             f"| prefill tok/s | engine prefill tok/s | prefill kernel | peak alloc GB | status |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|---|--:|---|"]
    for r in g.sort_values(["backend", "variant", "batch_size"]).itertuples():
        tps = getattr(r, "prefill_tps", None)
        why = getattr(r, "prefill_reason", None)
        no_rate = "—" if r.status != "ok" or why is None or pd.isna(why) else f"— ({why})"
        if r.status == "ok" and not getattr(r, "prefill_rate", True):
            no_rate = "— (not measured: prefill_rate off)"
        lines.append(f"| {r.backend} | {r.variant} | {r.batch_size} | {fmt(getattr(r, 'prompt_tokens_mean', None))} "
                     f"| {fmt(getattr(r, 'median_wall_s', None), '.3f')} | {fmt(r.decode_tps)} "
                     f"| {fmt(r.pct_of_ref, '.1f')} | {fmt(tps) or no_rate} "
                     f"| {fmt(getattr(r, 'prefill_engine_tps', None)) or '—'} | {prefill_kernel(r)} "
                     f"| {fmt(r.peak_alloc_gb, '.2f')} | {_status(r)} |")
    return lines + ["", "Prompt tokens: a prompt's mean over the timed rounds; round s: the median round wall; prefill "
                        "tok/s: prompt tokens / s of a one-token call on the last round's prompts (no prefix cache "
                        "hit), one method for every engine; engine prefill tok/s: flex's own prefill passes in that "
                        "call; prefill kernel: fa4, flex-triton (why not FA4) or the backend's own.", ""]


def peak_gb(df: pd.DataFrame) -> pd.Series:
    """Peak GPU memory: the engine's reserved pool where it reports one, else torch's peak allocation."""
    return df.peak_reserved_gb.fillna(df.peak_alloc_gb)


def _best_ok(df: pd.DataFrame, backend: str) -> pd.DataFrame:
    """Per model/case/batch: the backend's fastest ok variant, else its first row (to say why not)."""
    g = df[df.backend == backend].assign(ok=lambda d: d.status == "ok", peak_gb=peak_gb)
    g = g.sort_values(["ok", "decode_tps"], ascending=False, na_position="last")
    return g.drop_duplicates(["model", "case", "batch_size"]).set_index(["model", "case", "batch_size"])


def spread_failed(r, limit: float | None = None) -> bool:
    """The cell's timed rounds spread more than its job's max_round_spread, after its re-measures: the job's own
    verdict (spread_ok), or for a record without one (before 2026-12-05) its round spread against `limit`."""
    v = r.get("spread_ok")
    if v is not None and not pd.isna(v):
        return not bool(v)
    spread = r.get("round_spread")
    return limit is not None and spread is not None and not pd.isna(spread) and spread > limit


def tps_range(x, y) -> tuple[float, float]:
    """x / y tok/s over the rounds (rows of the generation frame): x's slowest round against y's fastest, and x's
    fastest against y's slowest."""
    return x.decode_tps_worst / y.decode_tps_best, x.decode_tps_best / y.decode_tps_worst


def last_range(x, y) -> tuple[float, float]:
    """x / y time to the last completion over the rounds (a round ends with its last completion), fastest first."""
    return x.fast_round_s / y.slow_round_s, x.slow_round_s / y.fast_round_s


def fmt_range(r: tuple[float, float]) -> str:
    """'lo–hi'; '—' for an end its records cannot give (no per-round rates)."""
    return f"{fmt(r[0], '.2f') or '—'}–{fmt(r[1], '.2f') or '—'}"


def head_to_head(df: pd.DataFrame, a: str, b: str) -> str:
    """`a` against `b` wherever either ran: decode tok/s of each (its fastest variant, named), a / b, each side's
    round spread, and peak memory (the engine's reserved pool where it reports one, else torch's peak allocation).
    Where either side's rounds spread more than its job allowed, the ratio is flagged (⚑) with its range over the
    rounds: a reader would take a bare one for a steady measurement."""
    left, right = _best_ok(df, a), _best_ok(df, b)
    keys = sorted(set(left.index) | set(right.index))
    if not keys:
        return f"### {a} / {b}\n\nNeither {a} nor {b} is in these results.\n"
    lines = [f"### {a} / {b}", "",
             (f"| model | case | LoRA r | sampling | n | batch | {a} variant | {a} tok/s | {b} variant | {b} tok/s "
              f"| {a} / {b} | round spread {a}, {b} | {a} peak reserved GB | {b} peak reserved GB |"),
             "|---|---|--:|---|--:|--:|---|--:|---|--:|--:|---|--:|--:|"]

    def side(t, key):
        if key not in t.index:
            return "", "not run", None, "", "—", False
        r = t.loc[key]
        if r.status != "ok":
            return r.variant, r.status, None, "", "—", False
        return (r.variant, fmt(r.decode_tps), r, fmt(r.peak_gb, ".1f"), pct(r.get("round_spread")) or "—",
                spread_failed(r))

    for key in keys:
        first = (left if key in left.index else right).loc[key]
        (na, ta, ra, ma, sa, fa), (nb, tb, rb, mb, sb, fb) = side(left, key), side(right, key)
        ratio = fmt(ra.decode_tps / rb.decode_tps, ".2f") if ra is not None and rb is not None and rb.decode_tps else ""
        if ratio and (fa or fb):
            ratio += f" ⚑ ({fmt_range(tps_range(ra, rb))})"
        lines.append(f"| {key[0]} | {key[1]} | {first.lora_rank} | {first.sampling} | {first.num_generations} "
                     f"| {key[2]} | {na} | {ta} | {nb} | {tb} | {ratio} | {sa}, {sb} | {ma} | {mb} |")
    return "\n".join(lines) + "\n"


# Vega-Lite cuts legend labels at 160 px ("transformers_cb/paged_sdp…"); 0 lifts the limit.
LEGEND = alt.Legend(labelLimit=0, titleLimit=0)


def tps_vs_batch(df: pd.DataFrame) -> alt.Chart:
    ok = df[df.status == "ok"].assign(engine=lambda d: d.backend + "/" + d.variant)
    # most cases run one batch size, so they show as points: the case needs a shape, not only a dash
    # (the shape's legend is the case legend; a second one for the dash would show one symbol for all)
    return (alt.Chart(ok).mark_line(point=True)
            .encode(x=alt.X("batch_size:Q", scale=alt.Scale(type="log", base=2), title="batch (sequences)",
                             axis=alt.Axis(values=sorted(ok.batch_size.unique().tolist()))),  # no 4.5 ticks
                    y=alt.Y("decode_tps:Q", title="decode tok/s"), color=alt.Color("engine:N", legend=LEGEND),
                    strokeDash=alt.StrokeDash("case:N", legend=None), shape=alt.Shape("case:N", legend=LEGEND),
                    tooltip=["engine", "case", "batch_size", "decode_tps", "peak_alloc_gb"])
            .facet(column="model:N").properties(title="Decode throughput vs batch size"))


def tps_vs_memory(df: pd.DataFrame) -> alt.Chart:
    ok = df[df.status == "ok"].assign(engine=lambda d: d.backend + "/" + d.variant, peak_gb=peak_gb)
    return (alt.Chart(ok).mark_point(filled=True, size=80)
            .encode(x=alt.X("peak_gb:Q", title="peak GPU memory GB (reserved where the engine reports it)"),
                    y=alt.Y("decode_tps:Q", title="decode tok/s"), color=alt.Color("engine:N", legend=LEGEND),
                    shape=alt.Shape("case:N", legend=LEGEND),
                    tooltip=["engine", "case", "batch_size", "decode_tps", "peak_gb"])
            .facet(column="model:N").properties(title="Throughput vs peak memory"))


def save_chart(chart: alt.Chart, html_out, svg_out) -> None:
    """HTML with vega inlined (the GPU hosts are offline, where a CDN script leaves a blank page), SVG, and
    a PNG beside the SVG for places that show no SVG."""
    import vl_convert as vlc

    spec = chart.to_dict()
    atomic.write_text(html_out, chart.to_html(inline=True))
    atomic.write_text(svg_out, vlc.vegalite_to_svg(spec))
    atomic.write_bytes(png_path(svg_out), vlc.vegalite_to_png(spec, scale=2))


def png_path(svg_out) -> Path:
    return Path(svg_out).with_suffix(".png")
