"""The GRPO process's SDPA policy (grpo/attention_kernels.py): cuDNN's kernel off, the others free; on a GPU,
the trainer's masked attention backward then matches SDPA's math kernel (pytorch/pytorch#196678 gave NaN)."""
import pytest
import torch

from rollout_bench.grpo import attention_kernels


@pytest.fixture
def restore_sdpa():
    kept = attention_kernels.state()
    yield
    torch.backends.cuda.enable_cudnn_sdp(kept["cudnn"])


def test_apply_turns_cudnn_off_and_leaves_the_rest(restore_sdpa):
    torch.backends.cuda.enable_cudnn_sdp(True)
    rec = attention_kernels.apply()
    assert rec["sdpa"] == {"cudnn": False, "flash": True, "mem_efficient": True, "math": True}
    assert "196678" in rec["cudnn_off_because"]
    assert attention_kernels.state() == rec["sdpa"]


def padded_attention(dtype, device, seed):
    """A left-padded batch's causal attention, as the trainer's log-prob pass runs it: [B, H, S, D] and a bool mask."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, h, s, d = 4, 8, 96, 64
    q, k, v = (torch.randn(b, h, s, d, generator=g).to(device, dtype).requires_grad_() for _ in range(3))
    pad = torch.tensor([0, 7, 31, 60])  # left padding per row
    keep = torch.arange(s)[None, :] >= pad[:, None]  # [B, S]
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    mask = (causal[None] & keep[:, None, :]) | torch.eye(s, dtype=torch.bool)[None]  # a pad row sees itself
    return q, k, v, mask[:, None].to(device)  # [B, 1, S, S]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masked_backward_under_the_policy_matches_the_math_kernel(restore_sdpa, seed):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    attention_kernels.apply()
    grads = {}
    for name, kernels in (("policy", None), ("math", [SDPBackend.MATH])):
        q, k, v, mask = padded_attention(torch.bfloat16, "cuda", seed)
        with sdpa_kernel(kernels) if kernels else torch.enable_grad():
            out = sdpa(q, k, v, attn_mask=mask)
        out.float().square().sum().backward()
        grads[name] = [t.grad.float() for t in (q, k, v)]
    for got, ref in zip(grads["policy"], grads["math"]):
        assert bool(got.isfinite().all())
        assert float((got - ref).norm() / ref.norm()) < 2e-2  # bf16 operands
