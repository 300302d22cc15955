"""How a warm-started model behaves on held-out prompts: what its card's gates read.

HF `generate` on the model directory (the simplest loader every backend shares); greedy for the
termination, format, accuracy and length figures, then temperature 1.0 with several samples per
prompt for the fraction of GRPO groups whose rewards differ (no spread, no advantage, no learning).
Scores use the project's reward functions (grpo/rewards.py), exactly as GRPO training does.
"""
from dataclasses import asdict, dataclass

import numpy as np

from ..grpo import rewards
from . import prompts as prompt_assets


@dataclass(frozen=True)
class EvalSpec:
    max_new_tokens: int = 512
    group_prompts: int = 32  # prompts sampled at temperature 1.0
    group_size: int = 8  # samples per prompt (a GRPO group)
    batch_size: int = 64  # sequences per generate call; prompts sorted by length, so short batches stop early
    seed: int = 3407


@dataclass(frozen=True)
class Completion:
    text: str  # decoded without special tokens, as GRPO's reward functions receive it
    n_tokens: int  # generated tokens, eos included
    ended: bool  # eos before max_new_tokens


def _generate(model, tok, prompts: list[str], spec: EvalSpec, n: int, sample: bool,
              autocast: bool = False) -> list[list[Completion]]:
    """autocast: bf16 autocast around fp32 weights (a model still in training)."""
    import contextlib

    import torch

    eos = tok.eos_token_id
    amp = torch.autocast(model.device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    ids = [prompt_assets.encode(tok, p) for p in prompts]
    out: list[list[Completion]] = [[] for _ in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(ids[i]))  # similar lengths share a batch: less padding
    per_call = max(1, spec.batch_size // n) if sample else spec.batch_size
    for start in range(0, len(order), per_call):
        chunk = order[start:start + per_call]
        enc = tok.pad({"input_ids": [ids[i] for i in chunk]}, return_tensors="pt").to(model.device)
        with torch.no_grad(), amp:
            # use_cache: gradient checkpointing turns it off in the config of a model in training
            gen = model.generate(**enc, max_new_tokens=spec.max_new_tokens, do_sample=sample, use_cache=True,
                                 num_return_sequences=n, eos_token_id=eos, pad_token_id=tok.pad_token_id,
                                 **({"temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {}))
        new = gen[:, enc["input_ids"].shape[1]:]  # [len(chunk) * n, <= max_new_tokens]
        for row, seq in enumerate(new.tolist()):
            hit = eos in seq
            toks = seq[:seq.index(eos) + 1] if hit else seq
            out[chunk[row // n]].append(Completion(tok.decode(toks, skip_special_tokens=True), len(toks), hit))
    return out


def greedy_accuracy(model, tok, rows: list[dict], autocast: bool = False, max_new_tokens: int = 512) -> float:
    """Greedy answer accuracy on `rows`, on `model` as it is (a progress probe during training)."""
    side, tok.padding_side = tok.padding_side, "left"
    try:
        model.eval()
        prompts = [r["prompt"] for r in rows]
        done = [c[0].text for c in _generate(model, tok, prompts, EvalSpec(max_new_tokens=max_new_tokens), 1,
                                             sample=False, autocast=autocast)]
    finally:
        tok.padding_side = side
    _, _, answer_fn, _ = rewards.build(tok.eos_token)
    return _rate(answer_fn(prompts, done, [str(r["solution"]) for r in rows]), rewards.EXACT_ANSWER)


def _rate(scores: list[float], exact: float) -> float:
    """The fraction of scores that are the reward's exact-match score."""
    return float(np.mean([s == exact for s in scores]))


def evaluate(model_dir, rows: list[dict], spec: EvalSpec) -> dict:
    """Figures over `rows` (DAPO-schema dicts: `prompt`, `solution`) for warm_card.gates; on the GPU
    in the saved dtype (what the backends load), on CPU in float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(spec.seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"  # generation continues from the right end
    cuda = torch.cuda.is_available()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto" if cuda else torch.float32)
    model = model.to("cuda" if cuda else "cpu").eval()
    fmt, _, answer_fn, _ = fns = rewards.build(tok.eos_token)
    prompts, answers = [r["prompt"] for r in rows], [str(r["solution"]) for r in rows]

    greedy = [c[0] for c in _generate(model, tok, prompts, spec, 1, sample=False)]
    texts = [c.text for c in greedy]
    lengths = np.array([c.n_tokens for c in greedy])
    figures = {
        "n_prompts": len(rows),
        "eos_rate": float(np.mean([c.ended for c in greedy])),
        "format_rate": _rate(fmt(texts), rewards.EXACT_FORMAT),
        "accuracy": _rate(answer_fn(prompts, texts, answers), rewards.EXACT_ANSWER),
        "length_p10": float(np.percentile(lengths, 10)),
        "length_p50": float(np.percentile(lengths, 50)),
        "length_p90": float(np.percentile(lengths, 90)),
    }

    k = min(spec.group_prompts, len(rows))
    groups = _generate(model, tok, prompts[:k], spec, spec.group_size, sample=True)
    stds = []
    for group, true in zip(groups, answers[:k], strict=True):
        texts = [c.text for c in group]
        # TRL's GRPO reward: the sum of the reward functions (unit weights)
        total = np.sum([f(prompts=[None] * len(texts), completions=texts, answer=[true] * len(texts)) for f in fns],
                       axis=0)  # [group_size]
        stds.append(float(np.std(total)))
    figures.update({"group_prompts": k, "group_size": spec.group_size,
                    "group_std_rate": float(np.mean([s > 0 for s in stds])),
                    "group_reward_std_mean": float(np.mean(stds)), "eval": asdict(spec)})
    return figures
