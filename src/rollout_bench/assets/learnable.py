"""A learnable synthetic task: word problems whose answer follows from the text, with worked solutions.

The `synthetic` dataset only gives prompts a length spread; a model cannot learn it, so GRPO on random
weights sees one reward for every completion. Here every problem states a start value and n numbered
events (graded difficulty: n has a long tail), and its worked solution walks them one line each in the
GRPO chat format: the working out, the end marker, the answer between the solution markers. The model's
completion starts after the generation prompt's opening marker (chat.CHAT_TEMPLATE), so the worked
solution does too; the trainer appends eos. Rows keep the DAPO schema (`prompt`, `solution`) so a hub
dataset drops in; `worked_solution`, `difficulty` and `slipped` are extra columns.
"""
import random
from pathlib import Path

from ..core import atomic
from .chat import REASONING_END, SOLUTION_END, SOLUTION_START

DATA_SOURCE = "rollout-bench-learnable"
MAX_EVENTS = 26  # the long tail's cap: about 600 tokens of working out on the project tokenizer

_ITEMS = ["crates", "books", "apples", "loaves", "tyres", "pencils", "eggs", "ropes", "coins", "bolts",
          "melons", "tickets"]
_PLACES = ["warehouse", "library", "orchard", "bakery", "garage", "school", "farm", "harbour", "museum",
           "factory", "market", "station"]


def _events(rng: random.Random) -> int:
    # mostly short problems, a long tail of long ones (mean about 6 events)
    return min(MAX_EVENTS, 1 + int(rng.expovariate(1 / 5)))


def _step(rng: random.Random, value: int, item: str) -> tuple[str, str, int]:
    """One event: (its sentence, its working line's arithmetic, the new value)."""
    ops = ["add", "add", "sub", "mul", "div"]
    while True:
        op = rng.choice(ops)
        if op == "add":
            k = rng.randint(1, 99)
            return f"{k} more {item} arrive.", f"{value} + {k} = {value + k}", value + k
        if op == "sub" and value > 1:
            k = rng.randint(1, min(value - 1, 99))
            return f"{k} {item} are sold.", f"{value} - {k} = {value - k}", value - k
        if op == "mul" and value <= 500:
            k = rng.randint(2, 3)
            return (f"The number of {item} becomes {k} times as large.", f"{value} * {k} = {value * k}",
                    value * k)
        if op == "div":
            ds = [d for d in (2, 3) if value % d == 0 and value > d]
            if ds:
                d = rng.choice(ds)
                return f"The {item} are split into {d} equal groups and one group is kept.", \
                    f"{value} / {d} = {value // d}", value // d


def problem(rng: random.Random, slip_rate: float = 0.0) -> dict:
    """One row: prompt (the problem), solution (the answer), worked_solution (the completion), difficulty.

    With probability `slip_rate` the worked solution's answer is a slip: the value before the last event (the
    last line's first operand) instead of its result. `solution` stays the true answer, so a model trained on
    these rows answers wrong at about that rate when it samples and right when it decodes greedily: the
    sharpening GRPO can find, as it does on a base model that knows the task but does not reliably finish it.
    """
    assert 0.0 <= slip_rate < 0.5, slip_rate  # at 0.5 or more the slip becomes the greedy answer
    item, place = rng.choice(_ITEMS), rng.choice(_PLACES)
    n = _events(rng)
    value = rng.randint(2, 99)
    text = [f"A {place} has {value} {item}. Then {n} {'thing happens' if n == 1 else 'things happen'}, in order."]
    work = [f"Start: {value}."]
    for i in range(1, n + 1):
        before = value
        sentence, line, value = _step(rng, value, item)
        text.append(f"{i}. {sentence}")
        # "i of n": n is copied from the prompt, i counts up to it and names the prompt's line "i." to read; a
        # countdown ("n - i left") needs a subtraction before the first line and learnt slower on CPU
        # (results/published/h200x2-2026-12-01-warmstart-attempt3/cpu_ab_line_labels.*)
        work.append(f"{i} of {n}: {line}.")
    text.append(f"How many {item} does the {place} have at the end?")
    # drawn last, and from its own stream, so that the problems do not depend on the slip rate
    slipped = random.Random(rng.random()).random() < slip_rate
    answer = before if slipped else value
    worked = "\n".join(work) + f"\n{REASONING_END}{SOLUTION_START}{answer}{SOLUTION_END}"
    return {"prompt": "\n".join(text), "solution": str(value), "worked_solution": worked,
            "difficulty": n, "slipped": slipped, "data_source": DATA_SOURCE}


def generate(n: int, seed: int, slip_rate: float = 0.0) -> list[dict]:
    rng = random.Random(seed)
    return [problem(rng, slip_rate) for _ in range(n)]


def split(n_train: int, n_test: int, seed: int, slip_rate: float = 0.0) -> tuple[list[dict], list[dict]]:
    """Train and held-out rows from one stream; a test problem whose text is also in train is dropped. Only
    the train rows' worked solutions are ever demonstrated (the gates read a held-out row's prompt and answer)."""
    assert n_train > 0 and n_test > 0
    rows = generate(n_train + 2 * n_test, seed, slip_rate)
    train = rows[:n_train]
    seen = {r["prompt"] for r in train}
    test = [r for r in rows[n_train:] if r["prompt"] not in seen][:n_test]
    assert len(test) == n_test, "too many repeated problems: raise the generator's variety"
    return train, test


def build(out_dir, n_train: int, n_test: int, seed: int, slip_rate: float = 0.0) -> Path:
    """`train.parquet` (GRPO and SFT) and `test.parquet` (held out, for the warm start's gates), atomically.

    `dataset.load(out_dir)` reads the train split; `dataset.load(out_dir, split="test")` the held-out one.
    """
    import pandas as pd

    train, test = split(n_train, n_test, seed, slip_rate)
    with atomic.directory(out_dir) as tmp:
        pd.DataFrame(train).to_parquet(Path(tmp) / "train.parquet", index=False)
        pd.DataFrame(test).to_parquet(Path(tmp) / "test.parquet", index=False)
    return Path(out_dir)
