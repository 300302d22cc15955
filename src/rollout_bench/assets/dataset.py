"""A synthetic math dataset in the DAPO-Math schema (`prompt`, `solution`), deterministic by seed.

Problems are multi-step word problems with integer answers; the number of steps varies so that
chat-templated prompts span a range of lengths (the workload filters by token count).
"""
import random
from pathlib import Path

from .. import atomic

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
    missing = {"prompt", "solution"} - set(ds.column_names)
    if missing:
        raise ValueError(f"dataset {source!r} lacks column(s) {sorted(missing)}: the DAPO schema needs "
                         f"'prompt' (problem text) and 'solution' (answer)")
    return ds
