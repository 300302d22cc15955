"""The engine against HF on the same weights: the correctness check before any speed.

First-token logits within a tolerance for the dtype, then each greedy token judged against HF's
logits on the engine's own continuation (teacher forcing), on prompts around page boundaries. The
flex backend's gate, the GPU self-check and the logprob-gap study all compare through here.
"""
import torch

from ..core.workload import Sampling
from .logits import lm_logits

# Largest first-token |logit| difference to HF, and the top-2 margin under which a greedy
# disagreement counts as an argmax tie of the reference rather than an error.
LOGIT_TOL = {"float32": 1e-3, "bfloat16": 0.25, "float16": 0.05}
# A low-precision gate given an fp32 reference (check's fp32_reference) judges the engine against it,
# with LOGIT_TOL[dtype] + REF_ERROR_FACTOR x the HF reference's own error in that dtype. With a factor
# of 2 the gate is never stricter than the same-dtype comparison: moving both logits of a greedy gap
# by at most the reference's error moves the gap by at most twice that.
REF_ERROR_FACTOR = 2.0


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
def check(engine, reference, prompts: list[list[int]], new_tokens: int, tol: float, fp32_reference=None,
          factor: float = REF_ERROR_FACTOR) -> dict:
    """Engine vs HF `reference` on the same weights: first-token logits, then greedy tokens judged
    step by step against the reference's logits on the engine's own continuation (teacher forcing),
    so one near-tie cannot cascade into a whole divergent tail.

    fp32_reference: the same model in float32, for a gate of a low-precision engine. The engine is
    then judged against it, with tolerance tol + factor x the largest |logit| error of `reference`
    (HF in the engine's dtype) against it over the same positions: a model whose own bf16 forward is
    far from its fp32 forward (a deep random model amplifies roundings) cannot hold an engine to an
    absolute bf16 tolerance it fails itself. Where that error is as large as the logits' spread (the
    reference's argmax disagrees with fp32's), the low-precision gate says little; a float32 gate on
    the same shape is what checks the engine's logic."""
    dev = reference.device
    got = engine.prompt_logits(prompts)
    outs = engine.generate(prompts, Sampling(), new_tokens, ignore_eos=True)

    def first(model):  # [n, V]
        return torch.stack([reference_logits(model, torch.tensor([p], device=model.device))[-1].to(dev)
                            for p in prompts])

    def forced(model):  # per prompt [T, V]: the logits that chose each generated token
        return [reference_logits(model, torch.tensor([p + out.token_ids], device=model.device))[len(p) - 1:-1].to(dev)
                for p, out in zip(prompts, outs)]

    ref, ref_forced = first(reference), forced(reference)
    extra = {}
    if fp32_reference is not None:
        ref32, ref32_forced = first(fp32_reference), forced(fp32_reference)
        ref_err = max([(ref - ref32).abs().max().item()] + [(a - b).abs().max().item()
                                                            for a, b in zip(ref_forced, ref32_forced)])
        extra = {"reference": "float32", "base_logit_tol": tol, "reference_error": ref_err,
                 "reference_argmax_match": bool(torch.equal(ref.argmax(-1), ref32.argmax(-1))),
                 "same_dtype_max_abs_logit_diff": (got - ref).abs().max().item()}
        tol = tol + factor * ref_err
        ref, ref_forced = ref32, ref32_forced
    diff = (got - ref).abs().max().item()
    exact, ties, mismatches = 0, [], []
    for i, (out, logits) in enumerate(zip(outs, ref_forced)):
        toks = torch.tensor(out.token_ids, device=dev)
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
            "greedy_tokens": n, "greedy_exact": exact, "greedy_ties": ties, "greedy_mismatches": mismatches,
            **extra}
