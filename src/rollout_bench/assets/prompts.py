"""Pick the workload's prompts: shuffle by seed, chat template, keep a token-length window."""
from . import chat, dataset


def load_tokenizer(model_dir: str, chat_template: str = "grpo"):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    if chat_template == "grpo":
        tok.chat_template = chat.CHAT_TEMPLATE  # hub tokenizers get the seed's GRPO template too
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def encode(tok, problem: str) -> list[int]:
    return list(tok.apply_chat_template(chat.messages(problem), add_generation_prompt=True,
                                        tokenize=True, return_dict=False))


class _Pool:
    """A dataset's prompts after the shuffle, encoded, in a token window: encoded once a process, as far as asked
    (a job's cells each start further in). It holds its tokenizer, so no other one can take the id it is keyed by."""

    def __init__(self, tok, dataset_dir: str, seed: int, lo: int, hi: int):
        self.tok, self.lo, self.hi = tok, lo, hi
        self.rest = iter(dataset.load(dataset_dir).shuffle(seed=seed)["prompt"])
        self.kept: list[list[int]] = []

    def first(self, k: int) -> list[list[int]]:
        while len(self.kept) < k and (problem := next(self.rest, None)) is not None:
            ids = encode(self.tok, problem)
            if self.lo <= len(ids) <= self.hi:
                self.kept.append(ids)
        return self.kept[:k]


_POOLS: dict[tuple, object] = {}


def _pool(tok, dataset_dir: str, seed: int, lo: int, hi: int, long: bool = False):
    """The dataset's prompts in the window, or (long) prompts built from its rows to lengths in it (long_prompts)."""
    key = (id(tok), str(dataset_dir), seed, lo, hi, long)
    if key not in _POOLS:
        if long:
            from . import long_prompts

            _POOLS[key] = long_prompts.pool(tok, dataset_dir, seed, lo, hi)
        else:
            _POOLS[key] = _Pool(tok, dataset_dir, seed, lo, hi)
    return _POOLS[key]


def select(tok, workload: dict, dataset_dir: str, sets: int | None = None):
    """(each timed round's prompts, warm-up prompts): after the shuffle, the prompts in the length window from
    workload.prompt_offset on (the prompts of the cells before this one: jobs.prompt_offset), n_prompts a round
    for `rounds` rounds, then the warm-up's. No prompt is sent twice: an engine that caches prefixes across calls
    (vLLM's prefix caching, transformers' block sharing, both on by default) would otherwise skip the prefill of
    every round after the first, which a GRPO step, whose prompts are new, does not get to do.
    With `sets`: that many sets of rounds, each its own prompts (a cell measured again), as a list of them.
    workload.long_prompts: prompts built to lengths in the window from the dataset's rows (long_prompts.py)."""
    lo, hi = workload["prompt_tokens"]
    n, rounds, n_warm = workload["n_prompts"], workload["rounds"], workload["warmup_prompts"]
    skip = workload.get("prompt_offset", 0)
    need = n * rounds * (sets or 1) + n_warm
    long = workload.get("long_prompts", False)
    eligible = _pool(tok, dataset_dir, workload["shuffle_seed"], lo, hi, long).first(skip + need)
    picked, seen = eligible[skip:], len(eligible)
    if len(picked) < need:
        job = f"case {workload['case']!r} at batch size {workload['batch_size']}" if "case" in workload else "the job"
        raise ValueError(
            f"{job} sends {need} distinct prompts (n_prompts={n} a round, null meaning batch_size / "
            f"num_generations, x workload.rounds={rounds} x {sets or 1} set(s) (1 + workload.spread_retries), plus "
            f"warmup_prompts={n_warm}) after the {skip} of the cells before it, but dataset "
            f"{workload.get('dataset', dataset_dir)!r} has only {seen} prompts of {lo}..{hi} tokens; give the dataset "
            f"more problems (dataset.n_problems for the synthetic one), widen prompt_tokens (workload's, or the "
            f"case's own), or lower the cases' batch_sizes or n_prompts, workload.rounds, spread_retries or "
            f"warmup_prompts")
    out = [[picked[(s * rounds + r) * n:(s * rounds + r + 1) * n] for r in range(rounds)] for s in range(sets or 1)]
    warmup = picked[n * rounds * (sets or 1):]
    return (out, warmup) if sets else (out[0], warmup)


def decode(tok, ids: list[int]) -> str:
    # Random-weight models of a real shape emit ids beyond this tokenizer's vocabulary.
    return tok.decode([i for i in ids if i < len(tok)], skip_special_tokens=False)
