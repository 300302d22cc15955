"""Llama-3.x layer pieces for the flex path (RoPE tables, KV and masks handled by the runner)."""
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from ..skinny_gemm import linear, module_linear
from .arch import Arch, LayerPlan


def qkv(attn, x, w_qkv=None):
    """x [N, T, hidden] -> q [N, T, Hq, D], k and v [N, T, Hkv, D]; one GEMM when w_qkv (fused.py) is given."""
    N, T, _ = x.shape
    D = attn.head_dim
    if w_qkv is None:
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    else:
        sizes = [attn.q_proj.weight.shape[0], attn.k_proj.weight.shape[0], attn.v_proj.weight.shape[0]]
        q, k, v = linear(x, w_qkv).split(sizes, -1)
    return q.view(N, T, -1, D), k.view(N, T, -1, D), v.view(N, T, -1, D)


def project_qkv(attn, x, w_qkv=None):
    """attn: an HF LlamaAttention -> q [N, Hq, T, D], k and v [N, Hkv, T, D]."""
    q, k, v = qkv(attn, x, w_qkv)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def pre_attention(layer, h, cos, sin, project_qkv, w_qkv=None):
    """Norm, q/k/v projections and RoPE. h [N, T, hidden] -> q [N, Hq, T, D], k and v [N, Hkv, T, D]."""
    q, k, v = project_qkv(layer.self_attn, layer.input_layernorm(h), w_qkv)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    return q, k, v


def post_attention(layer, h, o, w_gate_up=None, layer_input=None):
    """o_proj of the attention output o [N, Hq, T, D], residual, MLP (gate/up as one GEMM if fused)."""
    N, _, T, _ = o.shape
    h = h + module_linear(layer.self_attn.o_proj, o.transpose(1, 2).reshape(N, T, -1))
    x = layer.post_attention_layernorm(h)
    if w_gate_up is None:
        return h + layer.mlp(x)
    gate, up = linear(x, w_gate_up).chunk(2, -1)
    return h + module_linear(layer.mlp.down_proj, layer.mlp.act_fn(gate) * up)


def embed(lm, ids):
    return lm.model.embed_tokens(ids), None


def plan(lm) -> list[LayerPlan]:
    n_kv = lm.config.num_key_value_heads
    return [LayerPlan("default", layer.self_attn.head_dim, n_kv, layer.self_attn.scaling, None, i)
            for i, layer in enumerate(lm.model.layers)]


def rope(lm, pos):
    # cos/sin of position p are an outer product, so gathering rows of the table gives HF's values bit for bit
    cos, sin = lm.model.rotary_emb(lm.model.embed_tokens.weight[:1][None], pos)  # [1, S, D]
    return {"default": (cos[0], sin[0])}


ARCH = Arch(project_qkv, pre_attention, post_attention, embed, plan, rope)
