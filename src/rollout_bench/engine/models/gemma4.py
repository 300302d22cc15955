"""Gemma-4 (text) layer pieces for the flex path, each as HF's Gemma4Text* modules compute it.

Per head RMSNorm of q and k (learned scale) and of v (no scale), attention scale 1; RoPE after the
q/k norms, with cos/sin of the layer's type (sliding: default RoPE over head_dim; full: proportional
RoPE over the larger global head_dim). A KV-sharing layer (the last num_kv_shared_layers) projects
only q and attends to the K/V of the last earlier layer of its type that stores them. Four norms
around attention and MLP, then the per-layer input's gated residual and the layer scalar.
"""
from transformers.models.gemma4.modeling_gemma4 import apply_rotary_pos_emb

from .arch import Arch, LayerPlan


def project_qkv(attn, x, w_qkv=None):
    """attn: an HF Gemma4TextAttention; x [N, T, hidden] -> q [N, T, Hq, D] and k, v [N, T, Hkv, D],
    each normed per head; k and v are None on a KV-sharing layer."""
    assert w_qkv is None, "Gemma-4 projections are not fused"
    N, T, _ = x.shape
    D = attn.head_dim
    q = attn.q_norm(attn.q_proj(x).view(N, T, -1, D))
    if attn.is_kv_shared_layer:
        return q, None, None
    k = attn.k_proj(x).view(N, T, -1, D)
    v = k if attn.v_proj is None else attn.v_proj(x).view(N, T, -1, D)  # attention_k_eq_v: v is k before k_norm
    return q, attn.k_norm(k), attn.v_norm(v)


def pre_attention(layer, h, cos, sin, project_qkv, w_qkv=None):
    """h [N, T, hidden], cos and sin [N, T, D] -> q [N, Hq, T, D], k and v [N, Hkv, T, D] (None on a
    KV-sharing layer)."""
    q, k, v = project_qkv(layer.self_attn, layer.input_layernorm(h), w_qkv)
    q = apply_rotary_pos_emb(q, cos, sin, unsqueeze_dim=2).transpose(1, 2)
    if k is None:
        return q, None, None
    k = apply_rotary_pos_emb(k, cos, sin, unsqueeze_dim=2).transpose(1, 2)
    return q, k, v.transpose(1, 2)


def post_attention(layer, h, o, w_gate_up=None, layer_input=None):
    """h [N, T, hidden], attention output o [N, Hq, T, D], layer_input [N, T, Dp] or None -> h."""
    assert w_gate_up is None, "Gemma-4 projections are not fused"
    N, _, T, _ = o.shape
    h = h + layer.post_attention_layernorm(layer.self_attn.o_proj(o.transpose(1, 2).reshape(N, T, -1)))
    h = h + layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(h)))
    if layer_input is not None:
        gate = layer.act_fn(layer.per_layer_input_gate(h)) * layer_input  # [N, T, Dp]
        h = h + layer.post_per_layer_input_norm(layer.per_layer_projection(gate))
    return h * layer.layer_scalar


def embed(lm, ids):
    """ids [N, T] -> scaled embeddings [N, T, hidden] and per-layer inputs [N, T, L, Dp] (or None)."""
    m = lm.model
    h = m.embed_tokens(ids)
    if not m.hidden_size_per_layer_input:
        return h, None
    return h, m.project_per_layer_inputs(h, m.get_per_layer_inputs(ids, None))


def plan(lm) -> list[LayerPlan]:
    cfg, layers = lm.config, lm.model.layers
    assert not cfg.enable_moe_block, "flex engine: Gemma-4 MoE blocks are not supported"
    assert cfg.use_bidirectional_attention is None, "flex engine: Gemma-4 runs causal attention only"
    # HF hands a KV-sharing layer the K/V of the store layer of its type (store_full_length_kv)
    store = {layer.self_attn.layer_type: i for i, layer in enumerate(layers) if layer.self_attn.store_full_length_kv}
    out = []
    for i, layer in enumerate(layers):
        a = layer.self_attn
        src = store[a.layer_type] if a.is_kv_shared_layer else i
        k_proj = layers[src].self_attn.k_proj
        assert layers[src].self_attn.head_dim == a.head_dim and src <= i
        out.append(LayerPlan(a.layer_type, a.head_dim, k_proj.out_features // a.head_dim, a.scaling,
                             a.sliding_window, src))
    return out


def rope(lm, pos):
    x = lm.model.embed_tokens.weight[:1][None]  # its dtype is the tables' dtype, as in HF's forward
    return {t: tuple(c[0] for c in lm.model.rotary_emb(x, pos, t)) for t in sorted(lm.model.unique_layer_types)}


ARCH = Arch(project_qkv, pre_attention, post_attention, embed, plan, rope)
