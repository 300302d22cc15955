"""What a run's GPU jobs will do and about how long they take, before any runs: `snakemake -n` prints it (on any
machine: a dry run needs no GPU), as does `python -m rollout_bench.pipeline.plan --profile P`.

The estimate is read off published stats of the same model and backend (results/published/, smoke runs left out):
a generation job's overhead (the median over published jobs of its name of their wall less their timed rounds: one
engine lifetime's set-up, gates and warm-ups) plus, per cell, its timed rounds at the published median round wall of
cells of the same workload (batch, LoRA, EOS, prompt and completion lengths, trace); a GRPO run's overhead plus its
steps at the published median step; the autotune pass's, the decode profile's and a mismatch job's published wall.
A job with no published figure is named as not estimated, never guessed. The figures of every GPU model are pooled,
and each model's own total follows (the same jobs take different times on an H100 and an H200); `--gpu NAME` takes
one model's figures alone. Below them, the published whole runs of the profile with the wall of their command (start to
end: assets, compiles, every job and the tables), a measurement, not an estimate.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

from . import config, invocation, jobs, publish

DRY_RUN_FLAGS = ("--dry-run", "--dryrun", "-n", "--just-print")


def is_dry_run(argv: list[str]) -> bool:
    """Whether Snakemake's command line asks for a dry run (-n, also in a cluster of short flags such as -np)."""
    for a in argv:
        if a in DRY_RUN_FLAGS:
            return True
        if a.startswith("-") and not a.startswith("--") and a[1:].isalpha() and "n" in a[1:] and len(a) <= 4:
            return True
    return False


def _published(root: Path) -> list[dict]:
    out = []
    for p in sorted(root.rglob("*.json")) if root.is_dir() else []:
        if any(d == "smoke" or d.endswith("-smoke") for d in p.relative_to(root).parts):
            continue
        try:
            rec = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if not (isinstance(rec, dict) and (rec.get("env") or {}).get("gpu_name")):
            continue
        if rec.get("kind") == "generate_job" and all(c.get("status") == "ok" for c in rec.get("cells") or [None]):
            out.append({**rec, "name": p.stem.removeprefix("job-")})  # its job's name: the file's (GenGroup.record)
        elif rec.get("status") == "ok":
            out.append(rec)
    return out


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _wall(recs: list[dict], kind: str, slug: str) -> float | None:
    """The median published wall of a one-per-model job (autotune, decode profile, mismatch) on `slug`."""
    return _median([r["wall_s"] for r in recs if r.get("kind") == kind and r["model"] == slug])


def _cell_key(wl: dict) -> tuple:
    """What sets a cell's round wall on one model and backend: its batch, LoRA or none, EOS, the prompt lengths it
    draws, the tokens it decodes and the trace it replays. Not the case's name: a sweep cell times what a greedy one
    of its batch does, and a long-prompt cell of that batch does not."""
    trace = wl.get("trace")
    return (wl.get("batch_size"), (wl.get("lora_rank") or 0) > 0, wl.get("ignore_eos"), wl.get("max_new_tokens"),
            tuple(wl.get("prompt_tokens") or ()), trace["name"] if trace else None)


def _named(gpu: str | None, name: str) -> bool:
    """Whether a GPU model's name holds `gpu` (case-insensitive); any name without one."""
    return not gpu or gpu.lower() in name.lower()


def _on(recs: list[dict], gpu: str | None) -> list[dict]:
    """The records of GPU models whose name holds `gpu`; all of them without one."""
    return [r for r in recs if _named(gpu, r["env"]["gpu_name"])]


def estimate(cfg: dict, root="results/published", gpu: str | None = None) -> list[dict]:
    """One row per GPU job: what it is, its cells, and its estimated seconds (None: no published figure); with
    `gpu`, from the stats of GPU models whose name holds it alone (case-insensitive)."""
    return _estimate(cfg, _on(_published(Path(root)), gpu))


def _estimate(cfg: dict, recs: list[dict]) -> list[dict]:
    gen = [r for r in recs if r.get("kind") == "generate" and r.get("rounds")]
    rows = []
    for slug in jobs.tuned_slugs(cfg) if cfg["autotune"]["enabled"] else []:
        rows.append({"job": f"autotune {slug}", "cells": 0, "seconds": _wall(recs, "autotune", slug)})
    for g in jobs.gen_groups(cfg):
        mine = [r for r in gen if r["model"] == g.model_slug and r["backend"] == g.backend]
        # a published job of this name: its wall less its timed rounds is the set-up, warm-ups and gates of one engine
        # lifetime; else (runs before one process served a job's cells) a cell's wall less its rounds, once
        lifetimes = [r["wall_s"] - r["timed_s"] for r in recs if r.get("kind") == "generate_job"
                     and r["model"] == g.model_slug and r["backend"] == g.backend and r["name"] == g.name]
        overhead = _median(lifetimes) if lifetimes else _median(
            [r["wall_s"] - sum(x["wall_s"] for x in r["rounds"]) for r in mine])
        total, unknown = overhead, 0
        for c in g.cells:
            wl = jobs.job_workload(cfg, c.model, c.backend, c.case, c.batch_size)
            cell = _median([r["median_wall_s"] for r in mine if _cell_key(r["workload"]) == _cell_key(wl)])
            if cell is None:
                unknown += 1
            elif total is not None:
                total += cell * (wl["rounds"] + (0 if lifetimes else 1))  # a job record's warm-ups are in its set-up
        rows.append({"job": g.key, "cells": len(g.cells), "seconds": total, "unknown_cells": unknown})
    for path in jobs.decode_profile_paths(cfg):
        slug = path.split("/")[2]
        rows.append({"job": f"decode_profile {slug}", "cells": 0, "seconds": _wall(recs, "decode_profile", slug)})
    for m in jobs.mismatch_jobs(cfg):
        slug = jobs.model_slug(m.model)
        rows.append({"job": f"mismatch {slug}", "cells": len(m.cells), "seconds": _wall(recs, "mismatch", slug)})
    for j in jobs.train_jobs(cfg):
        wl = jobs.train_workload(cfg, j.model, j.backend, j.seed, j.frozen)
        same = [r for r in recs if r.get("kind") == "train" and r["model"] == jobs.model_slug(j.model)
                and r["backend"] == j.backend and r.get("median_step_s")
                and r["workload"].get("max_new_tokens") == wl["max_new_tokens"]
                and r["workload"].get("num_generations") == wl["num_generations"]]
        step = _median([r["median_step_s"] for r in same])
        overhead = _median([r["wall_s"] - r.get("train_wall_s", 0) for r in same])
        rows.append({"job": f"train {jobs.model_slug(j.model)}/{j.backend}/seed{j.seed}", "cells": 0,
                     "seconds": None if step is None or overhead is None else overhead + step * j.steps})
    return rows


def _total(rows: list[dict]) -> str:
    known = [r["seconds"] for r in rows if r["seconds"] is not None]
    cells = sum(r.get("unknown_cells", 0) for r in rows if r["seconds"] is not None)
    return (f"~{sum(known):,.0f} s of GPU time for {len(known)} of {len(rows)} jobs"
            + (f"; {len(rows) - len(known)} not estimated" if len(known) < len(rows) else "")
            + (f"; {cells} cell(s) of those without a figure" if cells else ""))


def measured(root, profile: str, gpu: str | None = None) -> list[dict]:
    """The published runs of `profile` (of GPU models whose name holds `gpu`) whose invocation record is of the whole
    profile run to its end (invocation.whole_run), oldest first: each one's folder, its command's wall and outcome,
    its GPUs and commits; a record that cannot be read is listed with its error instead."""
    out = []
    for folder, man in publish.manifests(root, profile):
        names = man.get("gpu_names") or []
        if gpu and not any(_named(gpu, g) for g in names):
            continue
        try:
            rec = invocation.whole_run(folder)
        except (ValueError, AttributeError, TypeError) as e:  # a record written by hand or cut off mid-write
            out.append({"folder": folder.name, "error": str(e)})
            continue
        if rec is None:
            continue
        out.append({"folder": folder.name, "wall_s": rec["wall_s"], "ok": rec.get("ok"), "gpus": names,
                    "gpu_count": len(man.get("gpu_uuids") or []), "commits": man.get("git_commits") or [],
                    "dirty": True in (man.get("git_dirty") or [])})
    return out


def _measured_lines(root, profile: str, gpu: str | None) -> list[str]:
    runs = measured(root, profile, gpu)
    on = f" on a GPU named {gpu!r}" if gpu else ""
    if not runs:
        return [f"  measured: no published run of profile {profile}{on} records a whole run's wall"]
    lines = [f"  measured: the wall of the whole command (assets, compiles, jobs, tables) where a published run of "
             f"profile {profile}{on} records the whole profile run to its end:"]
    for r in runs:
        if "error" in r:
            lines.append(f"    {r['folder']}: its invocation record cannot be read ({r['error']})")
            continue
        gpus = ", ".join(r["gpus"]) or "unknown GPUs"
        if r["gpu_count"] > 1 and len(r["gpus"]) == 1:
            gpus = f"{r['gpu_count']} x {gpus}"
        commits = ", ".join(c[:7] for c in r["commits"]) or "unknown"
        outcome = {True: "", False: "; ended with failed jobs (what needed them did not run)",
                   None: "; its outcome not recorded"}[r["ok"]]
        lines.append(f"    {r['folder']}: {r['wall_s']:,.0f} s on {gpus}, commit {commits}"
                     f"{' (dirty)' if r['dirty'] else ''}{outcome}")
    return lines


def text(cfg: dict, root="results/published", gpu: str | None = None) -> str:
    published = _published(Path(root))  # read once: every model's estimate below filters it
    recs = _on(published, gpu)
    models = sorted({r["env"]["gpu_name"] for r in recs})
    if gpu and not models:
        raise ValueError(f"--gpu {gpu!r}: no published stats of such a GPU under {root}; the published GPU models: "
                         f"{', '.join(sorted({r['env']['gpu_name'] for r in published})) or 'none'}")
    rows = _estimate(cfg, recs)
    lines = [f"GPU jobs of profile {cfg['profile']}, estimated from the published stats under {root} "
             f"({'on ' + ', '.join(models) if gpu else 'every GPU model pooled'}; an estimate, not a result):"]
    for r in rows:
        est = f"~{r['seconds']:,.0f} s" if r["seconds"] is not None else "not estimated (no published figure)"
        if r["seconds"] is not None and r.get("unknown_cells"):
            est += f" + {r['unknown_cells']} cell(s) with no published figure"
        lines.append(f"  {r['job']}" + (f" ({r['cells']} cells)" if r["cells"] else "") + f": {est}")
    lines.append(f"  total: {_total(rows)}")
    if not gpu:
        lines += [f"  on {m} alone: {_total(_estimate(cfg, [r for r in recs if r['env']['gpu_name'] == m]))}"
                  for m in models]
    return "\n".join(lines + _measured_lines(root, cfg["profile"], gpu))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rollout_bench.pipeline.plan", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--published", default="results/published")
    ap.add_argument("--gpu", default=None, help="one GPU model's published figures alone (a part of its name: H200)")
    a = ap.parse_args(argv)
    import yaml

    with open(a.config) as f:
        cfg = config.resolve({**(yaml.safe_load(f) or {}), "profile": a.profile})
    try:
        print(text(cfg, a.published, a.gpu))
    except ValueError as e:
        print(f"plan: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
