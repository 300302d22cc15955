"""The GPU smoke run: every GPU code path at its smallest size, on one GPU, in a few minutes.

    python -m rollout_bench.pipeline.smoke [--gpu 0] [--workdir results/smoke] [--keep] [-- SNAKEMAKE ARGS]

Runs the workflow's `smoke` profile (config/config.yaml) in a scratch working directory, so that
no result, table or lock of a real run is touched: the autotune pass, every generation backend and
variant of the gpu profile, every GRPO backend for 2 steps, compare, the tables, then `publish` into
the scratch folder. Each job must end `ok`, or `skipped` with its reason; a `failed` job, or one that
wrote no output (a crash), fails the run, named with its log. The verdict, job by job, and the wall
time are written to <workdir>/results/tables/smoke.md and summary/smoke.json.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from .. import ROOT
from ..core import atomic
from . import config, jobs
from .publish import publish

LINKED = ("config", "src", "workflow")  # what the rules read relative to the working directory
OK = ("ok", "skipped")


@dataclass
class Job:
    output: str
    log: str
    status: str  # ok | skipped | failed | missing
    reason: str | None = None

    @property
    def passed(self) -> bool:
        return self.status in OK


def smoke_config() -> dict:
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    return config.resolve({**raw, "profile": "smoke"})


def _log_of(output: str) -> str:
    """A job's log beside its JSON output, as the rules name it: results/<kind>/….json -> results/logs/<kind>/….log."""
    assert output.startswith("results/") and output.endswith(".json"), output
    return "results/logs/" + output.removeprefix("results/").removesuffix(".json") + ".log"


def expected(cfg: dict) -> list[tuple[str, str]]:
    """(output, log) of every job whose output the verdict reads, in DAG order."""
    out = []
    for base in sorted({b for m in jobs.all_models(cfg) if (b := config.model_assets.warm_base(m))}):
        out.append((f"results/assets/models/{base}-warm", f"results/logs/assets/warmstart_{base}.log"))
    # the autotune pass runs for each model a flex job (generation or GRPO rollout) replays it on
    tuned = sorted(jobs.tuned_slugs(cfg)) if cfg["autotune"]["enabled"] else []
    profiles = jobs.decode_profile_paths(cfg)
    outputs = ([f"results/autotune/{slug}/decode_opts.json" for slug in tuned]
               + [j.path for j in jobs.gen_jobs(cfg)] + [j.path for j in jobs.train_jobs(cfg)]
               + [m.path for m in jobs.mismatch_jobs(cfg)] + jobs.band_paths(cfg) + jobs.compare_paths(cfg) + profiles)
    out += [(p, _log_of(p)) for p in outputs]
    out.append(("results/tables/generate.md", "results/logs/report/render_generate.log"))
    if profiles:
        out.append(("results/tables/decode_step.md", "results/logs/report/render_decode_profile.log"))
    if cfg["train_backends"]:
        out.append(("results/tables/train.md", "results/logs/report/render_train.log"))
    return out


def verdict(workdir: Path, jobs: list[tuple[str, str]]) -> list[Job]:
    out = []
    for output, log in jobs:
        path = workdir / output
        if not path.exists():
            out.append(Job(output, log, "missing", "no output: the job crashed or never ran (see its log)"))
            continue
        if path.suffix != ".json":
            out.append(Job(output, log, "ok"))
            continue
        try:
            rec = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            out.append(Job(output, log, "failed", f"unreadable JSON: {e}"))
            continue
        status = rec.get("status", "ok")
        out.append(Job(output, log, status if status in ("ok", "skipped", "failed") else "failed", rec.get("reason")))
    return out


def table(jobs: list[Job], wall_s: float, command: str) -> str:
    bad = [j for j in jobs if not j.passed]
    head = (f"# GPU smoke run: {'PASSED' if not bad else f'FAILED ({len(bad)} of {len(jobs)} jobs)'}\n\n"
            f"`{command}`: wall {wall_s:.0f} s (snakemake, packages installed).\n\n"
            "| job | status | reason | log |\n|---|---|---|---|\n")
    def reason(j):  # one row: a traceback's newlines would end it, its pipes split it
        return " ".join((j.reason or "").split()).replace("|", "/")[:200]

    rows = [f"| {j.output.removeprefix('results/')} | {j.status} | {reason(j)} | {j.log if not j.passed else ''} |"
            for j in jobs]
    return head + "\n".join(rows) + "\n"


def prepare(workdir: Path, keep: bool) -> None:
    """A scratch workdir whose config, code and schemas are this checkout's (links)."""
    workdir = workdir.resolve()
    if (workdir / "Snakefile").exists() or workdir in ROOT.resolve().parents or workdir == ROOT.resolve():
        raise SystemExit(f"smoke: {workdir} holds a workflow checkout; give a scratch --workdir (its results "
                         f"would be deleted)")
    workdir.mkdir(parents=True, exist_ok=True)
    if not keep:
        for d in ("results", ".snakemake"):
            shutil.rmtree(workdir / d, ignore_errors=True)
    for name in LINKED:
        link = workdir / name
        if link.is_symlink() and link.resolve() != (ROOT / name).resolve():
            link.unlink()  # left by another checkout's smoke run
        if not link.is_symlink():
            link.symlink_to(ROOT / name, target_is_directory=True)
    # the checkout's own GPU locks and lease log: a smoke run and a benchmark on one GPU exclude each other
    atomic.write_text(workdir / "smoke_locks.yaml", f"gpu: {{lock_dir: {json.dumps(str(ROOT / 'results/.gpu_locks'))}}}\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rollout_bench.pipeline.smoke", description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", type=int, default=0, help="physical GPU id to run on")
    ap.add_argument("--workdir", default=str(ROOT / "results/smoke"))
    ap.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--keep", action="store_true", help="reuse the previous smoke run's cached results")
    ap.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="after --: passed to snakemake")
    a = ap.parse_args(argv)
    extra = a.snakemake_args[1:] if a.snakemake_args[:1] == ["--"] else a.snakemake_args
    if {"--config", "--configfile", "--configfiles", "-C"} & set(extra):
        ap.error("the smoke run's config is profiles.smoke in config/config.yaml: edit it there, not with --config")
    workdir = Path(a.workdir).resolve()
    cfg = smoke_config()
    prepare(workdir, a.keep)
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--cores", str(a.cores), "--resources", f"gpu={cfg['gpu']['jobs_per_gpu']}", "--config", "profile=smoke",
           "--configfile", str(workdir / "smoke_locks.yaml"), "--keep-going", "--rerun-incomplete", *extra]
    env = {k: v for k, v in os.environ.items() if k != "ROLLOUT_BENCH_GPU_IDS"}
    env["CUDA_VISIBLE_DEVICES"] = str(a.gpu)  # the lease takes its slots on this GPU only
    t0 = time.monotonic()
    rc = subprocess.call(cmd, env=env)
    wall = time.monotonic() - t0
    done = verdict(workdir, expected(cfg))
    command = " ".join(["python -m rollout_bench.pipeline.smoke", *(argv if argv is not None else sys.argv[1:])])
    summary = {"passed": rc == 0 and all(j.passed for j in done), "snakemake_rc": rc, "wall_s": round(wall, 1),
               "gpu": a.gpu, "command": command, "jobs": [asdict(j) for j in done]}
    atomic.write_json(workdir / "results/summary/smoke.json", summary)
    atomic.write_text(workdir / "results/tables/smoke.md", table(done, wall, command))
    resolved = workdir / "results/summary/smoke_config.yaml"  # what ran: the smoke profile over the top level
    atomic.write_text(resolved, yaml.safe_dump(cfg, sort_keys=False))
    dest = publish("smoke", command, str(resolved), results=str(workdir / "results"))
    for j in done:
        if not j.passed:
            print(f"smoke: {j.status}: {j.output}: {j.reason or ''} (log: {workdir / j.log})", file=sys.stderr)
    print(f"smoke: {'passed' if summary['passed'] else 'FAILED'} in {wall:.0f} s; "
          f"{sum(j.passed for j in done)}/{len(done)} jobs ok or skipped; published to {dest}")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
