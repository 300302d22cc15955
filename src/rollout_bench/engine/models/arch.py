"""What the runner needs to know of an architecture: its layer pieces and a plan of its layers."""
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LayerPlan:
    """How the runner treats one decoder layer."""
    rope: str  # key of the layer's cos/sin tables (Gemma-4: one per layer type)
    head_dim: int
    kv_heads: int
    scale: float  # multiplier of q.k in the softmax
    window: int | None  # sliding window (keys with q - kv < window); None = all earlier keys
    kv_source: int  # the layer whose K/V it attends to: itself, or its store layer if it shares KV


@dataclass(frozen=True, slots=True)
class Arch:
    project_qkv: Callable  # (attn, x [N, T, hidden], w_qkv) -> q, k, v
    # (layer, h, cos, sin, project_qkv, w_qkv) -> q [N, Hq, T, D], k and v [N, Hkv, T, D] (None: KV-sharing layer)
    pre_attention: Callable
    post_attention: Callable  # (layer, h, o [N, Hq, T, D], w_gate_up, layer_input) -> h [N, T, hidden]
    embed: Callable  # (lm, ids [N, T]) -> h [N, T, hidden], per-layer inputs [N, T, L, Dp] or None
    plan: Callable  # lm -> [LayerPlan] per decoder layer
    rope: Callable  # (lm, pos [1, S]) -> {rope key: (cos [S, D], sin [S, D])}
