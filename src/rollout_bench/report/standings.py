"""flex against vLLM over every published run (results/published/), regenerated from the stats and never typed in
(`python -m rollout_bench.report.standings`; `--check` in the tests): results/published/STANDINGS.md. The same command
rewrites the README's answer block from the newest headline run alone (headline.py), and the block of flex's speed
targets read from the same run (targets.py).

Only a pair measured side by side counts: the two backends' jobs in one publication folder (one device session), on
the same GPU (the UUIDs their stats record), each alone on it: no other lease overlapped its timed rounds where its
stats say (stats before 2026-11-30, and jobs run without a lease, do not), and no other published job that ran on that
GPU (any kind, smoke runs too) overlapped the job's wall (two sessions' jobs leasing from different lock directories
do not see each other's leases; a cell's own generation job, its record and its other cells, is no other). Per cell
(model, GPU model, case, LoRA, sampling, completions per prompt, batch) a backend's run is its fastest ok variant in
that folder on that GPU, as in the pipeline's own head-to-head. A stats file copied unchanged into later folders counts once, in the earliest folder. Smoke runs are left out:
their jobs share the GPU eight at a time.
"""
import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core import atomic, stats
from . import aggregate, headline, targets
from .render import bandwidth, fmt, fmt_range, peak_gb, pct, tps_range

# a cell is per GPU model: a ratio on an H100 and one on an H200 are two findings, and the newer must not hide the other
GEN_KEY = ["model", "gpu", "lora_rank", "sampling", "num_generations", "batch_size", "case"]
TRAIN_KEY = ["model", "gpu", "lora_rank", "prompts_per_step", "num_generations", "max_new_tokens"]
TRAIN_COLUMNS = [*TRAIN_KEY, "backend", "variant", "status", "reason", "median_step_s", "peak_gb", "gpu_uuids",
                 "neighbours", "started_at", "wall_s", "folder"]
BEGIN, END = "<!-- standings:begin -->", "<!-- standings:end -->"
TARGETS_BEGIN, TARGETS_END = "<!-- targets:begin -->", "<!-- targets:end -->"  # issue 48's targets (targets.py)


def _is_smoke(path: Path, root: Path) -> bool:
    return any(d == "smoke" or d.endswith("-smoke") for d in path.relative_to(root).parts)


def _of_kind(records: list[tuple[Path, dict]], root: Path, kind: str) -> list[tuple[Path, dict]]:
    """The stats of `kind` among `records`, wherever a session put them, outside smoke runs."""
    return [(p, rec) for p, rec in records if rec.get("kind") == kind and not _is_smoke(p, root)]


def records(root) -> list[tuple[Path, dict]]:
    """Every JSON object under `root`, read once for both frames and the GPUs' busy windows."""
    out = []
    for p in sorted(Path(root).rglob("*.json")):
        rec = stats.read_json(p)
        if isinstance(rec, dict):
            out.append((p, rec))
    return out


def _window(started_at, wall_s) -> tuple[pd.Timestamp, pd.Timestamp]:
    t0 = pd.Timestamp(started_at)
    return t0, t0 + pd.Timedelta(seconds=float(wall_s))


def _on_gpu(recs: list[tuple[Path, dict]]) -> list[tuple[frozenset, pd.Timestamp, pd.Timestamp, frozenset]]:
    """Every published job of any kind that used a GPU (not `skipped`): its GPUs, its wall's window and the paths of
    its stats (one window's copies in later folders count once)."""
    out: dict[tuple, set] = {}
    for p, r in recs:
        uuids = (r.get("env") or {}).get("gpu_uuids")
        if uuids and r.get("status") != "skipped" and r.get("started_at") and r.get("wall_s") is not None:
            out.setdefault((frozenset(uuids), *_window(r["started_at"], r["wall_s"])), set()).add(str(p))
    return sorted(((*k, frozenset(v)) for k, v in out.items()), key=lambda x: x[1])


def _same_job(recs: list[tuple[Path, dict]]) -> dict[str, frozenset]:
    """A generation cell's stats path -> the paths of its job's record and of every cell of that job. One process
    runs a job's cells one after the other: its record's window spans them, and a cell's window (started_at to the
    second) can touch the next cell's; neither is a neighbour."""
    out = {}
    for p, r in recs:
        if r.get("kind") == "generate_job" and r.get("cells"):
            # the record sits in its cells' variant directory: results/generate/<model>/<backend>/<variant>/
            variant_dir = Path(r["cells"][0]["out"]).parent.parent.relative_to("results")
            top = p.parent.parents[len(variant_dir.parts) - 1]
            cells = [str(top / Path(c["out"]).relative_to("results")) for c in r["cells"]]
            family = frozenset([str(p), *cells])
            out.update({c: family for c in cells})
    return out


def _overlaps(df: pd.DataFrame, busy: list, same_job: dict[str, frozenset] | None = None) -> list[int]:
    """How many other jobs on the same GPU overlapped each row's wall (a copy of the row itself, and the row's own
    generation job, its record and its other cells, are no other)."""
    counts = []
    paths = df.path if "path" in df else [None] * len(df)
    for uuids, start, wall, path in zip(df.gpu_uuids, df.started_at, df.wall_s, paths):
        mine = set(uuids.split(",")) - {""}
        own = (same_job or {}).get(str(path), frozenset()) | {str(path)}
        t0, t1 = _window(start, wall)
        counts.append(sum(1 for u, s0, s1, ps in busy
                          if u & mine and s0 < t1 and t0 < s1 and (s0, s1) != (t0, t1) and not ps & own))
    return counts


def _folder(path: Path, root: Path) -> str:
    return path.relative_to(root).parts[0]


def _once(df: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """A file copied into later folders is the same job: keep the earliest folder (by the date in its name)."""
    day = df.folder.map(lambda f: (re.search(r"\d{4}-\d{2}-\d{2}", f) or [""])[0])
    return (df.assign(_day=day).sort_values(["_day", "folder"])
            .drop_duplicates(key + ["backend", "variant", "started_at"]).drop(columns="_day"))


def generation_frame(root, recs=None) -> pd.DataFrame:
    """Every published generation job on a GPU outside smoke runs: the summary CSV's columns (each file loaded
    and validated as the aggregate rule does), its peak memory (render.peak_gb) and its folder. `recs`: `records`
    of `root`, where the caller has read them."""
    root = Path(root)
    recs = records(root) if recs is None else recs
    paths = [p for p, _ in _of_kind(recs, root, "generate")]
    df = aggregate.generation_frame([str(p) for p in paths])
    df = df.assign(folder=[_folder(p, root) for p in paths], peak_gb=peak_gb, gpu=df.gpu_name.map(gpu_label))
    df = _once(df[df.gpu_name != "cpu"], GEN_KEY)
    return df.assign(overlaps=_overlaps(df, _on_gpu(recs), _same_job(recs)))


def train_frame(root, recs=None) -> pd.DataFrame:
    """Every published GRPO run on a GPU outside smoke runs but frozen controls: its median step, peak memory,
    GPU and neighbours. `recs` as for `generation_frame`."""
    root = Path(root)
    recs = records(root) if recs is None else recs
    rows = []
    for p, r in _of_kind(recs, root, "train"):
        wl = r["workload"]
        if not r["env"].get("gpu_name") or wl.get("frozen"):
            continue  # a frozen control (learning rate 0) is no rollout's step time
        rows.append({
            "model": r["model"], "gpu": gpu_label(r["env"]["gpu_name"]), "backend": r["backend"],
            "variant": r["variant"], "status": r["status"],
            "reason": r["reason"], "lora_rank": wl["lora_rank"],
            "prompts_per_step": wl.get("prompts_per_step", 1),  # 1 before it was a knob
            "num_generations": wl["num_generations"], "max_new_tokens": wl["max_new_tokens"],
            "median_step_s": r.get("median_step_s"), "peak_gb": (r.get("peak_memory_gb") or {}).get("allocated"),
            "gpu_uuids": ",".join(r["env"].get("gpu_uuids") or []),
            "neighbours": aggregate.neighbours(r.get("isolation")), "started_at": r["started_at"],
            "wall_s": r["wall_s"], "folder": _folder(p, root),
        })
    df = _once(pd.DataFrame(rows, columns=TRAIN_COLUMNS), TRAIN_KEY)
    return df.assign(overlaps=_overlaps(df, _on_gpu(recs)))


def gpu_label(name) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100 80GB HBM3': the GPU model a cell's rows are per."""
    return str(name).removeprefix("NVIDIA ")


def _alone(df: pd.DataFrame) -> pd.DataFrame:
    """Jobs that had the GPU to themselves: no lease beside their timed rounds (or their stats do not say) and no
    published job on their GPU during their wall."""
    return df[(df.neighbours.isna() | (df.neighbours == 0)) & (df.overlaps == 0)]


def _runs(df: pd.DataFrame, backend: str, key: list[str], speed: str, ascending: bool) -> pd.DataFrame:
    """`backend`'s ok runs alone on their GPU, its fastest variant per cell, folder and GPU; oldest first."""
    g = _alone(df)
    g = g[(g.backend == backend) & (g.status == "ok")]
    g = g.sort_values(speed, ascending=ascending).drop_duplicates(key + ["folder", "gpu_uuids"])
    return g.sort_values("started_at")


def pairs(df: pd.DataFrame, a: str, b: str, key: list[str], speed: str, ascending: bool = False) -> pd.DataFrame:
    """Every side-by-side pair of `a`'s and `b`'s runs (`_runs`) in one folder on one GPU. `speed` ranks the
    variants (tok/s: higher is faster; seconds a step: `ascending`); `ratio` is a's over b's."""
    by = key + ["folder", "gpu_uuids"]
    out = _runs(df, a, key, speed, ascending).merge(_runs(df, b, key, speed, ascending), on=by, suffixes=("_a", "_b"))
    out = out[out.gpu_uuids != ""]
    return out.assign(ratio=out[f"{speed}_a"] / out[f"{speed}_b"],
                      when=out[["started_at_a", "started_at_b"]].max(axis=1))


STEADY = 0.05  # a pair's ratio counts where both sides' timed rounds spread at most this (the README's answer's rule)


def steady(pair: pd.Series) -> bool:
    """Both sides' rounds spread at most STEADY; a record that does not say (GRPO steps, old runs) counts as steady."""
    spreads = (pair.get(f"round_spread_{s}") for s in "ab")
    return not any(v is not None and not pd.isna(v) and v > STEADY for v in spreads)


def spread_range(pair: pd.Series) -> tuple[float, float]:
    """a / b tok/s over the pair's rounds: render.tps_range on each side's suffixed columns."""
    side = {s: pd.Series({k: pair[f"{k}_{s}"] for k in ("decode_tps_worst", "decode_tps_best")}) for s in "ab"}
    return tps_range(side["a"], side["b"])


def newest_pair(found: pd.DataFrame) -> pd.Series | None:
    """The cell's newest steady pair, else its newest pair (a newer pair whose rounds spread hides no steady one)."""
    if found.empty:
        return None
    found = found.sort_values("when")
    held = found[found.apply(steady, axis=1)]
    return (held if not held.empty else found).iloc[-1]


@dataclass
class Cell:
    """What the published runs hold for one cell: its newest pair, or else each side's newest run alone (`run`),
    the newest `skipped` record of a side without one, and each side's other runs alone (`elsewhere`)."""
    key: dict
    pair: pd.Series | None
    run: dict
    skipped: dict
    elsewhere: dict
    status: dict  # each side's newest status: ok (alone), ok beside other jobs, skipped, failed, not run


def cells(df: pd.DataFrame, a: str, b: str, key: list[str], speed: str, ascending: bool = False) -> list[Cell]:
    """Each model's cells together, models in the order they were first measured, then by the key's other columns
    (the batch before the case: a model's greedy B = 64 and its batch sweep read as one progression)."""
    both = pairs(df, a, b, key, speed, ascending)
    runs = {s: _runs(df, s, key, speed, ascending) for s in (a, b)}
    df = df[df.backend.isin([a, b])]
    model_first = df.groupby("model").started_at.min()
    out = []
    for cell in sorted(set(df[key].itertuples(index=False, name=None)), key=lambda c: (model_first[c[0]], *c[1:])):
        mine = pd.Series(cell, index=key)
        of = {name: t[(t[key] == mine).all(axis=1)] for name, t in (("pair", both), (a, runs[a]), (b, runs[b]),
                                                                    ("all", df))}
        pair = newest_pair(of["pair"])
        where = (pair.folder, pair.gpu_uuids) if pair is not None else None
        elsewhere = {s: of[s][[(f, g) != where for f, g in zip(of[s].folder, of[s].gpu_uuids)]] for s in (a, b)}
        status, skipped = {}, {}
        for s in (a, b):
            rows = of["all"][of["all"].backend == s].sort_values("started_at")
            last = rows.iloc[-1] if not rows.empty else None
            status[s] = ("not run" if last is None else "ok" if not of[s].empty
                         else "ok beside other jobs" if last.status == "ok" else last.status)
            skips = rows[rows.status == "skipped"]
            skipped[s] = skips.iloc[-1] if of[s].empty and not skips.empty else None
        out.append(Cell(dict(zip(key, cell)), pair, {s: of[s].iloc[-1] if not of[s].empty else None for s in (a, b)},
                        skipped, elsewhere, status))
    return out


def _measured(folder: str, when: str) -> str:
    return f"{when[:10]} [`{folder}`](results/published/{folder}/)"


def _span(runs: pd.DataFrame, speed: str, spec: str) -> str:
    if runs.empty:
        return "—"
    lo, hi = runs[speed].min(), runs[speed].max()
    return f"{fmt(lo, spec)} ({len(runs)})" if lo == hi else f"{fmt(lo, spec)}–{fmt(hi, spec)} ({len(runs)})"


def _name(c: Cell) -> str:
    k = c.key
    return (f"{k['model']} {k['case']} B = {k['batch_size']} ({k['gpu']})" if "case" in k else
            f"{k['model']}, {k['prompts_per_step']} × {k['num_generations']} × {k['max_new_tokens']} ({k['gpu']})")


def _lists(found: list[Cell], a: str, b: str, speed: str, spec: str, unit: str) -> list[str]:
    """The cells without a pair, under the table: a side skipped, measured apart, one side only, none alone."""
    skips, apart, one, none = {}, [], [], []
    for c in found:
        if c.pair is not None:
            continue
        ok = [s for s in (a, b) if c.run[s] is not None]
        for s in ok:
            other = b if s == a else a
            if c.skipped[other] is not None:
                skips.setdefault(f"{other} skipped: {c.skipped[other].reason.rstrip('.')}.", []).append(_name(c))
        if len(ok) == 2:
            apart.append(f"{_name(c)}: {a} {fmt(c.run[a][speed], spec)} (`{c.run[a].folder}`), "
                         f"{b} {fmt(c.run[b][speed], spec)} (`{c.run[b].folder}`)")
        elif ok and c.skipped[b if ok[0] == a else a] is None:
            s = ok[0]
            one.append(f"{_name(c)}: {s} {fmt(c.run[s][speed], spec)} (`{c.run[s].folder}`), "
                       f"{b if s == a else a} {c.status[b if s == a else a]}")
        elif not ok:
            none.append(f"{_name(c)}: {a} {c.status[a]}, {b} {c.status[b]}")
    lines = []
    for reason, where in skips.items():
        lines += [f"{', '.join(where)}: {reason}", ""]
    for title, items in ((f"Measured, each alone on a GPU, but never side by side ({unit}; not comparable)", apart),
                         (f"Measured alone with one of the two ({unit})", one),
                         ("No figure of either alone on a GPU", none)):
        if items:
            lines += [f"{title}: " + "; ".join(items) + ".", ""]
    return lines


GEN_NOTE = ("One GPU a job; a cell is per GPU model. {a} / {b}: the newest pair whose two sides' timed rounds spread at "
            "most 5%, else the newest pair, its ratio then not in bold and flagged ⚑ with its range over the rounds (one "
            "side's slowest round against the other's fastest, both ways); beside it, each "
            "side's other runs alone on a GPU of that model in that cell (other sessions or GPUs, other code "
            "versions), their range and count. {a} GB/s: the "
            "weights and K/V its decode steps must read over their time, and that as a fraction of the device's copy "
            "rate measured in the same job. Round spread: a job's slowest timed round over its fastest, less 1. Peak "
            "GB: the most the job reserved, torch's caching allocator or the engine's own pool (vLLM's is its "
            "gpu_memory_utilization share), else torch's peak allocation. Prompts: `own` where each timed round "
            "sent prompts of its own; `re-sent` where every round sent the same ones, whose KV vLLM's prefix cache "
            "kept from the round before, in its favour.")


def generation_table(df: pd.DataFrame, a: str = "flex", b: str = "vllm") -> str:
    """A row per cell with a side-by-side pair, or where one side ran alone and the other was `skipped` (the
    reason below the table); then the cells without a pair."""
    found = cells(df, a, b, GEN_KEY, "decode_tps")
    lines = [f"| model | GPU | case | LoRA r | sampling | n | B | {a} tok/s | {b} tok/s | {a} / {b} | {a} elsewhere "
             f"| {b} elsewhere | {a} GB/s (of copy) | round spread {a}, {b} | peak GB {a}, {b} | prompts "
             f"| measured |", "|---|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|---|---|"]
    for c in found:
        k = c.key
        head = (f"| {k['model']} | {k['gpu']} | {k['case']} | {k['lora_rank']} | {k['sampling']} "
                f"| {k['num_generations']} | {k['batch_size']} ")
        elsewhere = f"| {_span(c.elsewhere[a], 'decode_tps', ',.0f')} | {_span(c.elsewhere[b], 'decode_tps', ',.0f')} "
        p = c.pair
        if p is not None:
            prompts = "own" if p.fresh_prompts_a and p.fresh_prompts_b else "re-sent"
            ratio = f"**{fmt(p.ratio, '.2f')}**" if steady(p) else f"{fmt(p.ratio, '.2f')} ⚑ ({fmt_range(spread_range(p))})"
            lines.append(head + f"| {fmt(p.decode_tps_a)} | {fmt(p.decode_tps_b)} | {ratio} "
                         + elsewhere + f"| {bandwidth(p.decode_gb_per_s_a, p.of_copy_rate_a)} "
                         f"| {pct(p.round_spread_a)}, {pct(p.round_spread_b)} "
                         f"| {fmt(p.peak_gb_a, '.0f')}, {fmt(p.peak_gb_b, '.0f')} | {prompts} "
                         f"| {_measured(p.folder, p.when)} |")
        elif c.run[a] is not None and c.run[b] is None and c.skipped[b] is not None:
            r = c.run[a]
            lines.append(head + f"| {fmt(r.decode_tps)} | skipped | — " + elsewhere
                         + f"| {bandwidth(r.decode_gb_per_s, r.of_copy_rate)} "
                         f"| {pct(r.round_spread)}, — | {fmt(r.peak_gb, '.0f')}, — | — "
                         f"| {_measured(r.folder, r.started_at)} |")
    return "\n".join(lines + ["", GEN_NOTE.format(a=a, b=b), ""]
                     + _lists(found, a, b, "decode_tps", ",.0f", "tok/s"))


def train_table(df: pd.DataFrame, a: str = "flex", b: str = "vllm") -> str:
    """A row per cell with a side-by-side pair of GRPO runs; then the cells without one."""
    found = cells(df, a, b, TRAIN_KEY, "median_step_s", ascending=True)
    lines = [f"| model | GPU | LoRA r | prompts × completions × tokens | {a} s/step | {b} s/step | {a} / {b} "
             f"| peak alloc GB {a}, {b} | measured |", "|---|---|--:|---|--:|--:|--:|---|---|"]
    for c in found:
        if (p := c.pair) is not None:
            k = c.key
            lines.append(f"| {k['model']} | {k['gpu']} | {k['lora_rank']} | {k['prompts_per_step']} "
                         f"× {k['num_generations']} "
                         f"× {k['max_new_tokens']} | {fmt(p.median_step_s_a, '.3f')} "
                         f"| {fmt(p.median_step_s_b, '.3f')} "
                         f"| **{fmt(p.ratio, '.2f')}** | {fmt(p.peak_gb_a, '.1f')}, {fmt(p.peak_gb_b, '.1f')} "
                         f"| {_measured(p.folder, p.when)} |")
    if len(lines) == 2:
        lines = [f"No GRPO run of {a} and of {b} has been measured side by side on one GPU, each alone on it."]
    return "\n".join(lines + [""] + _lists(found, a, b, "median_step_s", ".3f", "s a step"))


def gpu_models(config_path) -> list[str]:
    """The models the gpu profile of `config_path` runs (its generation cases and GRPO's learner): the standings'
    rows. Other models in published runs (the smoke run's, probes of tiny ones) are not the benchmark's."""
    import yaml

    from ..pipeline import config, jobs

    with open(config_path) as f:
        raw = {**(yaml.safe_load(f) or {}), "profile": "gpu"}
    return jobs.all_models(config.resolve(raw))


def block(root, models: list[str], a: str = "flex", b: str = "vllm") -> str:
    """The README's block, between its markers: the runs of `models` under `root`."""
    recs = records(root)
    gen, train = generation_frame(root, recs), train_frame(root, recs)
    return "\n".join([
        BEGIN,
        f"Generation, {a} against {b}: decode tok/s as each job's stats give it (the median over its timed rounds):",
        "", generation_table(gen[gen.model.isin(models)], a, b),
        f"GRPO, the median step over steps 4..N with {a} and with {b} as the rollout ({a} / {b} below 1: {a}'s step "
        "is the shorter):",
        "", train_table(train[train.model.isin(models)], a, b),
        END])


HISTORY = "STANDINGS.md"
HISTORY_HEAD = ("# Every published pair, flex against vLLM\n\nRegenerated by `python -m rollout_bench.report.standings` from "
                "every folder here; the README's answer is the newest headline run alone.\n\n")


def update(readme, root, models: list[str], check: bool = False) -> bool:
    """Rewrite the README's answer block (the newest headline run) and root/STANDINGS.md (every published pair) from
    the stats under `root`; with `check`, only say whether both are current. True where both already were."""
    text = Path(readme).read_text()
    run = headline.answer_run(root)  # both blocks read the one answer run
    new = replace_block(text, "\n".join([BEGIN, headline.block(root, run=run), END]))
    new = replace_block(new, "\n".join([TARGETS_BEGIN, targets.block(root, run=run), TARGETS_END]), TARGETS_BEGIN,
                        TARGETS_END)
    history = Path(root) / HISTORY
    old_history = history.read_text() if history.exists() else ""
    new_history = HISTORY_HEAD + block(root, models) + "\n"
    if not check:
        if new != text:
            atomic.write_text(readme, new)
        if new_history != old_history:
            atomic.write_text(history, new_history)
    return new == text and new_history == old_history


def replace_block(text: str, new: str, begin: str = BEGIN, end: str = END) -> str:
    """`text` with its one block between `begin` and `end` replaced by `new`; an error where the markers are not
    there once each."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"expected one '{begin}' line and then one '{end}' line; put them where the table goes")
    return text[:text.index(begin)] + new + text[text.index(end) + len(end):]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rollout_bench.report.standings", description=__doc__.split("\n\n")[0])
    ap.add_argument("--published", default="results/published", help="the published runs")
    ap.add_argument("--readme", default="README.md", help="the file whose standings block is rewritten")
    ap.add_argument("--config", default="config/config.yaml", help="whose gpu profile names the models")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 where the block is out of date")
    a = ap.parse_args(argv)
    for flag, path, is_ok in (("--published", a.published, Path.is_dir), ("--readme", a.readme, Path.is_file),
                              ("--config", a.config, Path.is_file)):
        if not is_ok(Path(path)):
            print(f"{flag} {path}: not found (run from the checkout's root, or pass {flag})", file=sys.stderr)
            return 2
    try:
        current = update(a.readme, a.published, gpu_models(a.config), check=a.check)
    except ValueError as e:
        print(f"{a.readme}: {e}", file=sys.stderr)
        return 2
    if a.check and not current:
        print(f"{a.readme} or {Path(a.published) / HISTORY}: not what {a.published} gives; run python -m "
              f"rollout_bench.report.standings", file=sys.stderr)
        return 1
    print(f"{a.readme}, {Path(a.published) / HISTORY}: {'current' if current else 'rewritten'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
