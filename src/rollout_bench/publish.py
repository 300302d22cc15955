"""Copy one run's stats JSONs, rendered tables/charts, job logs and Snakemake benchmark TSVs into
results/published/<name>/ (committed), with the command and config that made them."""
import shutil
from pathlib import Path

from . import atomic


def publish(name: str, command: str, config_path: str, results: str = "results") -> Path:
    src = Path(results)
    dest = src / "published" / name
    with atomic.directory(dest) as tmp:
        for sub in ("generate", "train", "band", "compare", "autotune", "decode_profile", "summary", "tables", "charts",
                    "logs", "benchmarks"):
            for f in sorted((src / sub).rglob("*")) if (src / sub).exists() else []:
                if f.is_file() and f.suffix in (".json", ".csv", ".md", ".html", ".svg", ".png", ".log", ".tsv"):
                    target = tmp / f.relative_to(src)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, target)
        shutil.copy2(config_path, tmp / "config.yaml")
        (tmp / "COMMAND").write_text(command.rstrip() + "\n")
    return dest
