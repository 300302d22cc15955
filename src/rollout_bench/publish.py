"""Copy one run's stats JSONs, rendered tables/charts, job logs and Snakemake benchmark TSVs into
results/published/<name>/ (committed), with the command and config that made them and a manifest of what they
were measured on, read from the stats themselves: the code's git commit, the packages, the GPUs."""
import datetime as _dt
import json
import shutil
from pathlib import Path

import yaml

from . import atomic

MANIFEST = "MANIFEST.json"
SUBDIRS = ("generate", "train", "band", "compare", "autotune", "decode_profile", "summary", "tables", "charts", "logs",
           "benchmarks")
PACKAGES = ("torch", "transformers", "peft", "trl", "triton", "vllm", "unsloth", "flash_attn_4")


def manifest(folder: Path, command: str, config_path: str) -> dict:
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

    with open(config_path) as f:
        profile = (yaml.safe_load(f) or {}).get("profile")
    commits = distinct("git_commit")
    return {
        "command": command.strip(),
        "profile": profile,
        "published_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
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
