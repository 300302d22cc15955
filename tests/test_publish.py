"""publish: one run's results, logs, command and config copied into results/published/<name>/."""
from rollout_bench.publish import publish


def test_publish_copies_results_logs_command_and_config(tmp_path):
    res = tmp_path / "results"
    files = {"generate/m/flex/graphs/greedy/bs64.json": "{}", "tables/generate.md": "| a |",
             "logs/generate/m/flex/graphs/greedy/bs64.log": "log", "benchmarks/generate/m/x.tsv": "s\n1",
             "generate/m/flex/graphs/greedy/weights.pt": "not a result", "assets/models/m/model.safetensors": "big"}
    for rel, text in files.items():
        (res / rel).parent.mkdir(parents=True, exist_ok=True)
        (res / rel).write_text(text)
    (tmp_path / "config.yaml").write_text("profile: gpu\n")
    dest = publish("h200-test", "snakemake --cores 8\n", str(tmp_path / "config.yaml"), results=str(res))
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert got == ["COMMAND", "MANIFEST.json", "benchmarks/generate/m/x.tsv", "config.yaml",
                   "generate/m/flex/graphs/greedy/bs64.json", "logs/generate/m/flex/graphs/greedy/bs64.log",
                   "tables/generate.md"]
    assert (dest / "COMMAND").read_text() == "snakemake --cores 8\n"


def test_the_manifest_says_what_the_stats_were_measured_on(tmp_path):
    """Commit, dirty flag, GPUs and packages come from the jobs' own stats, not from the machine that publishes."""
    import json

    res = tmp_path / "results"
    env = {"git_commit": "abc123", "git_dirty": False, "gpu_name": "NVIDIA H200", "gpu_uuids": ["GPU-1"],
           "driver": "580", "torch": "2.11.0", "vllm": "0.26.0"}
    for i, backend in enumerate(("flex", "vllm")):
        p = res / f"generate/m/{backend}/x/greedy/bs8.json"
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps({"kind": "generate", "status": "ok", "env": {**env, "vllm": env["vllm"] if i else None}}))
    skipped = res / "generate/m/unsloth/x/greedy/bs8.json"
    skipped.parent.mkdir(parents=True)
    skipped.write_text(json.dumps({"kind": "generate", "status": "skipped", "env": {**env, "git_commit": "other"}}))
    (tmp_path / "config.yaml").write_text("profile: headline\n")
    m = json.loads((publish("h", "snakemake x", str(tmp_path / "config.yaml"), results=str(res))
                    / "MANIFEST.json").read_text())
    assert m["profile"] == "headline" and m["command"] == "snakemake x" and m["git_commits"] == ["abc123"]
    assert m["commit"] == "abc123"
    assert m["git_dirty"] == [False] and m["gpu_uuids"] == ["GPU-1"] and m["packages"]["vllm"] == ["0.26.0"]
    assert m["jobs_with_env"] == 2


def test_readme_tables_are_the_published_ones():
    """docs/results.md holds the published rendering, unchanged, but for its flex / vllm section: that run stitched
    flex's and vLLM's rows from sessions on different GPUs, and flex / vLLM pairs count only when measured side by
    side (standings.py, headline.py)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "docs/results.md").read_text()
    published = root / "results/published/h200-2026-11-29-vllm-unsloth/tables"
    tables, versus = (published / "generate.md").read_text().split("\n### flex / vllm\n")
    assert tables.strip() in readme
    assert versus.strip().splitlines()[2] not in readme  # its first pair: flex and vLLM on two GPUs
    for name in ("train", "equivalence"):
        assert (published / f"{name}.md").read_text().strip() in readme
