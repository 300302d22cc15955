"""The pipeline and the GPU lease on a real single-node SLURM cluster (the `slurm` fixture, with
accounting): jobs go through sbatch and sacct lists them, their stats validate, the tables match a
local run's; GPU rules ask SLURM for GPUs and the lease takes the ones it grants. The GPUs are GRES
on /dev/null: SLURM's grant and CUDA_VISIBLE_DEVICES are real, no CUDA runs behind them."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT
from .helpers import copy_tree, snakemake

pytestmark = pytest.mark.slow

# The assets, one hf_generate job (two cells) and the tables: the cpu profile's LoRA cases, and its realistic case (on a
# warm start), are left to a backend these runs leave out, so no adapter or warm start is built.
NO_LORA = {"lora": {"backends": ["vllm"]}, "grpo_group": {"backends": ["vllm"]},
           "realistic": {"backends": ["vllm"]}}
CPU_SUBSET = {"profile": "cpu", "backends": ["hf_generate"], "train_backends": [], "models": ["qwen3-tiny"],
              "workload": {"cases": NO_LORA}}
# The gpu profile's hf_static job (greedy, B=64) on a leased GPU: `skipped`, no CUDA device answers.
GPU_SUBSET = {"profile": "gpu", "backends": ["hf_static"], "reference_backend": "hf_static", "train_backends": [],
              "models": ["qwen3-tiny"], "workload": {"cases": {"lora": {"backends": ["vllm"]},
                                                               "realistic": {"backends": ["vllm"]},
                                                               "realistic_t1": {"backends": ["vllm"]}}}}
# The first status check after 5 s, not the profile's 40: jobs here take seconds.
POLL = ("--slurm-init-seconds-before-status-checks", "5", "--seconds-between-status-checks", "2")
SUBMITTED = re.compile(r"has been submitted with SLURM jobid (\d+)")


@dataclass
class Run:
    workdir: Path
    wall_s: float
    submitted: list[str]  # SLURM job ids, from the executor's log
    accounted: list[dict]  # sacct's rows for the run: id, state, rule, tres


def sacct(cluster, run_id: str) -> list[dict]:
    out = cluster.run("sacct", "-X", "-n", "--parsable2", "--name", run_id, "--starttime", "now-1days",
                      "--format=JobIDRaw,State,Comment,AllocTRES").stdout
    rows = []
    for line in out.splitlines():
        job, state, comment, tres = line.split("|")
        # the executor's comment: rule_<name>[_wildcards_<values>]
        rows.append({"id": job, "state": state, "rule": comment.removeprefix("rule_").split("_wildcards_")[0],
                     "tres": tres})
    return rows


def slurm_run(cluster, workdir: Path, subset: dict, *args) -> Run:
    (workdir / "subset.yaml").write_text(yaml.safe_dump(subset))
    t0 = time.monotonic()
    r = snakemake(workdir, "--workflow-profile", "profiles/slurm", "--configfile", "subset.yaml", *POLL, *args,
                  env=cluster.env({}))
    wall = time.monotonic() - t0
    out = r.stdout + r.stderr
    run_id = re.search(r"SLURM run ID: (\S+)", out).group(1)
    run = Run(workdir, wall, SUBMITTED.findall(out), sacct(cluster, run_id))
    print(f"SLURM run {workdir.name}: {wall:.0f} s wall, {len(run.submitted)} sbatch, "
          f"{len(run.accounted)} in sacct")
    return run


@pytest.fixture(scope="module")
def cpu_runs(slurm, tmp_path_factory):
    """The CPU subset through the SLURM profile, and meanwhile (it mostly waits on the queue) locally."""
    local = copy_tree(tmp_path_factory.mktemp("wf_local"))
    (local / "subset.yaml").write_text(yaml.safe_dump(CPU_SUBSET))
    with ThreadPoolExecutor(1) as pool:
        local_run = pool.submit(snakemake, local, "--cores", "2", "--configfile", "subset.yaml")
        run = slurm_run(slurm, copy_tree(tmp_path_factory.mktemp("wf_slurm")), CPU_SUBSET)
        local_run.result()
    return run, local


def test_cluster_jobs_went_through_sbatch_and_sacct_lists_them(cpu_runs):
    run, _ = cpu_runs
    assert sorted(run.submitted) == sorted(r["id"] for r in run.accounted), (run.submitted, run.accounted)
    assert {r["state"] for r in run.accounted} == {"COMPLETED"}, run.accounted
    rules = sorted(r["rule"] for r in run.accounted)
    # the model asset and the generation job (one process serves both batch sizes) on the cluster; the cheap
    # rules (tokenizer, dataset, aggregate, render) stayed on the submit host
    assert rules == ["generate__qwen3_tiny_hf_generate_default_base", "model"], rules


def _stats(workdir: Path) -> list[str]:
    """Every cell's stats file (a job's record, job-*.json, is not one)."""
    return sorted(str(p.relative_to(workdir)) for p in (workdir / "results/generate").rglob("*.json")
                  if not p.name.startswith("job-"))


def _shape(table: str) -> list[str]:
    """A markdown table with its numbers blanked: what stays when the same jobs run elsewhere."""
    return [re.sub(r"\| *-?[\d,]+(\.\d+)? *(?=\|)", "| # ", line) for line in table.splitlines()]


def test_stats_validate_and_tables_match_a_local_run(cpu_runs):
    from rollout_bench.core import stats

    run, local = cpu_runs
    paths = _stats(run.workdir)
    assert len(paths) == 2 and paths == _stats(local)
    for p in paths:
        rec = stats.load(run.workdir / p)  # schema-validated
        assert rec["status"] == "ok" and rec["backend"] == "hf_generate"
    for table in ("results/tables/generate.md",):
        assert _shape((run.workdir / table).read_text()) == _shape((local / table).read_text())
    head = [(run.workdir / "results/summary/generate.csv").read_text().splitlines()[0]]
    assert head == [(local / "results/summary/generate.csv").read_text().splitlines()[0]]
    for chart in ("tps_vs_batch", "tps_vs_memory"):
        assert (run.workdir / f"results/charts/{chart}.png").read_bytes().startswith(b"\x89PNG")


@pytest.fixture(scope="module")
def gpu_run(slurm, cpu_runs, tmp_path_factory):
    """The gpu profile's job through the SLURM profile, in a copy of the CPU run's workdir (its assets
    are built and current: the model is the same)."""
    d = tmp_path_factory.mktemp("wf_slurm_gpu") / "wf"
    shutil.copytree(cpu_runs[0].workdir, d, symlinks=True,
                    ignore=shutil.ignore_patterns("generate", "summary", "tables", "charts", "slurm_logs"))
    # the profile asks 8 CPUs per GPU, more than this node has
    return slurm_run(slurm, d, GPU_SUBSET, "--default-resources", "runtime=30", "mem_mb=2000", "cpus_per_gpu=1")


def test_gpu_rules_ask_slurm_for_gpus_and_lease_its_grant(gpu_run):
    from rollout_bench.core import stats

    assert {r["state"] for r in gpu_run.accounted} == {"COMPLETED"}, gpu_run.accounted
    assert [(r["rule"], "gres/gpu=1" in r["tres"]) for r in gpu_run.accounted] == [
        ("generate__qwen3_tiny_hf_static_default_base", True)]
    (path,) = _stats(gpu_run.workdir)
    rec = stats.load(gpu_run.workdir / path)
    assert rec["status"] == "skipped" and rec["gpu_ids"] in ([0], [1]), rec  # the GPU SLURM granted


RECORD = """
import json, os, sys, time
from rollout_bench.host import isolation
t0 = time.time(); time.sleep(float(sys.argv[2])); t1 = time.time()
e = os.environ
json.dump({"visible": e["CUDA_VISIBLE_DEVICES"], "ids": e["ROLLOUT_BENCH_GPU_IDS"],
           "granted": e.get("SLURM_STEP_GPUS") or e.get("SLURM_JOB_GPUS"), "job": e["SLURM_JOB_ID"],
           "port": e["MASTER_PORT"], "log": e[isolation.LOCK_DIR_VAR], "t0": t0, "t1": t1,
           "neighbours": isolation.overlapping(e[isolation.LOCK_DIR_VAR], e[isolation.LEASE_VAR], t0, t1)},
          open(sys.argv[1], "w"))
"""


def _two_leases(cluster, tmp_path, srun_args, prefix=()) -> list[dict]:
    """Two `srun` jobs at once, each running one lease (lock dir shared, as on a cluster filesystem)."""
    env = cluster.env({**os.environ, "PYTHONPATH": str(ROOT / "src")})
    env.pop("CUDA_VISIBLE_DEVICES", None)
    lease = [sys.executable, "-m", "rollout_bench.host.gpu_lease", "--gpus", "1", "--lock-dir", str(tmp_path / "locks"),
             "--timeout", "60", "--"]
    procs = [subprocess.Popen(["srun", "-n1", *srun_args, *prefix, *lease, sys.executable, "-c", RECORD,
                               str(tmp_path / f"lease{i}.json"), "4"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0, out
    return [json.loads((tmp_path / f"lease{i}.json").read_text()) for i in range(2)]


def _overlap(a: dict, b: dict) -> bool:
    return a["t0"] < b["t1"] and b["t0"] < a["t1"]


def test_lease_takes_the_gpu_srun_grants(slurm, tmp_path):
    a, b = _two_leases(slurm, tmp_path, ["--gpus=1"])
    for r in (a, b):
        assert r["visible"] == r["ids"] == r["granted"], r
    assert {a["visible"], b["visible"]} == {"0", "1"} and _overlap(a, b)
    assert a["port"] != b["port"]
    # one node: one lease log, in which each job sees the other
    assert a["log"] == b["log"] == str(tmp_path / "locks" / slurm.node)
    assert [n["gpus"] for n in a["neighbours"]] == [[int(b["ids"])]]


def test_renumbered_grants_do_not_queue_behind_one_lock(slurm, tmp_path):
    """Where SLURM constrains devices, every job sees its GPUs from 0: two jobs both holding "0" must
    not wait on one gpu0.lock. Simulated: two GPU-less jobs (SLURM clears their CUDA_VISIBLE_DEVICES)
    set it to 0 themselves."""
    a, b = _two_leases(slurm, tmp_path, [], prefix=["env", "CUDA_VISIBLE_DEVICES=0"])
    assert a["visible"] == b["visible"] == "0" and a["job"] != b["job"]
    assert _overlap(a, b), "the second lease waited for the first"
    for r in (a, b):
        assert (tmp_path / "locks" / f"slurm-{r['job']}" / "gpu0.lock").exists()


def test_profile_sizes_name_rules_of_the_workflow():
    """`set-resources` takes a rule's name: a key naming no rule (as `generate` did once generation jobs got a
    rule each) sizes nothing, silently. Every rule that goes to the cluster is sized by a key of its own or by
    `default-resources`, which fit a generation job."""
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    r = snakemake(ROOT, "--list-rules", "--config", "profile=gpu", "--resources", "gpu=1",
                  env={"ROLLOUT_BENCH_GPU_COUNT": "1"})
    rules = set(r.stdout.split())
    assert any(n.startswith("generate__") for n in rules), r.stdout
    sized = set(profile["set-resources"])
    assert sized <= rules, sized - rules
    snakefile = (ROOT / "Snakefile").read_text()
    local = set(re.search(r"^localrules:\n((?:    \w+,?\n)+)", snakefile, re.M).group(1).replace(",", "").split())
    assert local <= rules and not local & sized, (local - rules, local & sized)
    defaults = profile["default-resources"]
    assert defaults["runtime"] >= 60 and defaults["mem_mb"] >= 64000, defaults
