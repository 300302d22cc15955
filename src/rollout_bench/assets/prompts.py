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


def select(tok, workload: dict, dataset_dir: str) -> tuple[list[list[list[int]]], list[list[int]]]:
    """(each timed round's prompts, warm-up prompts): after the shuffle, the prompts in the length window, n_prompts
    a round for `rounds` rounds, then the warm-up's. No prompt is sent twice: an engine that caches prefixes across
    calls (vLLM's prefix caching, transformers' block sharing, both on by default) would otherwise skip the prefill
    of every round after the first, which a GRPO step, whose prompts are new, does not get to do."""
    lo, hi = workload["prompt_tokens"]
    n, rounds, n_warm = workload["n_prompts"], workload["rounds"], workload["warmup_prompts"]
    need = n * rounds + n_warm
    ds = dataset.load(dataset_dir).shuffle(seed=workload["shuffle_seed"])
    picked = []
    for problem in ds["prompt"]:
        ids = encode(tok, problem)
        if lo <= len(ids) <= hi:
            picked.append(ids)
            if len(picked) == need:
                break
    if len(picked) < need:
        job = f"case {workload['case']!r} at batch size {workload['batch_size']}" if "case" in workload else "the job"
        raise ValueError(
            f"{job} sends {need} distinct prompts (n_prompts={n} a round, null meaning batch_size / "
            f"num_generations, x workload.rounds={rounds}, plus warmup_prompts={n_warm}) but only {len(picked)} "
            f"prompts of dataset {workload.get('dataset', dataset_dir)!r} have {lo}..{hi} tokens; widen "
            f"prompt_tokens (workload's, or the case's own), give the dataset more problems (dataset.n_problems for "
            f"the synthetic one), or lower the case's batch_sizes, workload.rounds or workload.warmup_prompts")
    return [picked[r * n:(r + 1) * n] for r in range(rounds)], picked[n * rounds:]


def decode(tok, ids: list[int]) -> str:
    # Random-weight models of a real shape emit ids beyond this tokenizer's vocabulary.
    return tok.decode([i for i in ids if i < len(tok)], skip_special_tokens=False)
