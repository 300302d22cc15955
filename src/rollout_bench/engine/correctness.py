"""The engine against HF on the same weights: the correctness check before any speed.

First-token logits within a tolerance for the dtype, then each greedy token judged against HF's
logits on the engine's own continuation (teacher forcing), on prompts around page boundaries. The
flex backend's gate, the GPU self-check and the logprob-gap study all compare through here.
"""
import torch

from ..workload import Sampling
from .logits import lm_logits

# Largest first-token |logit| difference to HF, and the top-2 margin under which a greedy
# disagreement counts as an argmax tie of the reference rather than an error.
LOGIT_TOL = {"float32": 1e-3, "bfloat16": 0.25, "float16": 0.05}


@torch.no_grad()
def reference_logits(reference, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
    """HF's logits for ids [1, T] at positions start.. -> [T - start, V] float32, projected like the
    engine's (fp32 output, no rounding to bf16), so a comparison sees the two forward passes and not
    two roundings; then the model's final softcap (Gemma), as HF's head applies it. `reference`: an
    HF CausalLM, PEFT-wrapped (adapter unmerged) or not."""
    lm = reference.get_base_model() if hasattr(reference, "get_base_model") else reference
    h = lm.model(input_ids=ids).last_hidden_state[0, start:]  # [T - start, hidden], after the final norm
    return lm_logits(lm, h)


def gate_prompts(vocab: int, page_size: int, seed: int = 0) -> list[list[int]]:
    """Four prompts around page boundaries (one page, +-1, and a longer one), seeded random tokens."""
    g = torch.Generator().manual_seed(seed)
    lens = [page_size - 1, page_size + 1, 2 * page_size + page_size // 2, 7]
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]


@torch.no_grad()
def check(engine, reference, prompts: list[list[int]], new_tokens: int, tol: float) -> dict:
    """Engine vs HF `reference` on the same weights: first-token logits, then greedy tokens judged
    step by step against the reference's logits on the engine's own continuation (teacher forcing),
    so one near-tie cannot cascade into a whole divergent tail."""
    dev = reference.device
    got = engine.prompt_logits(prompts)
    ref = torch.stack([reference_logits(reference, torch.tensor([p], device=dev))[-1] for p in prompts])
    diff = (got - ref).abs().max().item()
    outs = engine.generate(prompts, Sampling(), new_tokens, ignore_eos=True)
    exact, ties, mismatches = 0, [], []
    for i, (p, out) in enumerate(zip(prompts, outs)):
        toks = torch.tensor(out.token_ids, device=dev)
        logits = reference_logits(reference, torch.tensor([p + out.token_ids], device=dev))[len(p) - 1:-1]  # [T, V]
        top2 = logits.topk(2, -1).values  # [T, 2]
        chosen = logits.gather(1, toks[:, None])[:, 0]
        for t in range(len(toks)):
            gap = (top2[t, 0] - chosen[t]).item()
            if gap <= 0:
                exact += 1
            elif gap <= tol:
                ties.append({"prompt": i, "step": t, "gap": round(gap, 5),
                             "ref_top2_margin": round((top2[t, 0] - top2[t, 1]).item(), 5)})
            else:
                mismatches.append({"prompt": i, "step": t, "gap": round(gap, 5)})
    n = sum(len(o.token_ids) for o in outs)
    return {"passed": diff <= tol and not mismatches, "max_abs_logit_diff": diff, "logit_tol": tol,
            "first_token_argmax_match": bool(torch.equal(got.argmax(-1), ref.argmax(-1))),
            "greedy_tokens": n, "greedy_exact": exact, "greedy_ties": ties, "greedy_mismatches": mismatches}
