"""A synthetic math dataset in the DAPO-Math schema (`prompt`, `solution`), deterministic by seed.

Problems are multi-step word problems with integer answers; the number of steps varies so that
chat-templated prompts span a range of lengths (the workload filters by token count).
"""
import json
import random
from pathlib import Path

from ..core import atomic
from . import paths

COLUMNS = {"prompt", "solution"}  # the DAPO schema: problem text and answer
INSTRUCTION = ("Solve the following math problem step by step. The last line of your response "
               "should be of the form Answer: $Answer (without quotes) where $Answer is the answer "
               "to the problem.\n\n")
REMEMBER = "\n\nRemember to put your answer on its own line after \"Answer:\"."

_PLACES = ["warehouse", "library", "orchard", "bakery", "garage", "school", "farm", "harbour",
           "museum", "factory", "market", "station"]
_ITEMS = ["crates", "books", "apples", "loaves", "tyres", "pencils", "eggs", "ropes", "coins",
          "bolts", "melons", "tickets"]
_NAMES = ["Ava", "Ben", "Chen", "Dara", "Emil", "Fatima", "Goran", "Hana", "Ivo", "Jun", "Kemal",
          "Lena", "Mateo", "Nia", "Omar", "Priya"]


def _problem(rng: random.Random) -> tuple[str, int]:
    place, item, who = rng.choice(_PLACES), rng.choice(_ITEMS), rng.choice(_NAMES)
    value = rng.randint(20, 500)
    text = [f"At the start of the week, a {place} holds {value} {item}."]
    for _ in range(rng.randint(2, 9)):
        op = rng.choice(["add", "sub", "mul", "div"])
        if op == "add":
            k = rng.randint(3, 200)
            text.append(f"On the next day {who} brings in {k} more {item}.")
            value += k
        elif op == "sub" and value > 3:
            k = rng.randint(1, value - 1)
            text.append(f"Then {k} of the {item} are sold to customers.")
            value -= k
        elif op == "mul" and value < 5000:
            k = rng.randint(2, 4)
            text.append(f"After a delivery, the number of {item} becomes {k} times as large.")
            value *= k
        else:
            divisors = [d for d in (2, 3, 4, 5) if value % d == 0]
            if not divisors:
                continue
            d = rng.choice(divisors)
            text.append(f"Then {who} splits the {item} into {d} equal groups and keeps only one group.")
            value //= d
    text.append(f"How many {item} does the {place} hold at the end?")
    return " ".join(text), value


def generate(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        problem, answer = _problem(rng)
        rows.append({"prompt": INSTRUCTION + problem + REMEMBER, "solution": str(answer),
                     "data_source": "rollout-bench-synthetic"})
    return rows


def build(out_dir, n_problems: int, seed: int) -> Path:
    """Write `train.parquet` under out_dir atomically; loadable with `load(out_dir)`."""
    import pandas as pd

    assert n_problems > 0
    rows = generate(n_problems, seed)
    with atomic.directory(out_dir) as tmp:
        pd.DataFrame(rows).to_parquet(Path(tmp) / "train.parquet", index=False)
    return Path(out_dir)


def load(source: str, split: str = "train", config: str | None = None):
    """A hub id (e.g. open-r1/DAPO-Math-17k-Processed, config 'en') or a local directory: same call."""
    import datasets

    ds = datasets.load_dataset(source, config, split=split) if config else datasets.load_dataset(source, split=split)
    missing = COLUMNS - set(ds.column_names)
    if missing:
        raise ValueError(f"dataset {source!r} {_lacks(missing)}")
    return ds


# Data files datasets.load_dataset(dir) reads, with what they can hold: a DAPO-schema train split
DATA_FILES = (".parquet", ".jsonl", ".json", ".csv", ".arrow")


def resolve(source: str) -> str:
    """The kind of source: synthetic, learnable, dir (a local DAPO-schema directory) or hub; a path must be a usable dir.

    Checked when the config is read: otherwise every job fails on it, after loading its model.
    """
    if source in ("synthetic", "learnable"):  # built by the pipeline (assets.learnable for the latter)
        return source
    local = paths.local(source)
    if local is None:
        return "hub"
    if not local.is_dir():
        raise ValueError(f"dataset {source!r}: no such directory (a path must be a directory of "
                         f"DAPO-schema data files; a hub id has the form owner/name)")
    files = sorted(f for f in local.rglob("*") if f.suffix in DATA_FILES and f.is_file()
                   and not any(part.startswith(".") for part in f.relative_to(local).parts))
    if not files:
        raise ValueError(f"dataset {source!r}: directory holds no data files ({', '.join(DATA_FILES)}); "
                         f"point it to DAPO-schema files ('prompt', 'solution' columns), or use synthetic")
    try:
        cols = _columns(files[0])
    except (OSError, ValueError) as e:
        raise ValueError(f"dataset {source!r}: {files[0].relative_to(local)} is unreadable ({e})") from None
    if cols is not None and COLUMNS - cols:
        raise ValueError(f"dataset {source!r}: {files[0].relative_to(local)} {_lacks(COLUMNS - cols)}")
    return "dir"


def _lacks(missing: set[str]) -> str:
    return (f"lacks column(s) {sorted(missing)}: the DAPO schema needs 'prompt' (problem text) and "
            f"'solution' (answer)")


def _columns(f: Path) -> set[str] | None:
    """The columns of a data file where reading them is cheap (a parquet footer, a first line); else None."""
    if f.suffix == ".parquet":
        import pyarrow.parquet as pq

        return set(pq.read_schema(f).names)
    if f.suffix == ".jsonl":
        with open(f) as fh:
            first = fh.readline()
        row = json.loads(first) if first.strip() else None
        return set(row) if isinstance(row, dict) else None
    if f.suffix == ".csv":
        with open(f) as fh:
            return {c.strip().strip('"') for c in fh.readline().split(",")}
    return None
