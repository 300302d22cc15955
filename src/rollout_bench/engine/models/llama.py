"""Llama-3.x attention projections: q, k, v for the flex path (RoPE and KV handled by the runner)."""
import torch.nn.functional as F


def qkv(attn, x, w_qkv=None):
    """x [N, T, hidden] -> q [N, T, Hq, D], k and v [N, T, Hkv, D]; one GEMM when w_qkv (fused.py) is given."""
    N, T, _ = x.shape
    D = attn.head_dim
    if w_qkv is None:
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    else:
        sizes = [attn.q_proj.weight.shape[0], attn.k_proj.weight.shape[0], attn.v_proj.weight.shape[0]]
        q, k, v = F.linear(x, w_qkv).split(sizes, -1)
    return q.view(N, T, -1, D), k.view(N, T, -1, D), v.view(N, T, -1, D)


def project_qkv(attn, x, w_qkv=None):
    """attn: an HF LlamaAttention -> q [N, Hq, T, D], k and v [N, Hkv, T, D]."""
    q, k, v = qkv(attn, x, w_qkv)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
