"""A real Snakemake run of the embedded CPU default, then caching, lint and bad-input checks on it."""
import json
import re
import shutil
from pathlib import Path

import pytest

from .helpers import REMOTE_SCRIPT, copy_tree, pending, snakemake

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = copy_tree(tmp_path_factory.mktemp("wf"))
    snakemake(d, "--cores", "2")
    return d


def test_default_run_leaves_tables_charts_and_valid_stats(workdir):
    from rollout_bench.core import stats
    from rollout_bench.pipeline import config, jobs

    cfg = config.load(workdir / "config/config.yaml")
    gen = jobs.gen_jobs(cfg)
    # the realistic case runs on the warm starts, the others on the random models (gemma4-tiny: no warm start)
    assert {j.model for j in gen} == {"qwen3-tiny", "llama-tiny", "gemma4-tiny", "qwen3-tiny-warm", "llama-tiny-warm"}
    statuses = {}
    for j in gen:
        rec = stats.load(workdir / j.path)  # schema-validated
        statuses.setdefault((j.backend, j.model == "gemma4-tiny"), set()).add(rec["status"])
        assert rec["workload"]["batch_size"] == j.batch_size and rec["backend"] == j.backend
        if j.backend == "flex":  # the gate against HF ran and passed, Gemma-4's layer mix included
            assert rec["status"] == "ok" and rec["gate"]["passed"], j.path
        if j.model == "gemma4-tiny" and j.backend in ("transformers_cb", "cb_sync"):
            assert "PagedAttentionCache" in rec["reason"] and "head_dim" in rec["reason"], rec["reason"]
    for gemma4 in (False, True):
        assert statuses[("hf_generate", gemma4)] == {"ok"} and statuses[("flex", gemma4)] == {"ok"}
        for gpu_only in ("hf_static", "vllm", "unsloth"):
            assert statuses[(gpu_only, gemma4)] == {"skipped"}
    # the paged cache holds one head_dim for all layers: fine for Qwen3/Llama, not for Gemma-4's two
    assert statuses[("transformers_cb", False)] == statuses[("cb_sync", False)] == {"ok"}
    assert statuses[("transformers_cb", True)] == statuses[("cb_sync", True)] == {"skipped"}
    # with EOS on, the warm starts end most completions before the case's 160 tokens, at varied lengths
    for j in gen:
        if j.case == "realistic" and j.backend in ("hf_generate", "flex"):
            done = stats.load(workdir / j.path)["completions"]
            assert done["eos_rate"] >= 0.5 and done["completion_tokens"]["p10"] < done["completion_tokens"]["p90"]
            assert ("decode_occupancy" in done) == (j.backend == "flex"), done  # only flex counts its rows
    table = (workdir / "results/tables/generate.md").read_text()
    assert "| hf_generate | default |" in table and "skipped" in table and "— realistic (EOS on;" in table
    assert "### flex / vllm" in table and "| qwen3-tiny | greedy | 0 | greedy | 1 | 4 |" in table
    for chart in ("tps_vs_batch", "tps_vs_memory", "train_steps"):
        assert (workdir / f"results/charts/{chart}.svg").read_text().lstrip().startswith("<svg")
        assert (workdir / f"results/charts/{chart}.png").read_bytes().startswith(b"\x89PNG")
    for html in (workdir / "results/charts").glob("*.html"):  # offline hosts: vega inlined, nothing fetched
        text = html.read_text()
        assert "vegaEmbed" in text and not REMOTE_SCRIPT.search(text), html.name


def test_default_grpo_runs_on_gated_warm_starts_with_reward_spread(workdir):
    from rollout_bench.assets import warm_card
    from rollout_bench.core import stats
    from rollout_bench.pipeline import config, jobs

    cfg = config.load(workdir / "config/config.yaml")
    for m in ("qwen3-tiny", "llama-tiny"):
        card = warm_card.read(workdir / f"results/assets/models/{m}-warm")
        assert card["passed"] and card["figures"]["n_prompts"] >= 256
    stds = {}
    for j in jobs.train_jobs(cfg):
        rec = stats.load(workdir / j.path)
        assert rec["status"] == "ok" and rec["workload"]["dataset"] == "learnable"
        stds.setdefault(j.model, []).extend(s["reward_std"] for s in rec["steps"])
    # a random model scores every completion alike (std 0 at every step); the warm starts do not
    assert set(stds) == {"qwen3-tiny-warm", "llama-tiny-warm"} and all(max(v) > 0 for v in stds.values()), stds


def test_default_grpo_judges_candidates_against_the_reference_seeds_band(workdir):
    from rollout_bench.core import stats
    from rollout_bench.pipeline import config, jobs

    cfg = config.load(workdir / "config/config.yaml")
    for j in jobs.train_jobs(cfg):
        steps = stats.load(workdir / j.path)["steps"]
        assert len(steps) == 4 and all(s["n_completions"] == 8 and s["accuracy"] is not None for s in steps)
        assert all(s["completions/cut_short_frac"] == 0 for s in steps)
        if j.backend == "flex":  # TRL's IS correction runs on the engine's logprobs: weight ~1, nothing zeroed
            assert all(0.99 < s["is/weight/mean"] < 1.01 and s["is/zeroed/token_frac"] == 0 for s in steps)
    for p in jobs.band_paths(cfg):
        b = stats.read_json(workdir / p)
        assert b["status"] == "ok" and b["seeds"] == [3407, 3408] and set(b["learning"]) == {"reward", "accuracy"}
    for p in jobs.compare_paths(cfg):
        c = stats.read_json(workdir / p)
        assert c["band"]["status"] in ("inside", "outside") and c["band"]["windows_compared"] == 2
        assert {"completion_ends", "is_weight"} <= set(c["gate"]["checks"])
    table = (workdir / "results/tables/equivalence.md").read_text()
    assert "| noise band |" in table and "- qwen3-tiny-warm, hf_generate seeds [3407, 3408]" in table


def test_second_run_has_nothing_to_do(workdir):
    r = snakemake(workdir, "-n", "--cores", "2")
    assert "Nothing to be done" in r.stdout + r.stderr


def test_a_corrupt_stats_file_reruns_its_job_when_only_a_table_is_asked_for(workdir):
    """The summary made from a truncated stats file goes with it, so a run that targets the tables reruns that job in
    the same invocation: never a table out of step with the files."""
    from rollout_bench.core import stats

    path = workdir / "results/generate/qwen3-tiny/hf_generate/default/greedy/bs4.json"
    path.write_text(path.read_text()[:100])
    r = snakemake(workdir, "--cores", "2", "results/summary/generate.csv", "results/tables/generate.md")
    out = r.stdout + r.stderr
    assert "moved to" in out and "removed results/summary/generate.csv, made from it" in out
    assert "Nothing to be done" not in out and stats.load(path)["status"] == "ok"
    assert str(path.relative_to(workdir)) in (workdir / "results/summary/generate.csv").read_text()
    for f in path.parent.glob("*.corrupt"):
        f.unlink()


def _edit(path: Path):
    path.write_text(path.read_text() + "\n# touched by test_pipeline\n")


def test_editing_one_backend_reruns_only_its_jobs(workdir):
    _edit(workdir / "src/rollout_bench/backends/hf_generate.py")
    todo = pending(workdir)
    gen = [p for p in todo if p.startswith("results/generate/")]
    assert gen and all("/hf_generate/" in p for p in gen), gen
    assert set(todo) - set(gen) <= {"results/summary/generate.csv", "results/tables/generate.md",
                                    *(f"results/charts/tps_vs_{c}.{x}" for c in ("batch", "memory")
                                      for x in ("html", "svg", "png"))}
    snakemake(workdir, "--cores", "2")


def test_editing_render_code_reruns_only_rendering(workdir):
    _edit(workdir / "src/rollout_bench/report/render.py")
    todo = pending(workdir)
    # report/train.py imports render.py's save_chart: the training tables and charts are rendering too
    charts = [f"results/charts/{c}.{x}" for c in ("tps_vs_batch", "tps_vs_memory", "train_steps")
              for x in ("html", "svg", "png")]
    assert todo == sorted(["results/tables/generate.md", "results/tables/train.md",
                           "results/tables/equivalence.md", *charts]), todo
    snakemake(workdir, "--cores", "2")


def test_lint_is_clean(workdir):
    r = snakemake(workdir, "--lint", check=False)
    assert r.returncode == 0 and "Lints for" not in r.stdout + r.stderr, r.stdout[-3000:]


@pytest.mark.parametrize("override, field", [
    ('backends=["hf_generate","nope"]', "backends[1]"),
    ('lora={"rank":0}', "lora.rank"),
    ('profiles={"cpu":{"models":["missing-model"]}}', "models"),
    ('profiles={"cpu":{"workload":{"cases":{"x":{"batch_sizes":[0]}}}}}', "workload.cases.x.batch_sizes[0]"),
    ('profiles={"cpu":{"workload":{"cases":{"x":{"batch_sizes":[4],"sampling":{"tmp":1}}}}}}',
     "workload.cases.x.sampling"),
])
def test_bad_input_fails_before_any_job(workdir, override, field):
    r = snakemake(workdir, "-n", "--cores", "1", "--config", override, check=False)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and f"config error at {field}:" in out, out[-2000:]
    assert "Job stats" not in out


def test_gpu_budget_checked_before_any_job(workdir):
    """A real run stops before any job without the GPUs it asks for (the target: a CPU asset, were the check to
    let it through); a dry run shows the plan on any machine, with its GPU-time estimate."""
    env = {"ROLLOUT_BENCH_GPU_COUNT": "8"}
    target = "results/assets/tokenizer"
    r = snakemake(workdir, target, "--cores", "8", "--config", "profile=gpu", env=env, check=False)
    assert r.returncode != 0 and "--resources gpu=8" in r.stdout + r.stderr
    r = snakemake(workdir, target, "--cores", "8", "--resources", "gpu=16", "--config", "profile=gpu", env=env,
                  check=False)
    assert r.returncode != 0 and "only 8 GPU" in r.stdout + r.stderr
    for dry in (["-n"], ["-n", "--resources", "gpu=8"]):  # no GPU, or none said: the plan all the same
        r = snakemake(workdir, *dry, "--cores", "8", "--config", "profile=gpu", env={"ROLLOUT_BENCH_GPU_COUNT": "0"})
        assert "GPU jobs of profile gpu, estimated from the published stats" in r.stdout + r.stderr
        assert "qwen3-4b/flex/graphs/base" in r.stdout + r.stderr and "total: ~" in r.stdout + r.stderr
    r = snakemake(workdir, "-n", "--cores", "8", "--resources", "gpu=8", "--config", "profile=gpu", env=env)
    assert "generate" in r.stdout
    assert "results/autotune/qwen3-4b/decode_opts.json" in r.stdout  # flex jobs wait for the autotune pass
    assert "results/decode_profile/qwen3-4b/decode_step.json" in r.stdout  # the gpu profile's decode profile
    assert "results/generate/gemma-4-e2b/flex/graphs/greedy/bs64.json" in r.stdout  # the other two families
    assert "results/generate/llama-3.2-3b/vllm/default/sweep/bs8.json" in r.stdout


def test_the_headline_profile_is_one_job_an_engine(workdir):
    """flex and vLLM, one job each per LoRA setting serving every cell, the autotune pass, the GRPO step pair."""
    r = snakemake(workdir, "-n", "--cores", "16", "--resources", "gpu=1", "--config", "profile=headline",
                  env={"ROLLOUT_BENCH_GPU_COUNT": "1"})
    out = r.stdout + r.stderr
    for rule in ("generate__qwen3_4b_flex_graphs_base", "generate__qwen3_4b_vllm_default_base",
                 "generate__qwen3_4b_flex_graphs_lora", "generate__qwen3_4b_vllm_default_lora"):
        assert re.search(rf"^{rule}\s+1$", out, re.M), rule
    assert re.search(r"^train\s+2$", out, re.M) and re.search(r"^autotune\s+1$", out, re.M)
    assert "results/generate/qwen3-4b/vllm/default/rollout/bs256.json" in out and "compare" not in out


def test_only_the_fa4_groups_jobs_get_its_site(workdir, tmp_path):
    """profile=prefill with `sites`: the fa4 jobs (flex fa4, transformers_cb paged_flash_attention_4) run with the
    fa4 site first on PYTHONPATH, every other job's command is as without `sites` (no rerun of cached results)."""
    site = tmp_path / "site-fa4"
    site.mkdir()
    base = ("-n", "-p", "--cores", "16", "--resources", "gpu=1", "--config", "profile=prefill")
    env = {"ROLLOUT_BENCH_GPU_COUNT": "1"}
    plain = snakemake(workdir, *base, env=env).stdout
    out = snakemake(workdir, *base, f"sites={{fa4: {site}}}", env=env).stdout
    export = f"export PYTHONPATH={site}:$PYTHONPATH; "
    with_site = [line for line in out.splitlines() if export in line]
    assert len(with_site) == 2 and all("--variant fa4 " in x or "--variant paged_flash_attention_4 " in x
                                       for x in with_site)
    commands = lambda text: sorted(x for x in text.splitlines() if "python -m rollout_bench" in x)  # noqa: E731
    assert commands(out.replace(export, "")) == commands(plain)


def test_a_groups_site_reaches_its_jobs_processes_alone(tmp_path):
    """Run, not dry-run: the site is on the PYTHONPATH of the processes of the fa4 group's job and of no other job
    (a shell f-string is evaluated again when a job runs: a loop variable there would name the last job's group).
    The site's sitecustomize records each process that imports it."""
    (tmp_path / "wf").mkdir()
    d = copy_tree(tmp_path / "wf")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nopen(os.path.join(os.path.dirname(__file__), f'seen-{os.getpid()}'), 'wb').write("
        "open('/proc/self/cmdline', 'rb').read())\n")
    jobs = [f"results/generate/qwen3-tiny/transformers_cb/{v}/job-base.json"
            for v in ("paged_sdpa", "paged_flash_attention_4")]
    config = ["--config", "variants={transformers_cb: [paged_sdpa, paged_flash_attention_4]}", f"sites={{fa4: {site}}}"]
    snakemake(d, "--cores", "2", *jobs, *config)
    seen = [p.read_bytes().replace(b"\0", b" ").decode() for p in site.glob("seen-*")]
    assert seen and all("--variant paged_flash_attention_4" in c for c in seen), seen
    # a package installed into the site later reruns that group's job (its `skipped` result may no longer hold)
    assert pending(d, *jobs, *config) == []
    (site / "flash_attn_4-4.0.0b36.dist-info").mkdir()
    assert [p for p in pending(d, *jobs, *config) if p.endswith("job-base.json")] == [jobs[1]]


def test_crashed_job_leaves_no_stats_and_others_finish(workdir, tmp_path):
    broken = tmp_path / "broken-model"
    shutil.copytree(workdir / "results/assets/models/qwen3-tiny", broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    cfg = json.dumps({"cpu": {"models": ["qwen3-tiny", str(broken)],
                              "workload": {"cases": {"greedy": {"batch_sizes": [4]}}}}})
    r = snakemake(workdir, "--cores", "2", "--config", "backends=[hf_generate]", f"profiles={cfg}", check=False)
    assert r.returncode != 0
    slug = str(broken).strip("/").replace("/", "--")
    assert not list((workdir / "results/generate" / slug).rglob("*.json"))
    assert (workdir / "results/generate/qwen3-tiny/hf_generate/default/greedy/bs4.json").exists()


def _report_entries(html: str) -> dict:
    """The report's results, as Snakemake embeds them: {path: {filename, caption (HTML), ...}}."""
    start = html.index("var results = ", html.index('<script id="results">')) + len("var results = ")
    return json.JSONDecoder().raw_decode(html, start)[0]


def _words(text: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", text).split())


def test_report_bundles_every_table_and_chart_with_its_caption(workdir):
    snakemake(workdir, "--report", "report.html")
    entries = _report_entries((workdir / "report.html").read_text())
    captions = {Path(p).name: _words(e["caption"]) for p, e in entries.items()}
    # every table, and every chart (its self-contained HTML; the SVG and PNG are the same picture)
    made = {p.name for p in (workdir / "results/tables").glob("*.md")} | {
        p.name for p in (workdir / "results/charts").glob("*.html")}
    assert made == {"generate.md", "train.md", "equivalence.md", "tps_vs_batch.html", "tps_vs_memory.html",
                    "train_steps.html"}
    assert made <= set(captions), made - set(captions)
    # each caption file is one entry's caption (the decode profile's, off by default, in the test below)
    rst = {p.name: _words(p.read_text()) for p in (workdir / "workflow/report").glob("*.rst")
           if p.name != "decode_step.rst"}
    for name, text in rst.items():
        assert any(text[:60] in c for c in captions.values()), name
    assert all(captions[name] for name in made)


def test_decode_profile_runs_on_the_cpu_when_asked_for(workdir, tmp_path):
    """decode_profile.enabled: one job per model whose options flex jobs replay (the warm starts' random bases),
    then its table, in the report with its caption. Last here: it leaves the table in results/tables."""
    from rollout_bench.core import stats
    from rollout_bench.diagnostics import step_profile

    mine = tmp_path / "profile.yaml"
    mine.write_text("decode_profile: {enabled: true, batch_sizes: [2]}\n")
    on = ("--configfile", str(mine))
    snakemake(workdir, "--cores", "2", *on)
    for model in ("qwen3-tiny", "llama-tiny", "gemma4-tiny"):
        rec = stats.read_json(workdir / f"results/decode_profile/{model}/decode_step.json")
        p = rec["by_batch"]["2"]
        assert rec["model"] == model and p["rows"] == 2 and p["replay"] == "eager"
        assert all(p["class_ms"][c] > 0 for c in step_profile.CLASSES), (model, p["class_ms"])
    table = (workdir / "results/tables/decode_step.md").read_text()
    assert sorted(line.split(" | ")[0] for line in table.splitlines() if line.endswith("| cpu |")) == [
        "| gemma4-tiny", "| llama-tiny", "| qwen3-tiny"]
    assert "Nothing to be done" in (r := snakemake(workdir, "-n", "--cores", "2", *on)).stdout + r.stderr
    snakemake(workdir, "--report", "report.html", *on)
    entries = _report_entries((workdir / "report.html").read_text())
    caption = next(_words(e["caption"]) for p, e in entries.items() if Path(p).name == "decode_step.md")
    assert _words((workdir / "workflow/report/decode_step.rst").read_text())[:60] in caption
