"""Copy one run's stats JSONs, rendered tables/charts, job logs and Snakemake benchmark TSVs into
results/published/<name>/ (committed), with the command and config that made them and a manifest of what they
were measured on, read from the stats themselves: the code's git commit, the packages, the GPUs."""
import json
import re
import shutil
from pathlib import Path

import yaml

from ..core import atomic, envinfo

MANIFEST = "MANIFEST.json"
SUBDIRS = ("generate", "mismatch", "train", "band", "compare", "autotune", "decode_profile", "summary", "tables",
           "charts", "logs", "benchmarks")
PACKAGES = ("torch", "transformers", "peft", "trl", "triton", "vllm", "unsloth", "flash_attn_4")


def runs(root, profile: str) -> list[Path]:
    """Published runs of `profile` under `root`, oldest first (by the date their manifest was written)."""
    return [folder for folder, _ in manifests(root, profile)]


def manifests(root, profile: str) -> list[tuple[Path, dict]]:
    """(folder, its manifest) of each published run of `profile` under `root`, oldest first."""
    out = []
    for m in Path(root).glob(f"*/{MANIFEST}"):
        man = json.loads(m.read_text())
        if man.get("profile") == profile:
            out.append((man.get("published_at", ""), m.parent, man))
    return [(f, man) for _, f, man in sorted(out, key=lambda t: t[:2])]


def manifest(folder: Path, command: str, config_path: str | None) -> dict:
    """What a published folder was measured on, from its stats (env of every job) and its config."""
    envs = []
    for p in sorted(folder.rglob("*.json")):
        try:
            rec = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("env"), dict) and rec.get("status") != "skipped":
            envs.append(rec["env"])

    def distinct(key):
        return sorted({str(e.get(key)) for e in envs if e.get(key) is not None})

    profile = None
    if config_path:
        with open(config_path) as f:
            profile = (yaml.safe_load(f) or {}).get("profile")
    commits = distinct("git_commit")
    return {
        "command": command.strip(),
        "profile": profile,
        "published_at": envinfo.utc_iso(),
        "commit": commits[0] if len(commits) == 1 else None,  # the one commit every job ran, where there is one
        "git_commits": commits,
        "git_dirty": sorted({bool(e["git_dirty"]) for e in envs if e.get("git_dirty") is not None}),
        "gpu_names": distinct("gpu_name"),
        "gpu_uuids": sorted({u for e in envs for u in e.get("gpu_uuids") or []}),
        "drivers": distinct("driver"),
        "packages": {k: distinct(k) for k in PACKAGES if distinct(k)},
        "jobs_with_env": len(envs),
    }


def publish(name: str, command: str, config_path: str, results: str = "results") -> Path:
    src = Path(results)
    dest = src / "published" / name
    with atomic.directory(dest) as tmp:
        for sub in SUBDIRS:
            for f in sorted((src / sub).rglob("*")) if (src / sub).exists() else []:
                if f.is_file() and f.suffix in (".json", ".csv", ".md", ".html", ".svg", ".png", ".log", ".tsv"):
                    target = tmp / f.relative_to(src)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, target)
        shutil.copy2(config_path, tmp / "config.yaml")
        (tmp / "COMMAND").write_text(command.rstrip() + "\n")
        atomic.write_json(tmp / MANIFEST, manifest(tmp, command, config_path))
    return dest


SCRIPTS = (".sh", ".py")  # the device scripts early sessions copied into their folders (the kit is versioned now)


def _git(root: Path, *args) -> str | None:
    out = envinfo.git(root, *args)
    return None if out is None else out.strip()


def backfill(folder: Path, root: Path) -> dict:
    """The manifest of a folder published before manifests and the device kit, written from what it holds, and its
    copied scripts removed: the stats' env (`manifest`; the commit only where the stats record it), the command
    and config it kept, the commits its COMMAND and README name that this repository knows (`named_commits`), and
    where git keeps each script it held (`scripts_in_history`: `git show <commit>:<path>`). A folder that has a
    manifest keeps it, gaining the scripts' key."""
    folder = Path(folder)
    head = _git(root, "rev-parse", "HEAD")
    assert head, f"{root} is not a git checkout: the removed scripts would be lost"
    scripts = sorted(str(f.relative_to(root)) for f in folder.rglob("*") if f.is_file() and f.suffix in SCRIPTS)
    scripts = [f for f in scripts if _git(root, "cat-file", "-e", f"{head}:{f}") is not None]
    path = folder / MANIFEST
    if path.exists():
        man = json.loads(path.read_text())
    else:
        text = "".join((folder / n).read_text() for n in ("COMMAND", "README.md") if (folder / n).exists())
        command = (folder / "COMMAND").read_text() if (folder / "COMMAND").exists() else ""
        config = folder / "config.yaml"
        man = manifest(folder, command, str(config) if config.exists() else None)
        named = dict.fromkeys(_git(root, "rev-parse", "--verify", "--quiet", f"{h}^{{commit}}")
                              for h in re.findall(r"\b[0-9a-f]{7,40}\b", text))
        man["manifest_written_at"] = man.pop("published_at")  # not when the folder was published
        man["named_commits"] = [c for c in named if c]
        man["backfilled"] = "written from the folder's own files after it was published (pipeline/publish.backfill)"
    if scripts:
        man["scripts_in_history"] = {"commit": head, "paths": scripts}
    atomic.write_json(path, man)
    for f in scripts:
        (root / f).unlink()
    for d in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    return man
