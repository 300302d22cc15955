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


def select(tok, workload: dict, dataset_dir: str) -> tuple[list[list[int]], list[list[int]]]:
    """(measured prompts, warm-up prompts): the first n_prompts in the length window after the shuffle."""
    lo, hi = workload["prompt_tokens"]
    n = workload["n_prompts"]
    ds = dataset.load(dataset_dir).shuffle(seed=workload["shuffle_seed"])
    picked = []
    for problem in ds["prompt"]:
        ids = encode(tok, problem)
        if lo <= len(ids) <= hi:
            picked.append(ids)
            if len(picked) == n:
                break
    if len(picked) < n:
        raise ValueError(f"workload.n_prompts={n} but only {len(picked)} prompts of the dataset have "
                         f"{lo}..{hi} tokens; widen workload.prompt_tokens or lower n_prompts")
    return picked, picked[: workload["warmup_prompts"]]


def decode(tok, ids: list[int]) -> str:
    # Random-weight models of a real shape emit ids beyond this tokenizer's vocabulary.
    return tok.decode([i for i in ids if i < len(tok)], skip_special_tokens=False)
