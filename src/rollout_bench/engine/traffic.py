"""The bytes a decode step must read from device memory: the weights its forward multiplies by, and every
row's K/V. Over the decode's wall time they give its achieved bandwidth (gpt-fast's measure), which the
flex backend sets against the device's copy rate. Activations, logits and the sampler's temporaries are
left out: at the batch sizes that matter they are under 1% of the weights (Qwen3-4B's float32 logits at
B = 64 are 39 MB a step against 8 GB of weights)."""
import torch
from torch import nn


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the parameters one decode step reads whole: all but embedding tables, of which a step
    reads a row per token (a table tied to the output head is read whole there, and counted once)."""
    head = model.get_output_embeddings()
    head_weight = None if head is None else head.weight
    rows_only = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding) and m.weight is not head_weight}
    return sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in rows_only)


def kv_token_bytes(kv_layers: list[tuple[torch.Tensor, torch.Tensor]], windows: list[int | None]) -> dict:
    """sliding window (None: full attention) -> K and V bytes of one cached token, summed over the layers that
    attend with it. kv_layers[i] = layer i's (K, V) pool views [1, H, slots, D]; a KV-sharing layer reads its
    store layer's pool, so it counts too: it reads those bytes again."""
    assert len(kv_layers) == len(windows), (len(kv_layers), len(windows))
    out: dict = {}
    for (k, v), window in zip(kv_layers, windows):
        per_token = (k.shape[1] * k.shape[3] * k.element_size() + v.shape[1] * v.shape[3] * v.element_size())
        out[window] = out.get(window, 0) + per_token
    return out


def keys_read(context: int, steps: int, window: int | None) -> int:
    """Keys one row attends over in `steps` decode steps from `context` cached tokens (the fed token
    included): sum over k < steps of min(context + k, window)."""
    assert context >= 1 and steps >= 0, (context, steps)
    if window is None:
        return steps * context + steps * (steps - 1) // 2
    below = max(0, min(steps, window - context))  # steps whose context is still shorter than the window
    return below * context + below * (below - 1) // 2 + (steps - below) * window


def kv_read_bytes(per_window: dict, contexts: list[int], steps: int) -> int:
    """K/V bytes the rows with these contexts read over `steps` decode steps."""
    return sum(per_token * sum(keys_read(c, steps, window) for c in contexts)
               for window, per_token in per_window.items())
