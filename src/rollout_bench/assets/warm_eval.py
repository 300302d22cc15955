"""How a warm-started model behaves on held-out prompts: what its card's gates read.

HF `generate` on the model directory (the simplest loader every backend shares); greedy for the
termination, format, accuracy and length figures, then temperature 1.0 with several samples per
prompt for the fraction of GRPO groups whose rewards differ (no spread, no advantage, no learning).
Scores use the project's reward functions (assets/rewards.py), exactly as GRPO training does.
"""
from dataclasses import asdict, dataclass

import numpy as np

from . import prompts as prompt_assets
from . import rewards


@dataclass(frozen=True)
class EvalSpec:
    max_new_tokens: int = 512
    group_prompts: int = 32  # prompts sampled at temperature 1.0
    group_size: int = 8  # samples per prompt (a GRPO group)
    batch_size: int = 64  # sequences per generate call; prompts sorted by length, so short batches stop early
    # new tokens per generate call: a row that has not ended continues in the next call, batched with the other
    # unfinished rows (a batch decodes until its longest row ends, so one looping T=1.0 sample kept its ended
    # neighbours decoding to max_new_tokens). A tiny CPU warm start's evaluation took 34 CPU s in calls of 64,
    # 36 in calls of 128 and 58 in one call (2026-12-01, a 2-core machine shared with another workload)
    chunk_tokens: int = 64
    seed: int = 3407


@dataclass(frozen=True)
class Completion:
    text: str  # decoded without special tokens, as GRPO's reward functions receive it
    n_tokens: int  # generated tokens, eos included
    ended: bool  # eos before max_new_tokens


def _generate(model, tok, prompts: list[str], spec: EvalSpec, n: int, sample: bool,
              autocast: bool = False) -> list[list[Completion]]:
    """n completions of each prompt, up to spec.max_new_tokens each, decoded spec.chunk_tokens at a time.
    autocast: bf16 autocast around fp32 weights (a model still in training)."""
    import contextlib

    import torch

    eos = tok.eos_token_id
    amp = torch.autocast(model.device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    ids = [prompt_assets.encode(tok, p) for p in prompts]
    ended: dict[tuple[int, int], list[int]] = {}  # (prompt, sample) -> its tokens, eos included
    # the first call makes each prompt's n samples (num_return_sequences); later calls continue each unfinished one
    live = [(i, None, []) for i in range(len(prompts))]  # (prompt, sample or None, tokens so far)
    left, k = spec.max_new_tokens, n
    while live and left > 0:
        step = min(spec.chunk_tokens, left)
        live.sort(key=lambda r: len(ids[r[0]]) + len(r[2]))  # similar lengths share a batch: less padding
        per_call = max(1, spec.batch_size // k)
        going = []
        for start in range(0, len(live), per_call):
            chunk = live[start:start + per_call]
            enc = tok.pad({"input_ids": [ids[i] + so_far for i, _, so_far in chunk]},
                          return_tensors="pt").to(model.device)
            with torch.no_grad(), amp:
                # use_cache: gradient checkpointing turns it off in the config of a model in training
                gen = model.generate(**enc, max_new_tokens=step, do_sample=sample, use_cache=True,
                                     num_return_sequences=k, eos_token_id=eos, pad_token_id=tok.pad_token_id,
                                     **({"temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {}))
            new = gen[:, enc["input_ids"].shape[1]:]  # [len(chunk) * k, <= step]
            for row, seq in enumerate(new.tolist()):
                i, j, so_far = chunk[row // k]
                j = row % k if j is None else j
                if eos in seq:
                    ended[i, j] = so_far + seq[:seq.index(eos) + 1]
                else:  # ran the whole step (pads only follow an eos)
                    going.append((i, j, so_far + seq))
        live, left, k = going, left - step, 1
    for i, j, so_far in live:
        ended[i, j] = so_far
    return [[Completion(tok.decode(t, skip_special_tokens=True), len(t), eos in t)
             for t in (ended[i, j] for j in range(n))] for i in range(len(prompts))]


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
    stds, right = [], []
    for group, true in zip(groups, answers[:k], strict=True):
        texts = [c.text for c in group]
        kw = dict(prompts=[None] * len(texts), completions=texts, answer=[true] * len(texts))
        # TRL's GRPO reward: the sum of the reward functions (unit weights)
        stds.append(float(np.std(np.sum([f(**kw) for f in fns], axis=0))))  # over the group_size samples
        right.append([x == rewards.EXACT_ANSWER for x in answer_fn(**kw)])
    # what GRPO can sharpen: the sampled accuracy below the greedy one, groups where some samples are right
    figures.update({"group_prompts": k, "group_size": spec.group_size,
                    "group_std_rate": float(np.mean([s > 0 for s in stds])),
                    "group_reward_std_mean": float(np.mean(stds)),
                    "sampled_accuracy": float(np.mean(right)),
                    "group_answer_spread_rate": float(np.mean([0 < sum(g) < len(g) for g in right])),
                    "eval": asdict(spec)})
    return figures
