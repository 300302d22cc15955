"""flex_attention's Triton tiles, shrunk per head dim to fit the GPU's shared memory.

Inductor takes its flex tiles from a head-dim table. Past head dim 256 its forward default (BLOCK_M 64,
BLOCK_N 32, 3 stages) needs 256 KiB at head dim 512, which is Gemma-4's full-attention layers. An H100/H200
block can have 227 KiB, so the compile fails: "No valid triton configs ... Required: 262144 Hardware limit:
232448" (results/published/h200-2026-12-01-session4). The autotune's decode candidate BLOCK_N 128 x 2 stages
fails the same way at head dim 256. `fit` gives each layer's call options that fit: pipeline stages are
halved first, then BLOCK_N, then BLOCK_M.
"""
from functools import lru_cache

# Inductor's (Q tile, K/V tile, stages) where options leave them out. Past head dim 256 these defaults
# never fit on an H100-class GPU, so every call there gets explicit tiles. At or below 256, Inductor's
# per-GPU table is taken to fit, and only the tiles the options set are checked. The decode stages are
# the most any torch version defaults to (3), so that a 512-wide decode gets explicit stages too.
_DEFAULT_TILES = {"prefill": (64, 64, 3), "decode": (16, 64, 3)}
_WIDE_DEFAULT_TILES = {"prefill": (64, 32, 3), "decode": (16, 64, 3)}
WIDE = 256
_MIN_TILE = 16


def smem_bytes(block_m: int, block_n: int, stages: int, head_dim: int, elt: int) -> int:
    """One Q tile, plus a K and a V tile per pipeline stage: the count Triton reports for the flex forward
    (64 + 2 * 32 * 3 rows of 512 bf16 = 262,144 B)."""
    return (block_m + 2 * block_n * stages) * head_dim * elt


def _get(opts: dict, key: str, default: int) -> int:
    return int(opts.get(f"fwd_{key}", opts.get(key, default)))


@lru_cache(maxsize=256)
def _fit(items: tuple, kind: str, head_dim: int, elt: int, limit: int, q_tile: int) -> tuple:
    opts = dict(items)
    wide = head_dim > WIDE
    m0, n0, s0 = (_WIDE_DEFAULT_TILES if wide else _DEFAULT_TILES)[kind]
    m = _get(opts, "BLOCK_M", q_tile if kind == "decode" else m0)
    n, s = _get(opts, "BLOCK_N", n0), _get(opts, "num_stages", s0)
    if not wide and smem_bytes(m, n, s, head_dim, elt) <= limit:
        return items  # as asked: Inductor fills what they leave out
    while smem_bytes(m, n, s, head_dim, elt) > limit:
        if s > 1:
            s -= 1
        elif n > _MIN_TILE:
            n //= 2
        elif kind == "prefill" and m > _MIN_TILE:
            m //= 2
        else:
            raise ValueError(f"no flex {kind} tiles fit {limit} B of shared memory at head_dim {head_dim}")
    out = {k: v for k, v in opts.items() if k not in ("fwd_BLOCK_M", "fwd_BLOCK_N", "fwd_num_stages")}
    out.update(BLOCK_N=n, num_stages=s)
    if kind == "prefill":
        out["BLOCK_M"] = m
    return tuple(sorted(out.items()))


def fit(opts: dict | None, kind: str, head_dim: int, elt: int, limit: int, gqa: int = 1) -> dict | None:
    """Kernel options for one flex call of `kind` ('prefill' or 'decode') at this head dim, element size
    and shared-memory limit (bytes per block); None stays None where Inductor's defaults fit.

    gqa: query heads per KV head; the decode kernel's Q tile holds them (at least 16 rows).
    """
    assert kind in _DEFAULT_TILES, kind
    q_tile = max(_MIN_TILE, 1 << (gqa - 1).bit_length())
    out = dict(_fit(tuple(sorted((opts or {}).items())), kind, head_dim, elt, limit, q_tile))
    return out or None


def device_limit(device) -> int | None:
    """Shared memory one block may opt into on this CUDA device (None off CUDA: nothing to fit)."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(device).shared_memory_per_block_optin)
