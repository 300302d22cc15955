"""What reruns, on a workflow tree whose outputs are placeholders marked current with `--touch` (seconds, not a real run)."""
import os

import pytest

from .helpers import copy_tree, pending, snakemake

pytestmark = pytest.mark.slow
STATS_DIRS = ("results/generate/", "results/train/")
PLACEHOLDER = "placeholder written by test_stale"


def _outputs(cwd) -> list[str]:
    r = snakemake(cwd, "--summary", "--cores", "1")
    return sorted(line.split("\t")[0] for line in r.stdout.splitlines()[1:] if "\t" in line)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The default workflow, every output present and up to date; stats files are valid `skipped` records."""
    from rollout_bench.core import stats
    from rollout_bench.core.workload import Sampling

    d = copy_tree(tmp_path_factory.mktemp("stale"))
    wl = {"lora_rank": 0, "num_generations": 1, "sampling": Sampling().to_dict(), "ignore_eos": True,
          "max_new_tokens": 4}
    record = stats.skipped(stats.base("generate", backend="b", variant="v", model="m", workload=wl), PLACEHOLDER)
    outputs = _outputs(d)
    for out in outputs:
        p = d / out
        if out.startswith("results/assets/"):
            p.mkdir(parents=True)
        elif out.startswith(STATS_DIRS):
            stats.finish(record, p)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch()
    snakemake(d, "--touch", "--cores", "1")
    return d, outputs


def _edit_then_pending(d, module: str) -> list[str]:
    p = d / "src/rollout_bench" / module
    text, st = p.read_text(), p.stat()
    p.write_text(text + "\n# edited by test_stale\n")
    try:
        return pending(d)
    finally:  # undone, times included, for the next test
        p.write_text(text)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


CHART = ("html", "svg", "png")
GEN_REPORT = {"results/summary/generate.csv", "results/tables/generate.md",
              *(f"results/charts/tps_vs_{c}.{x}" for c in ("batch", "memory") for x in CHART)}
TRAIN_REPORT = {"results/tables/train.md", "results/tables/equivalence.md",
                *(f"results/charts/train_steps.{x}" for x in CHART)}


def test_editing_a_module_cb_sync_imports_reruns_cb_sync(tree):
    d, outputs = tree
    todo = _edit_then_pending(d, "backends/transformers_cb.py")
    gen = {o for o in outputs if o.startswith("results/generate/")
           and o.split("/")[3] in ("transformers_cb", "cb_sync")}
    assert {o for o in gen if "/cb_sync/" in o}, outputs
    assert set(todo) == gen | GEN_REPORT, todo


def test_editing_render_reruns_only_tables_and_charts(tree):
    d, _ = tree
    assert set(_edit_then_pending(d, "report/render.py")) == GEN_REPORT - {"results/summary/generate.csv"} | TRAIN_REPORT


def test_editing_the_engine_reruns_flex_jobs_only(tree):
    d, outputs = tree
    todo = _edit_then_pending(d, "engine/sampler.py")
    flex = {o for o in outputs if o.startswith(STATS_DIRS) and o.split("/")[3] == "flex"}
    compares = {o for o in outputs if o.startswith("results/compare/") and o.endswith("__flex.json")}
    assert flex and compares
    # the mismatch jobs score flex's cells (and import the engine's reference logits)
    mismatch = {o for o in outputs if o.startswith("results/mismatch/")}
    assert mismatch
    assert set(todo) == flex | compares | mismatch | GEN_REPORT | TRAIN_REPORT, todo


def test_truncated_stats_file_reruns_its_job_alone(tree):
    """Its job: the one engine that serves its cell and that cell's neighbours (jobs.gen_groups)."""
    from rollout_bench.pipeline import config, jobs

    d, outputs = tree
    victim = next(o for o in outputs if o.startswith("results/generate/") and "/vllm/" in o and o.endswith("bs8.json"))
    group = next(g for g in jobs.gen_groups(config.load(d / "config/config.yaml"))
                 if victim in [c.path for c in g.cells])
    job = {c.path for c in group.cells} | {group.record}
    others = {o: (d / o).stat().st_mtime_ns for o in outputs if o.startswith("results/generate/") and o not in job}
    (d / victim).write_text('{"schema_version": 1, "kind": "gen')
    mismatch = {f"results/mismatch/{victim.split('/')[2]}.json"}  # its model's: it scores vllm's cells
    assert set(pending(d)) == job | mismatch | GEN_REPORT  # a dry run sees it missing (and sets it aside)
    assert (d / f"{victim}.corrupt").read_text().startswith('{"schema_version"')
    (d / f"{victim}.corrupt").rename(d / victim)
    r = snakemake(d, "--cores", "2", victim, "results/summary/generate.csv")
    assert f"invalid cached stats file: {victim}: not JSON" in r.stdout + r.stderr
    from rollout_bench.core import stats

    rec = stats.load(d / victim)  # rewritten by its job: vllm is skipped on this CPU host
    assert rec["status"] == "skipped" and rec["reason"] != PLACEHOLDER and rec["backend"] == "vllm"
    assert {o: (d / o).stat().st_mtime_ns for o in others} == others
    assert victim in (d / "results/summary/generate.csv").read_text()
