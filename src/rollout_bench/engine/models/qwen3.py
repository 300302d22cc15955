"""Qwen3 attention projections: Llama's, plus RMSNorm over each head of q and k before RoPE."""
from dataclasses import replace

from . import llama
from .llama import qkv


def project_qkv(attn, x, w_qkv=None):
    """attn: an HF Qwen3Attention; x [N, T, hidden] -> q [N, Hq, T, D], k and v [N, Hkv, T, D]."""
    q, k, v = qkv(attn, x, w_qkv)
    q, k = attn.q_norm(q), attn.k_norm(k)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


ARCH = replace(llama.ARCH, project_qkv=project_qkv)
