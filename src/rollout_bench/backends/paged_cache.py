"""Whether transformers' continuous-batching paged KV cache can hold a model (transformers_cb, cb_sync,
and GRPO's transformers_cb rollouts all build it).

transformers 5.17's PagedAttentionCache reads one num_key_value_heads and one head_dim off the global
config and makes every layer's cache tensor that shape. A heterogeneous config (per-layer values, e.g.
Gemma-4: sliding layers head_dim 256, full-attention layers global_head_dim 512) refuses that global read
(AmbiguousGlobalPerLayerAttributeError at cache build); forcing it (allow_global_per_layer_attribute_access)
only moves the crash to the first full-attention layer's index_copy_ into a cache slot too narrow. So the
check runs on the config alone, before any weights load.
"""


def unsupported(model_dir: str) -> str | None:
    """Why the paged cache cannot hold `model_dir`'s KV, and what would change that; None when it can."""
    import transformers
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_dir).get_text_config()
    if not getattr(cfg, "is_heterogeneous", False):
        return None
    types = getattr(cfg, "layer_types", None) or ["layer"] * cfg.num_hidden_layers
    shapes: dict[tuple[int, int], list[str]] = {}  # (kv heads, head_dim) -> the layer types that have it
    for layer_type, layer in zip(types, cfg.per_layer_config):
        kinds = shapes.setdefault((layer.num_key_value_heads, layer.head_dim), [])
        if layer_type not in kinds:
            kinds.append(layer_type)
    if len(shapes) == 1:
        return None
    seen = "; ".join(f"{'/'.join(kinds)} layers head_dim {hd}, {kv} KV head(s)"
                     for (kv, hd), kinds in sorted(shapes.items(), key=lambda s: s[0][1]))
    return (f"transformers {transformers.__version__}'s continuous-batching PagedAttentionCache sizes every "
            f"layer's KV cache with the one num_key_value_heads and head_dim of the global config, and this "
            f"{cfg.model_type} model's layers differ ({seen}): the cache build raises "
            f"AmbiguousGlobalPerLayerAttributeError. It runs once transformers sizes the paged cache per layer; "
            f"the job re-runs when the transformers version changes")
