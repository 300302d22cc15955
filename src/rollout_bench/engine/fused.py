"""Fused projections: each layer's q/k/v weights, and its gate/up weights, laid out as one tensor.

A decode step then runs one GEMM for q/k/v and one for gate/up instead of five: at a batch of
8-64 rows the small k/v GEMMs are launch- and latency-bound. The modules keep working: their
weights become row views of the fused tensor (values unchanged), so a LoRA refresh writing a
module's weight in place writes the fused tensor too.
"""
import torch
from torch import nn


def fuse_rows(mods: list[nn.Linear]) -> torch.Tensor:
    """Concatenate the weights of `mods` along the output rows; rebind each to its row view."""
    assert all(isinstance(m, nn.Linear) and m.bias is None for m in mods), "fusion needs bias-free Linear"
    fused = torch.cat([m.weight.detach() for m in mods])  # [sum(out), in]
    start = 0
    for m in mods:
        n = m.weight.shape[0]
        m.weight = nn.Parameter(fused[start:start + n], requires_grad=False)
        start += n
    return fused


def fuse_layers(layers) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """[(qkv [Hq*D + 2*Hkv*D, hidden], gate_up [2*I, hidden])] per decoder layer."""
    out = []
    for layer in layers:
        a, m = layer.self_attn, layer.mlp
        out.append((fuse_rows([a.q_proj, a.k_proj, a.v_proj]), fuse_rows([m.gate_proj, m.up_proj])))
    return out


def fusable(layers) -> bool:
    """Plain bias-free Linear projections (a PEFT LoRA wrapper is not fused, nor a layer without its own
    k/v projections: Gemma-4's KV-sharing layers)."""
    mods = [getattr(layer.self_attn, n, None) for layer in layers for n in ("q_proj", "k_proj", "v_proj")]
    mods += [getattr(layer.mlp, n, None) for layer in layers for n in ("gate_proj", "up_proj")]
    return all(type(m) is nn.Linear and m.bias is None for m in mods)
