"""The GPU smoke run: its profile covers every GPU code path of the gpu profile, and its verdict fails on
a failed or crashed job, naming the log."""
import json
import subprocess
import sys

import yaml

from rollout_bench import ROOT, backends
from rollout_bench.pipeline import config, jobs, smoke


def resolved(profile: str) -> dict:
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    return config.resolve({**raw, "profile": profile})


def test_smoke_profile_covers_every_gpu_code_path():
    """Every backend x variant x (LoRA or not) the gpu profile runs: in the smoke run where its job runs in the
    core environment, in the prefill profile's run (given the group's site) where it needs the fa4 group (in the
    smoke run's core environment such a job could only be skipped)."""
    gpu, sm, pre = resolved("gpu"), resolved("smoke"), resolved("prefill")
    paths = lambda cfg: {(j.backend, j.variant, cfg["workload"]["cases"][j.case]["lora"]) for j in jobs.gen_jobs(cfg)}
    fa4 = {p for p in paths(gpu) if backends.env_group(p[0], p[1]) == "fa4"}
    assert fa4 == {("flex", "fa4", False), ("transformers_cb", "paged_flash_attention_4", False)}
    assert paths(gpu) - fa4 <= paths(sm) and fa4 <= paths(pre)
    assert set(gpu["train_backends"]) == set(sm["train_backends"])
    assert sm["autotune"]["enabled"] and config.uses_gpu(sm)
    assert sm["train"]["steps"] == 2 and sm["gpu"]["jobs_per_gpu"] >= 1


def write(path, rec):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))


def test_verdict_passes_ok_and_skipped_and_names_failed_and_crashed_jobs(tmp_path):
    jobs = [("results/generate/a.json", "results/logs/generate/a.log"),
            ("results/generate/b.json", "results/logs/generate/b.log"),
            ("results/generate/c.json", "results/logs/generate/c.log"),
            ("results/generate/d.json", "results/logs/generate/d.log"),
            ("results/tables/generate.md", "results/logs/report/render_generate.log")]
    write(tmp_path / jobs[0][0], {"status": "ok", "reason": None})
    write(tmp_path / jobs[1][0], {"status": "skipped", "reason": "vllm does not import"})
    write(tmp_path / jobs[2][0], {"status": "failed", "reason": "Traceback:\n  gate | failed"})
    (tmp_path / "results/tables").mkdir(parents=True)
    (tmp_path / "results/tables/generate.md").write_text("| table |\n")
    v = smoke.verdict(tmp_path, jobs)
    assert [j.status for j in v] == ["ok", "skipped", "failed", "missing", "ok"]
    assert [j.passed for j in v] == [True, True, False, False, True]
    md = smoke.table(v, 12.3, "python -m rollout_bench.pipeline.smoke")
    assert md.startswith("# GPU smoke run: FAILED (2 of 5 jobs)")
    assert "results/logs/generate/c.log" in md and "results/logs/generate/d.log" in md
    assert "vllm does not import" in md
    assert "| Traceback: gate / failed |" in md  # a reason stays on its row
    assert "PASSED" in smoke.table(v[:2], 1.0, "x")


def test_expected_outputs_are_the_dag_of_the_smoke_profile(tmp_path):
    """Every output the verdict reads is a target of the smoke DAG (dry run in a scratch workdir)."""
    sm = resolved("smoke")
    smoke.prepare(tmp_path, keep=False)
    out = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory",
                          str(tmp_path), "--cores", "2", "--resources", "gpu=4", "--config", "profile=smoke", "-n",
                          "--quiet", "rules", "--summary"],
                         check=False, capture_output=True, text=True,
                         env={"CUDA_VISIBLE_DEVICES": "0", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    for output, _ in smoke.expected(sm):
        assert output in out.stdout, output
    assert not (tmp_path / "results/generate").exists()  # a dry run: nothing ran


def test_prepare_refuses_a_checkout_and_repoints_stale_links(tmp_path):
    import pytest

    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout/Snakefile").write_text("")
    with pytest.raises(SystemExit, match="holds a workflow checkout"):
        smoke.prepare(tmp_path / "checkout", keep=False)
    with pytest.raises(SystemExit):
        smoke.prepare(ROOT.parent, keep=False)  # an ancestor of this checkout
    work = tmp_path / "work"
    work.mkdir()
    (work / "src").symlink_to(tmp_path / "checkout")  # another checkout's smoke run
    smoke.prepare(work, keep=False)
    assert (work / "src").resolve() == (ROOT / "src").resolve()
    assert str(ROOT / "results/.gpu_locks") in (work / "smoke_locks.yaml").read_text()


def test_autotune_is_expected_only_for_models_a_flex_job_runs():
    cfg = resolved("smoke")
    tuned = {o for o, _ in smoke.expected(cfg) if o.startswith("results/autotune/")}
    # the generation model's, and the GRPO learner's (its flex rollout replays it)
    assert tuned == {"results/autotune/qwen3-tiny/decode_opts.json",
                     "results/autotune/qwen3-tiny-hd64/decode_opts.json"}
    no_rollout = {**cfg, "train_backends": [b for b in cfg["train_backends"] if b != "flex"]}
    assert {o for o, _ in smoke.expected(no_rollout) if o.startswith("results/autotune/")} == {
        "results/autotune/qwen3-tiny/decode_opts.json"}
    no_flex = {**no_rollout, "backends": [b for b in cfg["backends"] if b != "flex"]}
    assert not any(o.startswith("results/autotune/") for o, _ in smoke.expected(no_flex))


def test_the_smoke_run_expects_the_decode_profile_while_it_is_enabled():
    cfg = resolved("smoke")
    assert cfg["decode_profile"]["enabled"]  # its CUDA path is a GPU code path: the smoke run covers it
    outs = [o for o, _ in smoke.expected(cfg)]
    assert "results/decode_profile/qwen3-tiny/decode_step.json" in outs and "results/tables/decode_step.md" in outs
    off = {**cfg, "decode_profile": {**cfg["decode_profile"], "enabled": False}}
    assert not any("decode_profile" in o or o.endswith("decode_step.md") for o, _ in smoke.expected(off))
