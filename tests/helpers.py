"""What several test modules share: running Snakemake on a copy of the workflow, and what an offline chart
must not hold."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

# a <script src=...> that fetches from the network: an offline host's chart would render blank
REMOTE_SCRIPT = re.compile(r"<script[^>]*\bsrc\s*=\s*[\"']?(https?:)?//", re.I)
TREE = ["Snakefile", "rules", "workflow", "config", "src", "profiles", "envs"]


def snakemake(cwd, *args, env=None, check=True):
    e = {**os.environ, "ROLLOUT_BENCH_GPU_COUNT": "0", **(env or {})}
    e.pop("CUDA_VISIBLE_DEVICES", None)
    r = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=e, capture_output=True, text=True,
                       timeout=1800)
    if check and r.returncode:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    return r


def pending(cwd, *args) -> list[str]:
    """Outputs a dry run would (re)create, from the detailed summary."""
    r = snakemake(cwd, "--detailed-summary", "--cores", "1", *args)
    rows = [line.split("\t") for line in r.stdout.splitlines()[1:] if "\t" in line]
    return sorted(row[0] for row in rows if row[-1].strip() not in ("no update", "-"))


def copy_tree(d: Path) -> Path:
    """The workflow's files, as a user's checkout has them, in `d`."""
    for name in TREE:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, d / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, d / name)
    return d
