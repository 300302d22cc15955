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
# Largest |logprob| difference of a token to the reference's before the judge widens it by HF's own error in the
# dtype (judge's `factor`): a logprob is a logit minus the row's logsumexp, both accumulated in float32 by engine
# and reference alike, so what is left for the engine's own arithmetic is small; the dtype's rounding of weights
# and activations is what HF's own error in that dtype measures on the same tokens.
LOGPROB_TOL = {"float32": 1e-3, "bfloat16": 0.02, "float16": 0.02}
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
    got = engine.prompt_logits(prompts)
    outs = engine.generate(prompts, Sampling(), new_tokens, ignore_eos=True)
    return judge(reference, prompts, [o.token_ids for o in outs], tol, fp32_reference, factor, first_logits=got)


@torch.no_grad()
def judge(reference, prompts: list[list[int]], continuations: list[list[int]], tol: float, fp32_reference=None,
          factor: float = REF_ERROR_FACTOR, first_logits: torch.Tensor | None = None,
          logprobs: list[list[float]] | None = None, logprob_tol: float | None = None,
          sampled_at: float | None = None) -> dict:
    """Greedy continuations an engine produced (one per prompt), judged token by token against the reference's
    logits on those same tokens (teacher forcing): a token that is not the reference's argmax fails unless the
    reference's own gap to it is within the tolerance (an argmax tie), as `check` describes; first_logits [n, V],
    the engine's logits of each prompt's first token, are held to the tolerance too where given.

    logprobs: the engine's log_softmax of each token, where given. A token whose logprob is further from the
    reference's than the tolerance fails too (what random weights leave of the check where their argmax hardly
    depends on the context: a row that reads the wrong K/V keeps its argmax, not its logprob). The tolerance is
    the one of the logits, and in a low-precision job it grows the same way, by `factor` x HF's own logprob error
    in that dtype on the same tokens. The result names the first failing token (`first_mismatch`: prompt, step,
    gap or logprob error), None when every token passed.

    logprob_tol: the logprob tolerance before that widening (LOGPROB_TOL[dtype]); `tol` where not given.
    sampled_at: the temperature the continuations were sampled at. A sampled token has no argmax to match: each is
    judged by its logprob alone, against the reference's log_softmax(logits / T), HF's own error taken at T too;
    `greedy_exact` is then None (no token is an argmax match or a tie) and `logprobs` are required."""
    assert sampled_at is None or (sampled_at > 0 and logprobs is not None), "a sampled round is judged by logprobs"
    dev = reference.device
    scale = 1.0 if sampled_at is None else float(sampled_at)

    # logits from the prompt's last position only: a long prompt's full [T, V] float32 logits (8k tokens x a 152k
    # vocabulary: 5 GB) would be made to keep one row
    def first(model):  # [n, V]
        return torch.stack([reference_logits(model, torch.tensor([p], device=model.device), len(p) - 1)[-1].to(dev)
                            for p in prompts])

    def forced(model):  # per prompt [T, V]: the logits that chose each generated token
        return [reference_logits(model, torch.tensor([p + list(c)], device=model.device), len(p) - 1)[:-1].to(dev)
                for p, c in zip(prompts, continuations)]

    def token_lps(forced_logits):  # per prompt [T]: log_softmax(logits / T) of each generated token
        return [(lg.gather(1, torch.tensor([list(c)], device=dev).T)[:, 0] - torch.logsumexp(lg, -1))
                for lg, c in ((lg / scale, c) for lg, c in zip(forced_logits, continuations))]

    need_first = first_logits is not None
    ref, ref_forced = first(reference) if need_first else None, forced(reference)
    extra, lp_tol = {}, tol if logprob_tol is None else logprob_tol
    base_lp_tol = lp_tol
    ref_lps = token_lps(ref_forced) if logprobs is not None else None
    if fp32_reference is not None:
        ref32, ref32_forced = first(fp32_reference) if need_first else None, forced(fp32_reference)
        errs = [(a - b).abs().max().item() for a, b in zip(ref_forced, ref32_forced)]
        if need_first:
            errs.append((ref - ref32).abs().max().item())
        ref_err = max(errs)
        extra = {"reference": "float32", "base_logit_tol": tol, "reference_error": ref_err}
        if need_first:
            extra.update(reference_argmax_match=bool(torch.equal(ref.argmax(-1), ref32.argmax(-1))),
                         same_dtype_max_abs_logit_diff=(first_logits - ref).abs().max().item())
        if logprobs is not None:
            ref32_lps = token_lps(ref32_forced)
            lp_err = max((a - b).abs().max().item() for a, b in zip(ref_lps, ref32_lps))
            extra["reference_logprob_error"] = lp_err
            lp_tol = base_lp_tol + factor * lp_err
            ref_lps = ref32_lps  # the judge's, as its logits are
        tol = tol + factor * ref_err
        ref, ref_forced = ref32, ref32_forced
    exact, ties, mismatches, lp_max = 0, [], [], 0.0
    for i, (cont, logits) in enumerate(zip(continuations, ref_forced)):
        toks = torch.tensor(list(cont), device=dev)
        top2 = logits.topk(2, -1).values  # [T, 2]
        chosen = logits.gather(1, toks[:, None])[:, 0]
        lp_errs = (torch.tensor(logprobs[i], device=dev) - ref_lps[i]).abs() if ref_lps is not None else None
        for t in range(len(toks)):
            gap = (top2[t, 0] - chosen[t]).item()
            lp_err = lp_errs[t].item() if lp_errs is not None else 0.0
            lp_max = max(lp_max, lp_err)
            if sampled_at is not None:
                if lp_err > lp_tol:
                    mismatches.append({"prompt": i, "step": t, "logprob_error": round(lp_err, 5)})
            elif gap > tol:
                mismatches.append({"prompt": i, "step": t, "gap": round(gap, 5)})
            elif lp_err > lp_tol:
                mismatches.append({"prompt": i, "step": t, "gap": round(max(gap, 0.0), 5),
                                   "logprob_error": round(lp_err, 5)})
            elif gap <= 0:
                exact += 1
            else:
                ties.append({"prompt": i, "step": t, "gap": round(gap, 5),
                             "ref_top2_margin": round((top2[t, 0] - top2[t, 1]).item(), 5)})
    first_mismatch = min(mismatches, key=lambda m: (m["step"], m["prompt"])) if mismatches else None
    out = {"greedy_tokens": sum(len(c) for c in continuations),
           "greedy_exact": None if sampled_at is not None else exact, "greedy_ties": ties,
           "greedy_mismatches": mismatches, "first_mismatch": first_mismatch, "logit_tol": tol}
    if logprobs is not None:
        out.update(max_logprob_error=lp_max, logprob_tol=lp_tol)
    passed = not mismatches
    if need_first:
        diff = (first_logits - ref).abs().max().item()
        out.update(max_abs_logit_diff=diff, first_token_argmax_match=bool(torch.equal(first_logits.argmax(-1),
                                                                                         ref.argmax(-1))))
        passed = passed and diff <= tol
    return {"passed": passed, **out, **extra}
