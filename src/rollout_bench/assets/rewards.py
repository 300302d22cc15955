"""The seed notebook's four GRPO reward functions, with its exact scores.

TRL calls each with the batch's conversational `completions` (one assistant message each) and the
dataset columns as keyword lists (`answer` here); the function name becomes the
`rewards/<name>/mean` metric. Every backend shares this file, and `source_sha256` goes into the stats
so a comparison can prove the reward code was identical.
"""
import hashlib
import re
from pathlib import Path

from .chat import REASONING_END, SOLUTION_END, SOLUTION_START


def _texts(completions) -> list[str]:
    return [c[0]["content"] if isinstance(c, list) else c for c in completions]


# the seed's scores for an exact format and an exact answer: accuracy everywhere counts the latter
EXACT_FORMAT = 3.0
EXACT_ANSWER = 5.0


def build(eos_token: str) -> list:
    """The four reward callables, wired to the tokenizer's eos token (it may trail the solution)."""
    # The solution block must close the response: only whitespace and at most one eos may follow.
    solution_end = re.escape(SOLUTION_END) + r"[\s]{0,}" + "(?:" + re.escape(eos_token) + ")?"
    match_format = re.compile(
        rf"{re.escape(REASONING_END)}.*?{re.escape(SOLUTION_START)}(.+?){solution_end}[\s]{{0,}}$",
        flags=re.MULTILINE | re.DOTALL,
    )
    # First number after the opening marker, even when the format is otherwise broken.
    match_numbers = re.compile(re.escape(SOLUTION_START) + r".*?[\s]{0,}([-]?[\d\.\,]{1,})",
                               flags=re.MULTILINE | re.DOTALL)

    def match_format_exactly(completions, **kwargs):
        return [EXACT_FORMAT if match_format.search(r) is not None else 0.0 for r in _texts(completions)]

    def match_format_approximately(completions, **kwargs):
        scores = []
        for r in _texts(completions):
            scores.append(sum(0.5 if r.count(marker) == 1 else -1.0
                              for marker in (REASONING_END, SOLUTION_START, SOLUTION_END)))
        return scores

    def check_answer(prompts, completions, answer, **kwargs):
        scores = []
        for r, true in zip(_texts(completions), answer, strict=True):
            m = match_format.search(r)
            if m is None:
                scores.append(-2.0)
                continue
            guess = m.group(1)
            if guess == true:
                scores.append(EXACT_ANSWER)
            elif guess.strip() == true.strip():
                scores.append(3.5)
            else:
                try:
                    ratio = float(guess) / float(true)
                except (ValueError, ArithmeticError):  # the seed scores any failure -4.5
                    scores.append(-4.5)
                    continue
                scores.append(2.0 if 0.9 <= ratio <= 1.1 else 1.5 if 0.8 <= ratio <= 1.2 else -2.5)
        return scores

    def check_numbers(prompts, completions, answer, **kwargs):
        scores = []
        for r, true in zip(_texts(completions), answer, strict=True):
            m = match_numbers.search(r)
            if m is None:
                scores.append(-2.5)
                continue
            try:
                scores.append(3.5 if float(m.group(1).strip().replace(",", "")) == float(true.strip()) else -1.5)
            except ValueError:
                scores.append(0.0)
        return scores

    return [match_format_exactly, match_format_approximately, check_answer, check_numbers]


def source_sha256() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
