"""Compile caches every GPU job shares; the commit of the code in every stats file; a dry run's plan."""
import pytest

from rollout_bench.core import envinfo
from rollout_bench.generation import trace
from rollout_bench.host import compile_cache
from rollout_bench.pipeline import plan


def test_caches_point_under_cache_dir_and_say_cold_then_warm(tmp_path):
    env = {}
    info = compile_cache.use(str(tmp_path / "c"), environ=env)
    assert set(info["state"].values()) == {"cold"} and env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "c/inductor")
    assert set(env) == set(compile_cache.VARS) and env["VLLM_CACHE_ROOT"].endswith("/vllm")
    (tmp_path / "c/triton/k.cubin").write_text("x")
    warm = compile_cache.use(str(tmp_path / "c"), environ={})["state"]
    assert warm == {"TORCHINDUCTOR_CACHE_DIR": "cold", "TRITON_CACHE_DIR": "warm", "VLLM_CACHE_ROOT": "cold"}
    mine = {"TRITON_CACHE_DIR": str(tmp_path / "mine")}
    assert compile_cache.use(str(tmp_path / "c"), environ=mine)["dirs"]["TRITON_CACHE_DIR"] == str(tmp_path / "mine")
    assert compile_cache.use(None, environ={}) == {"dir": None, "state": "default"}


def test_what_an_import_set_is_undone_and_the_users_own_kept():
    env = {"TRITON_CACHE_DIR": "/mine"}
    before = compile_cache.snapshot(env)
    env.update(TORCHINDUCTOR_CACHE_DIR="/tmp/torchinductor_root", TRITON_CACHE_DIR="/other")
    compile_cache.restore(before, env)
    assert env == {"TRITON_CACHE_DIR": "/mine"}


def test_the_commit_comes_from_whoever_carried_the_checkout_else_from_git(monkeypatch, tmp_path):
    from rollout_bench.core import envinfo as e

    monkeypatch.delenv(e.COMMIT_VAR, raising=False)
    e.code_version.cache_clear()
    try:
        v = e.code_version()
        assert len(v["git_commit"]) == 40 and v["git_source"] == "git" and isinstance(v["git_dirty"], bool)
        monkeypatch.setenv(e.COMMIT_VAR, "a" * 40)
        monkeypatch.setenv(e.DIRTY_VAR, "0")
        carried = {"git_commit": "a" * 40, "git_dirty": False, "git_source": "env"}
        e.code_version.cache_clear()
        assert e.code_version() == carried  # over this checkout's own .git
        monkeypatch.setattr("rollout_bench.ROOT", tmp_path)  # a copy without .git
        e.code_version.cache_clear()
        assert e.code_version() == carried
        monkeypatch.delenv(e.COMMIT_VAR)
        e.code_version.cache_clear()
        assert e.code_version() == {"git_commit": None, "git_dirty": None, "git_source": None}
    finally:
        e.code_version.cache_clear()
    assert envinfo.process_age_s() > 0


@pytest.mark.parametrize("argv, dry", [(["-n"], True), (["-np", "--cores", "2"], True), (["--dry-run"], True),
                                       (["--cores", "8"], False), (["-j", "2", "--notemp"], False)])
def test_a_dry_run_is_seen_on_the_command_line(argv, dry):
    assert plan.is_dry_run(["snakemake", *argv]) is dry


def test_trace_draws_are_a_pure_function_and_follow_the_quantiles():
    t = trace.load("qwen3-4b-warm-t1")
    a, b = trace.lengths(t, 4000, 7, 1), trace.lengths(t, 4000, 7, 1)
    assert a == b and a != trace.lengths(t, 4000, 7, 2) and trace.digest(a) == trace.digest(b)
    s = sorted(a)
    assert min(a) >= 42 and max(a) <= trace.longest(t) == 382
    assert abs(s[len(s) // 2] - 56.5) < 6 and abs(s[int(0.9 * len(s))] - 174.7) < 15


def test_the_shipped_trace_is_what_its_published_stats_give():
    from .conftest import ROOT

    t = trace.load("qwen3-4b-warm-t1")
    assert trace.from_stats(ROOT / t["source"]["stats"], t["name"]) == {**t, "source": {**t["source"]}}


def test_a_job_records_what_it_added_to_a_warm_cache(tmp_path):
    start = compile_cache.use(str(tmp_path / "c"), environ={})
    assert compile_cache.settle(start)["compiled"] == dict.fromkeys(compile_cache.VARS, False)
    (tmp_path / "c/vllm/old").write_text("x")
    start = compile_cache.use(str(tmp_path / "c"), environ={})  # warm: another job's files
    (tmp_path / "c/vllm/mine").write_text("x")
    end = compile_cache.settle(start)
    assert end["state"]["VLLM_CACHE_ROOT"] == "warm" and end["compiled"]["VLLM_CACHE_ROOT"] is True
    assert end["files_added"] == {"TORCHINDUCTOR_CACHE_DIR": 0, "TRITON_CACHE_DIR": 0, "VLLM_CACHE_ROOT": 1}
    assert compile_cache.settle({"dir": None, "state": "default"}) == {"dir": None, "state": "default"}
    assert compile_cache.settle(None) is None


def test_a_generation_jobs_record_says_what_it_compiled(tmp_path):
    from rollout_bench.generation import job

    start = compile_cache.use(str(tmp_path / "c"), environ={})
    (tmp_path / "c/triton/k.cubin").write_text("x")
    rec = job.close_job({"cells": [], "compile_cache": start}, job.Clock(), None)
    assert rec["compile_cache"]["files_added"]["TRITON_CACHE_DIR"] == 1 and rec["setup_s"] == 0
