"""Token sampling on the device, free of host syncs so it runs inside a captured CUDA graph.

Randomness is a counter-based hash of (request seed, token position, token id), not a torch
generator: a request draws the same tokens whatever batch, bucket or preemption history it runs
in, and n completions of one prompt differ because their seeds are mixed with their index.
Sampling is the Gumbel-max trick over the kept candidates, so a draw is exact for the filtered
softmax and identical whether candidates come from torch.topk or from a full sort.
"""
from dataclasses import dataclass

import torch

M32 = 0xFFFFFFFF
_MUL = 0x45D9F3B  # < 2**27: x * _MUL stays inside int64 for any 32-bit x
_GOLDEN = 0x9E3779B1


def _mix32(x):
    """A 32-bit integer hash (bijective), on python ints or int64 tensors holding values < 2**32."""
    x = (((x >> 16) ^ x) * _MUL) & M32
    x = (((x >> 16) ^ x) * _MUL) & M32
    return (x >> 16) ^ x


def request_seed(seed: int, index: int) -> int:
    """Seed of the `index`-th completion of a request batch sampled with `seed`."""
    return _mix32((_mix32(seed & M32) + index * _GOLDEN) & M32)


def uniform(seeds: torch.Tensor, positions: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """seeds, positions [B] int64; token_ids [B, K] -> uniforms in (0, 1) [B, K] float32."""
    key = _mix32((seeds + positions * _GOLDEN) & M32)  # [B]
    bits = _mix32(key[:, None] ^ _mix32(token_ids.long()))  # [B, K]
    # (k + 0.5) / 2**24 is not exact in float32 for k >= 2**23 (it rounds to even); for k = 2**24 - 1 it
    # rounds to 1.0, where the Gumbel noise -log(-log(u)) is +inf and forces that token whatever its
    # logit: once in 2**24 (row, position, token) draws, ~2% of 90-token completions over a 4096-token
    # vocabulary without top-k. The clamp maps it to 1 - 2**-24 (exact) and leaves every other draw as it was.
    return (((bits >> 8).float() + 0.5) * (1.0 / (1 << 24))).clamp(max=1.0 - 2.0 ** -24)


@dataclass(slots=True)
class Params:
    """Per-row sampling parameters, device tensors [B] (views of the runner's static buffers)."""
    temperature: torch.Tensor  # float32; 0 = greedy
    top_k: torch.Tensor  # int64; 0 = off
    top_p: torch.Tensor  # float32
    min_p: torch.Tensor  # float32
    seed: torch.Tensor  # int64 < 2**32


def mode(rows, cap: int, vocab: int, temperature_path: bool = True) -> str:
    """'greedy' | 'temperature' | 'topk' | 'full' for rows of (temperature, top_k, top_p, min_p): the cheapest
    exact path. 'temperature' (where `temperature_path`): no row truncates (GRPO's sampling), so every token is a
    candidate and no sort is needed."""
    if all(t == 0 for t, *_ in rows):
        return "greedy"
    if temperature_path and all(k == 0 and p >= 1 and m == 0 for _, k, p, m in rows):
        return "temperature"
    if cap < vocab and all(0 < k <= cap for _, k, _, _ in rows):
        return "topk"
    return "full"


def sample_temperature(logits: torch.Tensor, temperature: torch.Tensor, seed: torch.Tensor,
                       positions: torch.Tensor):
    """The 'temperature' path of `sample`: Gumbel-max over the whole vocabulary in token order. The uniforms are
    keyed by token id, so a row draws the token the sorted path draws from the same logits, and the logprob is
    the policy's (nothing is truncated, so 'processed' is the same number). Elementwise over [B, V] and two row
    reductions: compiled, one pass over the logits (ModelRunner compiles it); eagerly, a dozen [B, V] int64
    temporaries for the hash. Tensors only (no Params), as torch.compile takes them: temperature, seed [B]."""
    greedy_row = temperature <= 0  # [B]
    temp = torch.where(greedy_row, torch.ones_like(temperature), temperature)
    scaled = logits / temp[:, None]  # [B, V]
    lse = torch.logsumexp(scaled, -1)  # [B]
    ids = torch.arange(scaled.shape[-1], device=scaled.device).expand_as(scaled)  # [B, V]
    gumbel = -torch.log(-torch.log(uniform(seed, positions, ids)))  # [B, V]
    tokens = (scaled + gumbel.masked_fill(greedy_row[:, None], 0.0)).argmax(-1)  # [B]
    lp = scaled.gather(1, tokens[:, None])[:, 0] - lse
    return tokens, lp


def sample(logits: torch.Tensor, p: Params, positions: torch.Tensor, how: str, cap: int,
           processed: bool = False):
    """logits [B, V] float32; positions [B]: index in the sequence of the token drawn.

    Returns tokens [B] int64 and logprobs [B] float32 = log_softmax(logits / T)[token] (T = 1 for
    greedy rows), the untruncated policy logprob; with `processed`, sampled rows instead get the
    logprob renormalised over the tokens top-k/top-p/min-p kept (the distribution actually drawn
    from, what vLLM returns under TRL's logprobs_mode="processed_logprobs"), which exceeds the
    policy's by -log(kept mass).
    """
    if how == "greedy":
        tokens = logits.argmax(-1)  # [B]
        lp = logits.gather(1, tokens[:, None])[:, 0] - torch.logsumexp(logits, -1)
        return tokens, lp
    if how == "temperature":
        return sample_temperature(logits, p.temperature, p.seed, positions)
    greedy_row = p.temperature <= 0  # [B]
    temp = torch.where(greedy_row, torch.ones_like(p.temperature), p.temperature)
    scaled = logits / temp[:, None]  # [B, V]
    lse = torch.logsumexp(scaled, -1)  # [B]
    if how == "topk":
        vals, idx = scaled.topk(min(cap, scaled.shape[-1]), -1)  # [B, K], sorted descending
    else:
        assert how == "full", how
        vals, idx = scaled.sort(-1, descending=True)  # [B, V]
    K = vals.shape[-1]
    rank = torch.arange(K, device=vals.device)  # [K]
    top_k = torch.where(p.top_k > 0, p.top_k, torch.full_like(p.top_k, K))
    keep = rank[None, :] < top_k[:, None]  # [B, K]
    # top-p over the top-k renormalised distribution (HF order); a token is kept while the mass
    # strictly before it is below top_p, so the most likely token always survives.
    probs = torch.softmax(vals.masked_fill(~keep, float("-inf")), -1)
    before = probs.cumsum(-1) - probs
    keep &= (before < p.top_p[:, None]) | (p.top_p[:, None] >= 1.0)
    # min-p: p_i >= min_p * p_max  <=>  scaled_i >= scaled_max + log(min_p)
    keep &= vals >= vals[:, :1] + torch.log(p.min_p)[:, None]
    gumbel = -torch.log(-torch.log(uniform(p.seed, positions, idx)))  # [B, K]
    choice = (vals + gumbel).masked_fill(~keep, float("-inf")).argmax(-1)  # [B]
    choice = torch.where(greedy_row, torch.zeros_like(choice), choice)
    tokens = idx.gather(1, choice[:, None])[:, 0]
    lp = vals.gather(1, choice[:, None])[:, 0] - lse
    if processed:
        kept_lse = torch.logsumexp(vals.masked_fill(~keep, float("-inf")), -1)  # [B]
        lp = torch.where(greedy_row, lp, lp + lse - kept_lse)
    return tokens, lp
