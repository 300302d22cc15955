import re

import numpy as np
import pytest

from rollout_bench.assets import chat, learnable, rewards
from rollout_bench.assets import dataset as dataset_assets

EOS = "<|endoftext|>"


def solve(prompt: str) -> int:
    """The answer recomputed from the problem text alone."""
    lines = prompt.split("\n")
    value = int(re.match(r"A \w+ has (\d+) ", lines[0]).group(1))
    n = int(re.search(r"Then (\d+) thing", lines[0]).group(1))
    events = lines[1:-1]
    assert len(events) == n and lines[-1].startswith("How many")
    for i, e in enumerate(events, 1):
        assert e.startswith(f"{i}. ")
        if m := re.search(r"\. (\d+) more ", e):
            value += int(m.group(1))
        elif m := re.search(r"\. (\d+) \w+ are sold", e):
            value -= int(m.group(1))
        elif m := re.search(r"becomes (\d+) times", e):
            value *= int(m.group(1))
        elif m := re.search(r"into (\d+) equal groups", e):
            assert value % int(m.group(1)) == 0
            value //= int(m.group(1))
        else:
            raise AssertionError(e)
    return value


@pytest.fixture(scope="module")
def rows():
    return learnable.generate(1000, 3407)


def test_answers_follow_from_the_text(rows):
    for r in rows:
        assert int(r["solution"]) == solve(r["prompt"]) and int(r["solution"]) > 0
        assert r["difficulty"] == len(r["prompt"].split("\n")) - 2


def test_worked_solutions_score_full_marks_on_the_grpo_rewards(rows):
    fmt, approx, answer, numbers = rewards.build(EOS)
    texts = [r["worked_solution"] + EOS for r in rows]  # as the trainer appends it and a rollout may keep it
    answers = [r["solution"] for r in rows]
    assert fmt(texts) == [3.0] * len(rows)
    assert approx(texts) == [1.5] * len(rows)
    assert answer(None, texts, answers) == [5.0] * len(rows)
    assert numbers(None, texts, answers) == [3.5] * len(rows)


def test_worked_solution_walks_each_event_by_its_number(rows):
    for r in rows[:200]:
        work = r["worked_solution"].split("\n")
        assert work[0].startswith("Start: ") and work[-1].startswith(chat.REASONING_END)
        steps = work[1:-1]
        n = r["difficulty"]
        assert [s.split(":")[0] for s in steps] == [f"{i} of {n}" for i in range(1, n + 1)]
        for s in steps:  # each line's arithmetic is right
            a, op, b, c = re.search(r"(\d+) ([-+*/]) (\d+) = (\d+)\.$", s).groups()
            assert eval(f"{a} {op.replace('/', '//')} {b}") == int(c)  # noqa: S307 (our own digits)
        assert steps[-1].endswith(f"= {r['solution']}.")


def test_difficulty_and_length_spread(rows, tiny_assets):
    from transformers import AutoTokenizer

    d = np.array([r["difficulty"] for r in rows])
    assert d.min() == 1 and d.max() == learnable.MAX_EVENTS and np.median(d) <= 5  # mostly easy, long tail
    tok = AutoTokenizer.from_pretrained(tiny_assets["tokenizer"])
    n = np.array([len(tok(r["worked_solution"])["input_ids"]) + 1 for r in rows])
    p10, p50, p90 = np.percentile(n, [10, 50, 90])
    assert p10 < 60 and p90 > 2.5 * p50 and n.max() > 5 * p10, (p10, p50, p90, n.max())


def test_deterministic_and_held_out_split_is_disjoint():
    assert learnable.generate(50, 1) == learnable.generate(50, 1) != learnable.generate(50, 2)
    train, test = learnable.split(500, 100, 7)
    assert len(train) == 500 and len(test) == 100
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}


def test_build_keeps_the_dapo_schema(tmp_path):
    learnable.build(tmp_path / "d", 40, 8, 3)
    assert dataset_assets.resolve(str(tmp_path / "d")) == "dir" and dataset_assets.resolve("learnable") == "learnable"
    train = dataset_assets.load(str(tmp_path / "d"))
    test = dataset_assets.load(str(tmp_path / "d"), split="test")
    assert len(train) == 40 and len(test) == 8
    assert {"prompt", "solution", "worked_solution", "difficulty"} <= set(train.column_names)


def test_slips_answer_the_value_before_the_last_event_and_leave_the_problems_alone():
    clean, slipped = learnable.generate(2000, 3407), learnable.generate(2000, 3407, slip_rate=0.3)
    fmt, _, answer, _ = rewards.build(EOS)
    for a, b in zip(clean, slipped, strict=True):
        assert (a["prompt"], a["solution"], a["difficulty"]) == (b["prompt"], b["solution"], b["difficulty"])
        work_a, work_b = (r["worked_solution"].split(chat.SOLUTION_START)[0] for r in (a, b))
        assert not a["slipped"] and work_a == work_b  # the working out is the same; only the answer may slip
        assert _answer(a) == a["solution"] and (_answer(b) == b["solution"]) != b["slipped"]
        text = b["worked_solution"] + EOS
        assert fmt([text]) == [3.0]  # a slip keeps the format: only the answer is wrong
        if b["slipped"]:
            last = b["worked_solution"].split("\n")[-2]  # "n of n: a op k = c."
            assert _answer(b) == re.search(r": (\d+) ", last).group(1) != b["solution"]
            assert answer(None, [text], [b["solution"]]) != [5.0]
    rate = np.mean([b["slipped"] for b in slipped])
    assert 0.27 < rate < 0.33, rate


def _answer(row) -> str:
    return re.search(re.escape(chat.SOLUTION_START) + r"(\d+)", row["worked_solution"]).group(1)


def test_build_writes_the_slip_rate_into_train_rows(tmp_path):
    learnable.build(tmp_path / "d", 400, 8, 3, slip_rate=0.25)
    train = dataset_assets.load(str(tmp_path / "d"))
    assert 0.15 < np.mean(train["slipped"]) < 0.35
