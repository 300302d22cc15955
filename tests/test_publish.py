"""publish: one run's results, logs, command and config copied into results/published/<name>/."""
from rollout_bench.pipeline.publish import publish


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


def _git(cwd, *args):
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_backfill_writes_a_manifest_and_leaves_the_scripts_to_git(tmp_path):
    """A folder from before manifests: its manifest comes from its own files (the commit its COMMAND names, checked
    against the repository), and its copied device scripts go, each findable with `git show`."""
    import json

    from rollout_bench.pipeline import publish as pub

    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "code")
    code = _git(tmp_path, "rev-parse", "HEAD")
    folder = tmp_path / "results/published/h200-old"
    (folder / "scripts").mkdir(parents=True)
    (folder / "scripts/run.sh").write_text("echo run\n")
    (folder / "COMMAND").write_text(f"bash scripts/run.sh  # at {code[:7]}; deadbeef is no commit here\n")
    (folder / "generate").mkdir()
    (folder / "generate/bs8.json").write_text(json.dumps({"status": "ok", "env": {"gpu_name": "NVIDIA H200"}}))
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "publish")
    held = _git(tmp_path, "rev-parse", "HEAD")

    man = pub.backfill(folder, tmp_path)
    assert man["named_commits"] == [code] and man["commit"] is None and man["gpu_names"] == ["NVIDIA H200"]
    assert man["scripts_in_history"] == {"commit": held, "paths": ["results/published/h200-old/scripts/run.sh"]}
    assert json.loads((folder / "MANIFEST.json").read_text()) == man
    assert not (folder / "scripts").exists() and (folder / "generate/bs8.json").exists()
    assert _git(tmp_path, "show", f"{held}:results/published/h200-old/scripts/run.sh") == "echo run"


def test_every_published_folder_has_a_manifest_and_no_copied_scripts():
    from rollout_bench.pipeline import publish as pub

    from .conftest import ROOT

    folders = [d for d in (ROOT / "results/published").iterdir() if d.is_dir()]
    assert folders and all((d / pub.MANIFEST).is_file() for d in folders), [d.name for d in folders
                                                                            if not (d / pub.MANIFEST).is_file()]
    assert not [str(f) for d in folders for f in d.rglob("*") if f.suffix in pub.SCRIPTS]
