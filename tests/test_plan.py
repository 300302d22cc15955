"""A dry run's estimate of a profile's GPU time, read off published stats (pipeline/plan.py)."""
import json

import pytest
import yaml

from rollout_bench.pipeline import config, jobs, plan

from .conftest import ROOT


@pytest.fixture(scope="module")
def headline():
    return config.resolve({**yaml.safe_load((ROOT / "config/config.yaml").read_text()), "profile": "headline"})


def _group(cfg, backend, lora=False):
    return next(g for g in jobs.gen_groups(cfg) if (g.backend, g.lora, g.model_slug) == (backend, lora, "qwen3-4b"))


def _cell(pub, cfg, cell, round_s, **workload):
    """A published cell of `cell`'s workload (with `workload`'s keys changed) whose rounds took `round_s` each."""
    wl = {**jobs.job_workload(cfg, cell.model, cell.backend, cell.case, cell.batch_size), **workload}
    rec = {"kind": "generate", "status": "ok", "model": "qwen3-4b", "backend": cell.backend, "workload": wl,
           "env": {"gpu_name": "NVIDIA H200"}, "rounds": [{"wall_s": round_s}] * wl["rounds"],
           "median_wall_s": round_s, "wall_s": round_s * wl["rounds"] + 10.0}
    path = pub / f"run/{cell.case}-{cell.batch_size}-{round_s}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))


def _row(cfg, pub, key):
    return next(r for r in plan.estimate(cfg, pub) if r["job"] == key)


def test_each_cell_is_timed_by_published_cells_of_its_own_workload(headline, tmp_path):
    """The rollout cell by published cells that replayed its trace; a greedy cell by greedy cells of its batch, not
    by long-prompt cells of that batch (2k-8k prompts, 64 tokens), nor by the rollout."""
    g = _group(headline, "flex")
    rollout = next(c for c in g.cells if c.case == "rollout")
    greedy = next(c for c in g.cells if c.case == "greedy" and c.batch_size == 8)
    pub = tmp_path / "pub"
    _cell(pub, headline, rollout, 5.0)
    _cell(pub, headline, greedy, 2.0)
    _cell(pub, headline, greedy, 0.5, prompt_tokens=[2048, 8192], max_new_tokens=64, case="prefill")
    _cell(pub, headline, greedy, 9.0, batch_size=128)  # a batch the profile does not time
    row = _row(headline, pub, g.key)
    assert row["unknown_cells"] == len(g.cells) - 2
    # no job record: a cell's wall less its rounds (10 s) once, then a warm-up and the timed rounds of each cell
    rounds = jobs.job_workload(headline, greedy.model, "flex", "greedy", 8)["rounds"]
    assert row["seconds"] == pytest.approx(10.0 + (5.0 + 2.0) * (rounds + 1))


def test_a_published_job_gives_one_engine_lifetime_of_overhead(headline, tmp_path):
    """Where a job of the same name was published (one engine serving its cells), its wall less its timed rounds is
    the overhead, warm-ups included; a job with a failed cell is not counted, nor one of another name."""
    g = _group(headline, "vllm", lora=True)
    pub = tmp_path / "pub"
    for c in g.cells:
        _cell(pub, headline, c, 3.0)
    for name, wall, status in (("job-lora", 100.0, "ok"), ("job-lora", 200.0, "ok"), ("job-lora", 900.0, "failed"),
                               ("job-base", 700.0, "ok")):
        rec = {"kind": "generate_job", "model": "qwen3-4b", "backend": "vllm", "variant": "default",
               "env": {"gpu_name": "NVIDIA H200"}, "wall_s": wall, "timed_s": 40.0, "cells": [{"status": status}]}
        path = pub / f"run-{wall:.0f}/generate/qwen3-4b/vllm/default/{name}.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(rec))
    rounds = jobs.job_workload(headline, g.cells[0].model, "vllm", g.cells[0].case, g.cells[0].batch_size)["rounds"]
    assert _row(headline, pub, g.key)["seconds"] == pytest.approx(110.0 + len(g.cells) * 3.0 * rounds)


def test_each_gpu_model_gets_its_own_total_and_gpu_takes_one_alone(headline, tmp_path):
    """Published figures of two GPU models: the pooled estimate, then each model's own total; `gpu` estimates from
    one model's figures alone, and a model with none is refused with the published ones named."""
    g = _group(headline, "flex")
    greedy = next(c for c in g.cells if c.case == "greedy" and c.batch_size == 8)
    pub = tmp_path / "pub"
    _cell(pub, headline, greedy, 2.0)  # NVIDIA H200
    _cell(pub, headline, greedy, 4.0)
    slow = pub / f"run/{greedy.case}-{greedy.batch_size}-4.0.json"
    rec = json.loads(slow.read_text())
    slow.write_text(json.dumps({**rec, "env": {"gpu_name": "NVIDIA H100 80GB HBM3"}}))
    rounds = jobs.job_workload(headline, greedy.model, "flex", "greedy", 8)["rounds"]
    h200, h100 = (next(r for r in plan.estimate(headline, pub, gpu) if r["job"] == g.key) for gpu in ("h200", "H100"))
    assert h200["seconds"] == pytest.approx(10.0 + 2.0 * (rounds + 1))
    assert h100["seconds"] == pytest.approx(10.0 + 4.0 * (rounds + 1))
    out = plan.text(headline, pub)
    assert "every GPU model pooled" in out and "on NVIDIA H200 alone: ~" in out
    assert "on NVIDIA H100 80GB HBM3 alone: ~" in out
    assert "(on NVIDIA H200; an estimate" in plan.text(headline, pub, "H200")
    with pytest.raises(ValueError, match="--gpu 'B200'.*NVIDIA H100 80GB HBM3, NVIDIA H200"):
        plan.text(headline, pub, "B200")


def test_published_whole_runs_give_the_measured_wall_of_the_command(headline, tmp_path):
    """Beside the estimate, the wall of each published run of the profile whose record is of the whole profile run to
    its end, with its GPUs, commits and outcome; a run cut short, one of named targets only, a rerun's record (a job
    of the folder started before it) and a run of another profile are left out; an unreadable record is named."""
    pub = tmp_path / "pub"

    def run(name, gpu, wall_s, at, profile="headline", targets="", ok=True, **manifest):
        folder = pub / name
        (folder / "logs").mkdir(parents=True)
        (folder / "MANIFEST.json").write_text(json.dumps(
            {"profile": profile, "published_at": at, "git_commits": ["148f158f8f29e0"], "gpu_names": [gpu],
             "gpu_uuids": ["GPU-0"], **manifest}))
        command = f"snakemake {targets}--cores 16 --resources gpu=1 --config profile={profile}"
        rec = {"command": command, "started_at": "2026-12-07T12:00:00+00:00", "wall_s": wall_s}
        (folder / "logs/invocation.json").write_text(json.dumps({**rec, "ok": ok} if ok is not None else rec))
        return folder

    def job_started(folder, at):
        path = folder / "generate/qwen3-4b/flex/graphs/job-base.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"kind": "generate_job", "started_at": at}))

    late = run("h100-late", "NVIDIA H100 80GB HBM3", 1114.6, "2026-12-07T13", ok=False)
    job_started(late, "2026-12-07T12:01:00+00:00")  # after the record's start: the run's own job
    run("h100-early", "NVIDIA H100 80GB HBM3", 693.5, "2026-12-06T13", ok=None, gpu_uuids=["GPU-0", "GPU-1"],
        git_commits=["148f158f8f", "95817f3aa"], git_dirty=[False, True])
    run("h200-cut", "NVIDIA H200", None, "2026-12-07T14")
    run("h200-part", "NVIDIA H200", 291.6, "2026-12-07T15", targets="results/generate/x/job-base.json ")
    job_started(run("h200-rerun", "NVIDIA H200", 80.0, "2026-12-07T16"), "2026-12-07T11:00:00+00:00")
    run("h200-prefill", "NVIDIA H200", 500.8, "2026-12-07T17", profile="prefill")
    assert [r["folder"] for r in plan.measured(pub, "headline")] == ["h100-early", "h100-late"]  # oldest first
    assert [r["folder"] for r in plan.measured(pub, "headline", "h100")] == ["h100-early", "h100-late"]
    assert plan.measured(pub, "headline", "H200") == []
    _cell(pub, headline, _group(headline, "flex").cells[0], 2.0)  # an estimate to print beside them
    out = plan.text(headline, pub)
    assert ("    h100-early: 694 s on 2 x NVIDIA H100 80GB HBM3, commit 148f158, 95817f3 (dirty); its outcome not "
            "recorded\n") in out
    assert out.endswith("    h100-late: 1,115 s on NVIDIA H100 80GB HBM3, commit 148f158; ended with failed jobs "
                        "(what needed them did not run)")
    assert plan.text(headline, pub, "H200").endswith(
        "measured: no published run of profile headline on a GPU named 'H200' records a whole run's wall")
    # a record whose command cannot be read is named, not fatal to the dry run
    inv = pub / "h200-part/logs/invocation.json"
    inv.write_text(json.dumps({**json.loads(inv.read_text()), "command": "snakemake 'x.json --cores 2"}))
    assert "    h200-part: its invocation record cannot be read (" in plan.text(headline, pub)
