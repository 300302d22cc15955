"""The README's answer: flex against vLLM from the newest published headline run alone (profile `headline`: every
cell side by side on one GPU, in one invocation, at one commit), regenerated from its stats, never typed. A run
whose invocation did not record its end (cut short: the device's budget ran out), or asked for named targets only
(part of the profile), is not the answer while a whole finished one exists; the block names it, and its pairs stay
in STANDINGS.md.

A cell's ratio is shown where both sides are `ok`. Where either side's timed rounds spread more than the run's
max_round_spread (the job measured the cell again while they did), the ratio is flagged and given with its range
over the rounds, the spread named below the table with where the slowest round's time went. The run's start-up
share is its GPU jobs' set-up seconds over their walls, from the generation jobs' records and the training stats.
"""
import json
from pathlib import Path

import pandas as pd

from ..pipeline import invocation, publish
from . import aggregate
from .train import mismatch_cell
from .render import bandwidth, fmt, fmt_range, last_range, peak_gb, pct, spread_failed, tps_range

PROFILE = "headline"


def folders(root) -> list[Path]:
    """Published headline runs under `root`, oldest first (by the date their manifest was written)."""
    return publish.runs(root, PROFILE)


def answer(found: list[Path]) -> tuple[Path, list[Path]]:
    """(the folder the answer comes from: the newest run of the whole profile that finished, else the newest
    finished, else the newest; the runs newer than it: cut short, or of named targets only)"""
    finished = [f for f in found if not invocation.cut_short(f)]
    whole = [f for f in finished if not invocation.targets(f)]
    folder = (whole or finished or found)[-1]
    return folder, found[found.index(folder) + 1:]


def answer_run(root) -> tuple[Path, list[Path], list[tuple[Path, dict]], dict] | None:
    """(the answer's folder, the cut-short runs newer than it, its JSON records, its config); None where no headline
    run is published under `root`."""
    found = folders(root)
    if not found:
        return None
    folder, newer = answer(found)
    return folder, newer, _read(folder), _config(folder)


def spread_limit(cfg: dict) -> float | None:
    return (cfg.get("workload") or {}).get("max_round_spread")


def over_limit(sides, limit: float | None) -> list:
    """The sides (rows of the generation frame) whose timed rounds spread more than their job's limit (render's
    verdict, the one the generation table shows; `limit` for records that carry none)."""
    return [s for s in sides if spread_failed(s, limit)]


def _read(folder: Path) -> list[tuple[Path, dict]]:
    """Every JSON object in a published folder, read once for the whole block."""
    out = []
    for p in sorted(folder.rglob("*.json")):
        rec = json.loads(p.read_text())
        if isinstance(rec, dict):
            out.append((p, rec))
    return out


def _of(recs: list[tuple[Path, dict]], kind: str) -> list[tuple[Path, dict]]:
    return [(p, r) for p, r in recs if r.get("kind") == kind]


# a generation cell's setup_phases (generation.job.setup_phases), in the order a job pays them, and their names
PHASES = {"before_s": "process starts", "build_s": "engine builds", "gate_s": "flex's gates against HF",
          "prepare_s": "cells' captures", "warmup_s": "warm-up rounds"}


def startup(recs: list[tuple[Path, dict]]) -> dict:
    """GPU jobs' set-up seconds over their walls: generation jobs (their records) and GRPO runs (their stats); and
    where the set-up went: the generation cells' phases, summed, and the GRPO runs' set-up."""
    setup = wall = 0.0
    phases = dict.fromkeys([*PHASES, "train_s"], 0.0)
    for _, job in _of(recs, "generate_job"):
        if job["cells"]:
            setup, wall = setup + job["setup_s"], wall + job["wall_s"]
        for cell in job["cells"]:
            for k, v in (cell.get("setup_phases") or {}).items():
                if k in PHASES:
                    phases[k] += v
    for _, rec in _of(recs, "train"):
        if rec["status"] == "ok" and rec.get("setup_s") is not None:
            setup, wall = setup + rec["setup_s"], wall + rec["wall_s"]
            phases["train_s"] += rec["setup_s"]
    return {"setup_s": setup, "wall_s": wall, "share": setup / wall if wall else None, "phases": phases}


def startup_note(share: dict) -> str:
    """`: process starts 33 s, engine builds 74 s, ...`: where the set-up went, from the cells that record it (runs
    before 2026-12-06 do not: then what set-up covers)."""
    ph = share["phases"]
    if not any(ph[k] for k in PHASES):
        return ": imports, loads, compiles, graph capture, gates and warm-ups"
    parts = [f"{name} {fmt(ph[k], ',.0f')} s" for k, name in PHASES.items() if ph[k]]
    if ph["train_s"]:
        parts.append(f"the GRPO runs' set-up {fmt(ph['train_s'], ',.0f')} s")
    return ": " + ", ".join(parts)


def _config(folder: Path) -> dict:
    import yaml

    return yaml.safe_load((folder / "config.yaml").read_text()) or {}


def _side(df: pd.DataFrame, backend: str, key: tuple) -> pd.Series | None:
    rows = df[(df.backend == backend) & (df.case == key[0]) & (df.batch_size == key[1])]
    return rows.iloc[-1] if not rows.empty else None


def _cell_name(r: pd.Series) -> str:
    """The case, and what sets it apart: its LoRA rank, its sampling where not greedy, the trace it replays."""
    extra = [f"LoRA r{r.lora_rank}"] if r.lora_rank else []
    if r.sampling != "greedy":
        extra.append(f"T = {r.temperature}" if r.sampling == "custom" else f"sampling {r.sampling}")
    if isinstance(r.get("trace"), str):
        extra.append(f"trace {r.trace}, {r.n_prompts} prompts × {r.num_generations}")
    return f"{r.case} ({', '.join(extra)})" if extra else r.case


def expected(cfg: dict) -> list[tuple[str, int]]:
    """The generation cells (case, batch) the run's config asked for, in its order."""
    cases = (cfg.get("workload") or {}).get("cases") or {}
    return [(name, bs) for name, c in cases.items() for bs in c.get("batch_sizes", [])]


def mismatches(folder: Path, recs: list[tuple[Path, dict]]) -> dict[str, dict]:
    """Each scored cell's mismatch figures (generation/mismatch.py), by its stats file's path in the folder."""
    out = {}
    for _, rec in _of(recs, "mismatch"):
        for cell, figures in rec["cells"].items():
            out[str(folder / cell.removeprefix("results/"))] = figures
    return out


def _mismatch(m: dict | None) -> str:
    """A side's logprobs against the trainer's: mean |Δ| (max); KL."""
    if not m:
        return "—"
    if "mean_abs" not in m:
        return "no tokens" if "tokens" in m else "—"
    return f"{fmt(m['mean_abs'], '.3f')} ({fmt(m['max_abs'], '.2f')}); {m['kl_k3']:.1e}"


def generation_rows(recs: list, cfg: dict, a: str, b: str, limit: float | None,
                    mm: dict[str, dict] | None = None) -> tuple[list[str], list[str], bool]:
    """Table rows, the notes for cells without a ratio, and whether some cell asked for has a side not run;
    mm: the cells' mismatch figures by stats path (`mismatches`)."""
    mm = mm or {}
    df = aggregate.generation_frame([str(p) for p, _ in _of(recs, "generate")])
    df = df.assign(peak_gb=peak_gb)
    rows, notes = [], []
    asked = expected(cfg)
    ran = sorted(set(zip(df.case, df.batch_size.astype(int))), key=lambda k: (
        asked.index(k) if k in asked else len(asked), k))
    missing = False
    for key in ran:
        x, y = _side(df, a, key), _side(df, b, key)
        first = x if x is not None else y
        name = _cell_name(first)
        missing = missing or x is None or y is None
        if x is None or y is None or x.status != "ok" or y.status != "ok":
            notes.append(f"{name}, B = {key[1]}: {a} {'not run' if x is None else x.status}, "
                         f"{b} {'not run' if y is None else y.status}"
                         + "".join(f" ({s.backend}: {str(s.reason)[:160]})" for s in (x, y)
                                   if s is not None and s.status != "ok"))
            continue
        spread_bad = over_limit((x, y), limit)
        ratio = f"**{fmt(x.decode_tps / y.decode_tps, '.2f')}**"
        last_ratio = f"**{fmt(x.time_to_last_s / y.time_to_last_s, '.2f')}**"
        if spread_bad:
            tps, last = tps_range(x, y), last_range(x, y)
            ratio = f"{fmt(x.decode_tps / y.decode_tps, '.2f')} ⚑ ({fmt_range(tps)})"
            last_ratio = f"{fmt(x.time_to_last_s / y.time_to_last_s, '.2f')} ⚑ ({fmt_range(last)})"
            again = " after the job measured it again" if max(x.attempts, y.attempts) > 1 else ""
            notes.append(f"{name}, B = {key[1]}: flagged, rounds spread "
                         + ", ".join(f"{s.backend} {100 * s.round_spread:.0f}%{_others(s)}" for s in spread_bad)
                         + f" (over {'its limit' if limit is None else f'{100 * limit:.0f}%'}{again}); "
                         + (f"time to last completion {a} / {b} {fmt_range(last)}" if pd.notna(first.trace) else
                            f"{a} / {b} {fmt_range(tps)}") + " over the rounds")
        last = f"{fmt(x.time_to_last_s, '.2f')}, {fmt(y.time_to_last_s, '.2f')} ({last_ratio})"
        rows.append(f"| {name} | {key[1]} | {fmt(x.decode_tps)} | {fmt(y.decode_tps)} | {ratio} | {last} "
                    f"| {bandwidth(x.decode_gb_per_s, x.of_copy_rate)} "
                    f"| {_spread(x)}, {_spread(y)} "
                    f"| {fmt(x.peak_gb, '.0f')}, {fmt(y.peak_gb, '.0f')} "
                    f"| {_mismatch(mm.get(x.path))} · {_mismatch(mm.get(y.path))} |")
    never = [k for k in asked if k not in ran]
    if never:
        notes.append("not run by either: " + ", ".join(f"{c} B = {bs}" for c, bs in never))
    return rows, notes, missing or bool(never)


def _others(s: pd.Series) -> str:
    """The CPU load of everything else on the host during a side's rounds, and where its slowest round's time went
    against its fastest's, where its stats record them."""
    out = "" if pd.isna(s.others_cpu) else f" with {100 * s.others_cpu:.0f}% of the host's CPUs busy elsewhere"
    if not pd.isna(s.slow_round_cpu):
        out += (f"; its slowest round {s.slow_round_s:.2f} s ({s.slow_round_gc_s:.2f} s collecting garbage, the "
                f"engine's thread on a CPU {100 * s.slow_round_cpu:.0f}% of it), its fastest {s.fast_round_s:.2f} s "
                f"({100 * s.fast_round_cpu:.0f}%)")
    return out


def _spread(s: pd.Series) -> str:
    return pct(s.round_spread) + ("" if pd.isna(s.others_cpu) else f" ({100 * s.others_cpu:.0f}%)")


def train_rows(recs: list, a: str, b: str) -> tuple[list[str], list[str], bool]:
    """The GRPO step pair's row, or the note saying why there is none; and whether a side did not run."""
    runs = {r["backend"]: r for _, r in _of(recs, "train") if not r["workload"].get("frozen")}
    x, y = runs.get(a), runs.get(b)
    if not x or not y or x["status"] != "ok" or y["status"] != "ok":
        return [], [f"GRPO step: {a} {x['status'] if x else 'not run'}, {b} {y['status'] if y else 'not run'}"
                    + "".join(f" ({r['backend']}: {str(r['reason'])[:160]})" for r in (x, y)
                              if r and r["status"] != "ok")], not x or not y
    wl = x["workload"]
    pa, pb = x["peak_memory_gb"]["allocated"], y["peak_memory_gb"]["allocated"]
    row = (f"| {x['model']}, LoRA r{wl['lora_rank']}, {wl['prompts_per_step']} × {wl['num_generations']} × "
           f"{wl['max_new_tokens']} tokens, median of steps {x.get('median_step_window')} "
           f"| {fmt(x['median_step_s'], '.3f')} | {fmt(y['median_step_s'], '.3f')} "
           f"| **{fmt(x['median_step_s'] / y['median_step_s'], '.2f')}** | {fmt(pa, '.1f')}, {fmt(pb, '.1f')} "
           f"| {mismatch_cell(x)} · {mismatch_cell(y)} |")
    return [row], [], False


def last_end(recs: list[tuple[Path, dict]]) -> float | None:
    """When the last job with a record (a cell's, a job's, a GRPO run's, the autotune pass's) ended, as a timestamp."""
    import datetime as dt

    ends = [dt.datetime.fromisoformat(r["started_at"]).timestamp() + r["wall_s"] for _, r in recs
            if isinstance(r.get("started_at"), str) and isinstance(r.get("wall_s"), (int, float))]
    return max(ends) if ends else None


def invocation_note(folder: Path, recs: list[tuple[Path, dict]]) -> str:
    """The command's wall from its own record (pipeline/invocation.py), where the run wrote one; where it did not
    record its end, how long after its start its last recorded job ended."""
    rec = invocation.read(folder)
    if rec is None:
        return "The invocation's wall time is not recorded in this folder (runs before 2026-12-06)."
    if rec.get("wall_s") is None:
        end = last_end(recs)
        after = "" if end is None else (f"; its last job with a record ended {fmt(end - rec['t0'], ',.0f')} s "
                                        f"({(end - rec['t0']) / 60:.1f} min) after its start")
        return f"The invocation did not record its end (stopped before its last jobs finished){after}."
    how = "" if rec.get("ok") else ", with failed jobs"
    return f"The invocation took {fmt(rec['wall_s'], ',.0f')} s ({rec['wall_s'] / 60:.1f} min) from start to end{how}."


def gate_note(recs: list, backend: str) -> str:
    """What the correctness checks on the timed rounds found (Generator.check_round), where the run made them."""
    judged = [r for _, r in _of(recs, "generate") if r.get("backend") == backend and r.get("round_gate")]
    if not judged:
        return ""
    bad = [r for r in judged if not r["round_gate"]["passed"]]
    tokens = sum(r["round_gate"]["tokens"] for r in judged)
    sampled = sum(1 for r in judged if r["round_gate"].get("judged_by", "argmax+logprob") != "argmax+logprob")
    kind = "judged" if sampled else "greedy"
    if bad:
        return (f"{backend}'s timed rounds against HF: {len(bad)} of {len(judged)} {kind} cells failed (their rows "
                f"above say not ok, and why). ")
    how = "argmax and logprob" if not sampled else (
        f"argmax and logprob in its {len(judged) - sampled} greedy cells, the logprob at the cell's temperature in its "
        f"{sampled} sampled {'cell' if sampled == 1 else 'cells'}")
    return (f"{backend}'s timed rounds against HF: in each of its {len(judged)} {kind} cells, completions of the last timed round (rows "
            f"spread over the batch, {tokens:,} tokens in all) matched HF float32 token by token, {how}, within the "
            f"gate's tolerance (the dtype's own plus twice HF's error in it). ")


def mismatch_rows(recs: list) -> str:
    rows = {r["workload"].get("rows") for _, r in _of(recs, "mismatch")}
    return "/".join(map(str, sorted(rows))) if rows else "a few"


def cache_note(recs: list) -> str:
    """How many of the generation jobs and GRPO runs that ran (a cell or the run `ok`) added files to their compile
    caches (compile_cache.settle), where the run recorded it: a warm directory can still lack a job's own kernels."""
    ran = [r for _, r in _of(recs, "generate_job") if any(c.get("status") == "ok" for c in r.get("cells", []))]
    ran += [r for _, r in _of(recs, "train") if r.get("status") == "ok"]
    jobs = [r for r in ran if (r.get("compile_cache") or {}).get("compiled")]
    if not jobs:
        return ""
    wrote = [_job_name(r) for r in jobs if any(r["compile_cache"]["compiled"].values())]
    note = (f" Compile caches: {len(jobs) - len(wrote)} of {len(jobs)} generation jobs and GRPO runs added no files "
            f"to them")
    if not wrote:
        return note + "."
    return note + f"; {', '.join(wrote)} added {'its' if len(wrote) == 1 else 'their'} own compiled kernels."


def _job_name(rec: dict) -> str:
    """`vllm's lora job`, `flex's GRPO run`: by its backend and its cells' cases."""
    if rec.get("kind") == "train":
        return f"{rec['backend']}'s GRPO run"
    return f"{rec['backend']}'s {'/'.join(dict.fromkeys(c['case'] for c in rec['cells']))} job"


def autotune_note(recs: list) -> str:
    walls = [r["wall_s"] for _, r in _of(recs, "autotune")]
    return f"; the autotune pass, a measurement of its own, took {fmt(sum(walls), ',.0f')} s more" if walls else ""


def block(root, a: str = "flex", b: str = "vllm", run=None) -> str:
    """The answer block's body: the newest headline folder under `root` (or `run`: what answer_run returned
    already), or a line saying there is none."""
    run = run or answer_run(root)
    if run is None:
        return "No headline run is published yet: `snakemake --cores 16 --resources gpu=1 --config profile=headline`."
    folder, newer, recs, cfg = run
    man = json.loads((folder / publish.MANIFEST).read_text())
    limit = spread_limit(cfg)
    gen, gen_notes, gen_missing = generation_rows(recs, cfg, a, b, limit, mismatches(folder, recs))
    train, train_notes, train_missing = train_rows(recs, a, b)
    share = startup(recs)
    commits = ", ".join(c[:12] for c in man["git_commits"]) or "not recorded"
    dirty = " (uncommitted changes)" if True in man["git_dirty"] else ""
    lines = [
        f"From [`{folder.name}`](results/published/{folder.name}/) alone: one invocation, `{man['command']}`, at "
        f"commit {commits}{dirty}, on one {', '.join(man['gpu_names'])} ({', '.join(u[:12] for u in man['gpu_uuids'])})"
        f", published {man['published_at'][:10]}. Its generation and GRPO jobs spent {fmt(share['setup_s'], ',.0f')} s "
        f"of {fmt(share['wall_s'], ',.0f')} s setting up ({fmt(100 * share['share'], '.0f') if share['share'] else '—'}%"
        f"{startup_note(share)}){autotune_note(recs)}."
        f"{cache_note(recs)} {invocation_note(folder, recs)}",
        "",
        f"| cell | B | {a} tok/s | {b} tok/s | {a} / {b} | time to last completion s: {a}, {b} ({a} / {b}) "
        f"| {a} GB/s (of copy) | round spread {a}, {b} (host CPUs busy elsewhere) | peak GB {a}, {b} "
        f"| logprobs vs trainer, mean \\|Δ\\| (max); KL: {a} · {b} |",
        "|---|--:|--:|--:|--:|---|--:|---|---|---|",
        *gen,
        "",
        *([f"| GRPO step ({a} rollout against {b} colocated) | {a} s/step | {b} s/step | {a} / {b} "
           f"| peak alloc GB {a}, {b} | sampler vs trainer, mean \\|Δlogp\\| per step; KL: {a} · {b} |",
           "|---|--:|--:|--:|---|---|", *train, ""] if train else []),
    ]
    if newer:
        names = ", ".join(f"`{f.name}`" for f in newer)
        lines[0] += (f" A newer headline run was cut short before its end, or ran part of the profile, and is not "
                     f"the answer: {names} (its pairs are in STANDINGS.md).")
    notes = gen_notes + train_notes
    if notes:
        lines += ["Cells flagged or without a ratio: " + "; ".join(notes) + ".", ""]
    if gate := gate_note(recs, a).strip():
        lines += [gate, ""]
    if gen_missing or train_missing:
        lines += ["This run did not finish: the cells and GRPO steps named above as not run are missing from its "
                  "folder (its README says why); the set-up share covers the jobs that finished.", ""]
    rounds = (cfg.get("workload") or {}).get("rounds", "the")
    lines.append(f"tok/s: the median over a cell's timed rounds of its decoded tokens over the round's wall "
                 f"({rounds} rounds, each with prompts of its own). Time to last completion: the median round's wall "
                 f"(a round ends with its last completion: what a GRPO step waits for). GB/s: the weights and K/V "
                 f"{a}'s decode steps must read over their time, and that as a fraction of the copy rate measured in "
                 f"the same job. Host CPUs busy elsewhere: the CPU time of everything but the job itself during its "
                 f"timed rounds, of all the host's CPUs (runs before 2026-12-06 do not record it). Peak GB: the most "
                 f"the job held, torch's reserved memory or the engine's own pool ({a}'s is sized for its job's "
                 f"largest batch, which every cell of the job shares; {b}'s is the device memory in use, its "
                 f"gpu_memory_utilization share and more). Logprobs vs trainer: the engine's logprob of each "
                 f"token it sampled against the trainer's forward on the same tokens (HF in the run's dtype, the "
                 f"LoRA adapter unmerged, as GRPO trains it; logits projected in float32, as TRL's "
                 f"cast_lm_head_to_fp32 does), on up to {mismatch_rows(recs)} rows of the cell's last timed "
                 f"round spread over the batch: the mean and largest |difference| per token (nats) and the KL "
                 f"estimate k3 = exp(d) - 1 - d, d = trainer - engine, what TRL's importance-sampling correction "
                 f"reads as off-policy ('—': not scored; runs before 2026-12-06 did not). In the GRPO row the same "
                 f"at every step of the run on all its completions: the median step's mean |Δ| (the worst step's) "
                 f"and the worst step's KL. A ratio whose sides' rounds spread more than "
                 f"{fmt(100 * limit, '.0f') if limit else '—'}% is flagged (⚑) and given with its range over the "
                 f"rounds: one side's slowest round against the other's fastest, both ways.")
    return "\n".join(lines)
