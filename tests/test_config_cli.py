"""Config given on the snakemake command line, as a user gives it: dry runs only (seconds, no jobs)."""
import json
import re

import pytest

from .helpers import copy_tree, snakemake

pytestmark = pytest.mark.slow  # snakemake dry runs, ~10 s each


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return copy_tree(tmp_path_factory.mktemp("wf"))


def _job_workloads(tree, *args) -> list[dict]:
    """The workload each generation job of a dry run would be handed."""
    out = snakemake(tree, "-n", "-p", "--cores", "1", *args).stdout
    return [c["workload"] for m in re.findall(r"--cells '(\[.*?\])' --model-dir", out) for c in json.loads(m)]


def test_configfile_keys_reach_every_job(tree, tmp_path):
    """The cpu profile sets max_new_tokens 32 and both tiny models; the user's file, then --config, win."""
    mine = tmp_path / "mine.yaml"
    # a profile overlay in the user's file merges into the shipped one
    mine.write_text("workload: {max_new_tokens: 5}\nprofiles: {cpu: {models: [llama-tiny]}}\n")
    # the realistic case sets its own max_new_tokens (a case's key wins) and runs on the warm starts
    wls = _job_workloads(tree, "--configfile", str(mine))
    own = [w for w in wls if w["case"] == "realistic"]
    wls = [w for w in wls if w["case"] != "realistic"]
    assert wls and {w["max_new_tokens"] for w in wls} == {5} and {w["model"] for w in wls} == {"llama-tiny"}
    assert {w["model"] for w in own} == {"llama-tiny-warm"} and {w["max_new_tokens"] for w in own} == {160}
    wls = _job_workloads(tree, "--configfile", str(mine), "--config", 'models=["qwen3-tiny"]')
    wls = [w for w in wls if w["case"] != "realistic"]
    assert {w["model"] for w in wls} == {"qwen3-tiny"} and {w["max_new_tokens"] for w in wls} == {5}


def test_bad_configfile_value_fails_the_dry_run(tree, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: {max_new_tokens: 0}\n")
    r = snakemake(tree, "-n", "--cores", "1", "--configfile", str(bad), check=False)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "config error at workload.max_new_tokens: 0 is less than" in out, out[-2000:]


@pytest.mark.parametrize("given, field", [
    ("workload: {prompt_tokens: [256, 128]}", "workload.prompt_tokens"),
    ("models: [/no/such/model-dir]", "models"),
    ("dataset: {source: EMPTY}", "dataset.source"),
])
def test_input_every_job_would_fail_on_is_refused_first(tree, tmp_path, given, field):
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad.yaml"
    bad.write_text(given.replace("EMPTY", str(tmp_path / "empty")) + "\n")
    r = snakemake(tree, "-n", "--cores", "1", "--configfile", str(bad), check=False)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and f"config error at {field}:" in out, out[-2000:]
    assert "Job stats" not in out
