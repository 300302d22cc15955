"""Long prompts for a prefill-heavy case (workload.cases.<case>.long_prompts): the dataset's problems are 100-300
tokens, a long-context GRPO prompt (a document, a multi-turn tool transcript) 2k-8k.

Prompt i of a pool is a pure function of (dataset, shuffle seed, i, window, tokenizer). Its target length lies in
one of PERIOD equal parts of the window, at a point drawn in it by (seed, i mod PERIOD), and any PERIOD prompts in a
row take each part once, in an order drawn by the seed: every timed round of a multiple of PERIOD prompts spans the
window and holds about as many prompt tokens as the next (each round sends prompts of its own; with lengths drawn
anew for each prompt, at 95817f3, the B = 8 rounds of h200-2026-12-07-prefill held 29k-49k prompt tokens and every
engine's rounds spread 33-46%). Its user turn is worked examples, each a dataset row's problem and answer, then a
question, another row's problem. The first example is row i of the shuffled dataset and the rest are drawn by (seed,
i), so no two prompts of a pool open alike after the chat template's system prompt and the dataset's shared
instruction (which every case's prompts share, as a GRPO run's do): no engine's prefix cache makes one prompt's
prefill free for another (pools of more prompts than rows reuse first examples, then differ from the second on).
Examples are added until the templated prompt reaches its target, then one at a time removed or added until it lies
in the window.
"""
import random

from . import prompts as prompt_assets

SEPARATOR = "\n\n"
PERIOD = 8  # the prefill case's rounds: 8 and 64 prompts


class Pool:
    """prompt_assets._Pool's interface (`first(k)`) over long prompts, built as far as asked."""

    def __init__(self, tok, rows: list[tuple[str, str]], seed: int, lo: int, hi: int):
        assert len(rows) >= 2 and 1 <= lo <= hi, (len(rows), lo, hi)
        self.tok, self.rows, self.seed, self.lo, self.hi = tok, rows, seed, lo, hi
        self.sizes: dict[int, int] = {}  # row -> its example's tokens (an estimate: BPE merges across joins)
        self.kept: list[list[int]] = []
        self.strata = random.Random(f"{seed}:strata").sample(range(PERIOD), PERIOD)  # prompt i % PERIOD's eighth

    def target(self, i: int) -> int:
        """Prompt i's target length: a point of its own in its eighth of the window, the same for i and i + PERIOD."""
        u = random.Random(f"{self.seed}:length:{i % PERIOD}").random()
        return min(self.hi, self.lo + int((self.hi - self.lo + 1) * (self.strata[i % PERIOD] + u) / PERIOD))

    def example(self, row: int) -> str:
        problem, answer = self.rows[row]
        return f"{problem}\nAnswer: {answer}"

    def size(self, row: int) -> int:
        if row not in self.sizes:
            self.sizes[row] = len(self.tok(self.example(row) + SEPARATOR, add_special_tokens=False)["input_ids"])
        return self.sizes[row]

    def encode(self, examples: list[int], question: int) -> list[int]:
        text = SEPARATOR.join([*map(self.example, examples), self.rows[question][0]])
        return prompt_assets.encode(self.tok, text)

    def build(self, i: int) -> list[int]:
        n = len(self.rows)
        target = self.target(i)
        rng = random.Random(f"{self.seed}:{i}")
        question = (i + 1 + rng.randrange(n - 1)) % n  # any row but the first example's
        draws = iter(lambda: rng.randrange(n), None)  # endless, deterministic
        examples, estimate = [i % n], len(self.encode([], question))
        estimate += self.size(i % n)
        while estimate < target:
            examples.append(next(draws))
            estimate += self.size(examples[-1])
        ids = self.encode(examples, question)
        for _ in range(64):  # the estimate is within a few tokens: a step or two at most
            if len(ids) > self.hi and len(examples) > 1:
                examples.pop()
            elif len(ids) < self.lo:
                examples.append(next(draws))
            else:
                break
            ids = self.encode(examples, question)
        if not self.lo <= len(ids) <= self.hi:
            raise ValueError(f"long prompts: the prompt_tokens window [{self.lo}, {self.hi}] is narrower than one "
                             f"worked example of this dataset (~{max(self.sizes.values())} tokens) or below the "
                             f"shortest prompt ({len(self.encode([i % n], question))} tokens): widen it")
        return ids

    def first(self, k: int) -> list[list[int]]:
        while len(self.kept) < k:
            self.kept.append(self.build(len(self.kept)))
        return self.kept[:k]


def pool(tok, dataset_dir: str, seed: int, lo: int, hi: int) -> Pool:
    from . import dataset

    ds = dataset.load(dataset_dir).shuffle(seed=seed)
    return Pool(tok, list(zip(ds["prompt"], map(str, ds["solution"]))), seed, lo, hi)
