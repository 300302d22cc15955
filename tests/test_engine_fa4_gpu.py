"""FA4 prefill (flex_attention BACKEND='FLASH') against flex's Triton prefill on the same weights (issue 50 item 4):
Qwen3-4B's and Llama-3.2-3B's shapes at four layers, random bf16 weights, prompts over several of FA4's 256-row Q
tiles. First-token logits within the gate's tolerance for the dtype (correctness.LOGIT_TOL), the same greedy
continuation (a divergence only at a token HF float32 calls a tie within that tolerance), and the FA4 engine passes
the gate itself (correctness.check against HF, the flex backend's gate). Needs a Hopper or Blackwell GPU and
flash-attn-4 (envs/fa4.yaml); skipped with the guard's reason otherwise."""
import pytest
import torch

from rollout_bench.core.workload import Sampling
from rollout_bench.diagnostics import random_model
from rollout_bench.engine import Engine, EngineConfig, correctness, fa4

HEAD_DIM = 128  # both shapes'
WHY_NOT = fa4.unsupported("cuda", [HEAD_DIM]) if torch.cuda.is_available() else "no CUDA device"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(WHY_NOT is not None, reason=f"FA4 prefill cannot run: {WHY_NOT}")]
NEW_TOKENS = 16


def engine(model, setting: str) -> Engine:
    cfg = EngineConfig(max_batch=4, max_seq_len=2048, page_size=128, capture_all=False, fa4_prefill=setting)
    return Engine(model, cfg)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


@pytest.mark.parametrize("shape", ["qwen3-4b", "llama-3.2-3b"])
def test_fa4_prefill_matches_the_triton_prefill(shape):
    model = random_model.build(shape, seed=0, dtype=torch.bfloat16, device="cuda", num_hidden_layers=4,
                               tie_word_embeddings=False)
    vocab = model.config.vocab_size
    # 127..1500 tokens: several of FA4's 256-row Q tiles over 128-token pages, and one of exactly 8 pages
    ps = random_model.prompts(4, vocab, lo=127, hi=1500, seed=1) + [random_model.prompts(1, vocab, 1024, 1024, 2)[0]]
    flash, triton = engine(model, "on"), engine(model, "off")
    assert flash.runner.fa4_reason is None and flash.runner.q_block == fa4.FA4_Q_BLOCK
    assert triton.runner.fa4_reason == "fa4_prefill='off'"
    tol = correctness.LOGIT_TOL["bfloat16"]
    gap = (flash.prompt_logits(ps) - triton.prompt_logits(ps)).abs().max().item()  # [n, V] each
    assert gap <= tol, f"first-token logits differ by {gap:.4g} > {tol}"

    a = [o.token_ids for o in flash.generate(ps, Sampling(), NEW_TOKENS, ignore_eos=True)]
    b = [o.token_ids for o in triton.generate(ps, Sampling(), NEW_TOKENS, ignore_eos=True)]
    ref32 = random_model.build(shape, seed=0, dtype=torch.float32, device="cuda", num_hidden_layers=4,
                               tie_word_embeddings=False)
    for p, x, y in zip(ps, a, b):
        step = first_divergence(x, y)
        if step is None:
            continue
        ids = torch.tensor([p + x[:step]], device="cuda")
        logits = correctness.reference_logits(ref32, ids, start=ids.shape[1] - 1)[0]  # [V]
        assert (logits[x[step]] - logits[y[step]]).abs().item() <= tol, \
            f"greedy continuations part at step {step} on a token HF float32 does not call a tie"
    gated = correctness.check(flash, model, ps, NEW_TOKENS, tol, fp32_reference=ref32)
    assert gated["passed"], gated
