"""Attention masks over the paged pool: mask_mods (document-causal, optionally a sliding window) and
the BlockMasks that list which KV blocks each query block visits.

A window W keeps keys with q - kv < W (HF's sliding_window_overlay), on top of causality. Block lists
only skip work: every block that is not wholly visible is listed as partial, so the mask_mod decides.
"""
import torch
from torch.nn.attention.flex_attention import BlockMask


# the mask_mods close over fixed buffers, so compiled code sees one mask_mod function per window
def prefill_mask_mod(doc_start: torch.Tensor, window: int | None):
    """Packed prompts: q_idx and kv_idx are packed positions; doc_start [Tp] per query."""
    if window is None:
        # document-causal through a per-query lookup only (no docs[kv_idx]), the form FA4 runs fast
        def prefill_mask(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (kv_idx >= doc_start[q_idx])

        return prefill_mask

    def prefill_window_mask(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx >= doc_start[q_idx]) & (q_idx - kv_idx < window)

    return prefill_window_mask


def decode_mask_mod(slot: torch.Tensor, pos: torch.Tensor, logical: torch.Tensor, P: int, window: int | None):
    """Row b's query at position pos[b] over the whole pool; logical [S+1, N] maps physical pages to
    the logical page of slot's sequence (-1 where the page is not its). q_idx is ignored: every query
    row of b is its one new token (a GQA group folded into the query axis, ModelRunner.attend)."""
    if window is None:
        def decode_mask(b, h, q_idx, kv_idx):
            page = logical[slot[b], kv_idx // P]  # logical page of this physical page in row b's sequence
            return (page >= 0) & (page * P + kv_idx % P <= pos[b])

        return decode_mask

    def decode_window_mask(b, h, q_idx, kv_idx):
        page = logical[slot[b], kv_idx // P]
        at = page * P + kv_idx % P  # the key's position in row b's sequence
        return (page >= 0) & (at <= pos[b]) & (pos[b] - at < window)

    return decode_window_mask


def prefill_block_mask(doc_start: torch.Tensor, q_block: int, kv_block: int, mask_mod, device,
                       window: int | None = None, full_lists: bool = False) -> BlockMask:
    """Block lists of the packed document-causal mask, built from doc_start [Tp] (non-decreasing).

    q block i sees kv blocks from its first row's document start (or window start, if later) to its
    last row: one contiguous range, all left as partial blocks (mask_mod is evaluated on each). Cheap,
    where create_block_mask would evaluate the mask over all Tp x Tp pairs. full_lists: also give empty full-block
    lists (no block is full, so the lists say the same): FA4's flex backend (BACKEND='FLASH', torch 2.11) refuses a
    mask without them ("Flash attention with block mask but without full blocks is not supported yet",
    results/published/h200-2026-12-06-prefill-fa4).
    """
    Tp = doc_start.numel()
    assert Tp % q_block == 0
    nq, nkv = Tp // q_block, -(-Tp // kv_block)
    first = torch.arange(nq) * q_block  # [nq]
    start = doc_start[first] if window is None else torch.maximum(doc_start[first], first - window + 1)
    lo = start // kv_block
    hi = (first + q_block - 1) // kv_block
    num = (hi - lo + 1).to(torch.int32).view(1, 1, nq)
    idx = (lo[:, None] + torch.arange(nkv)[None]).clamp(max=nkv - 1).to(torch.int32).view(1, 1, nq, nkv)
    full = (torch.zeros_like(num).to(device), torch.zeros_like(idx).to(device)) if full_lists else (None, None)
    return BlockMask.from_kv_blocks(num.to(device), idx.to(device), *full, BLOCK_SIZE=(q_block, kv_block),
                                    mask_mod=mask_mod, seq_lengths=(Tp, Tp), compute_q_blocks=False)


def decode_block_mask(table: torch.Tensor, pos: torch.Tensor, P: int, ones: torch.Tensor, mask_mod, kv_len: int,
                      window: int | None = None, q_len: int = 1,
                      split: bool = False) -> tuple[BlockMask, torch.Tensor]:
    """The physical BlockMask of b decode rows and the KV write addresses [b].

    table [b, W]: logical -> physical page of each row's sequence; pos [b]: the position written;
    ones [b, 1, 1] int32; q_len: query rows per head (<= P: one Q block), all of them the row's one
    new token. Static shapes only (it runs inside a captured CUDA graph).

    split: the decode kernel splits each row's K/V over several CTAs (SPLIT_KV > 1). Then every visible
    page is listed as partial and none as full: with full blocks, Inductor's flex-decoding kernel cuts
    the pool's whole length (KV_LEN, not the row's) into SPLIT_KV tiles and hands the full blocks out
    from the last split, so while a row's full pages fit in KV_LEN / SPLIT_KV they all land in the last
    CTA, its current page in the first, and the splits between idle; with partial blocks only, it cuts
    the row's own pages (torch 2.11 flex_decode.py.jinja, TILE_KV_OG). The price is the mask_mod on
    every key.
    """
    assert q_len <= P, (q_len, P)
    b, W = table.shape
    blk = pos // P  # [b] logical page being written
    last = table.gather(1, blk[:, None])  # [b, 1]
    addr = last[:, 0].long() * P + pos % P
    if split:
        # logical pages lo..blk hold the visible keys (lo = 0 without a window)
        lo = torch.zeros_like(blk) if window is None else (pos - window + 1).clamp(min=0) // P  # [b]
        col = torch.arange(W, device=table.device)[None]  # [1, W]
        idx = table.gather(1, (lo[:, None] + col).clamp(max=W - 1))  # [b, W]
        num = (blk - lo + 1).to(torch.int32).view(b, 1, 1)
        mask = BlockMask.from_kv_blocks(num, idx.view(b, 1, 1, W), BLOCK_SIZE=P, mask_mod=mask_mod,
                                        seq_lengths=(q_len, kv_len), compute_q_blocks=False)
        return mask, addr
    if window is None:
        # Full blocks: the pages before the current one (no mask_mod evaluated); partial block: the
        # current page. Both index tensors share one shape, as the decode kernel assumes.
        mask = BlockMask.from_kv_blocks(
            ones, last.expand(b, W).contiguous().view(b, 1, 1, W),
            blk.to(torch.int32).view(b, 1, 1), table.view(b, 1, 1, W),
            BLOCK_SIZE=P, mask_mod=mask_mod, seq_lengths=(q_len, kv_len), compute_q_blocks=False)
        return mask, addr
    # Logical page lo holds the window's first key: it and the current page are partial; the pages
    # strictly between lie wholly inside the window ((lo + 1) * P > pos - window + 1) and are full.
    lo = (pos - window + 1).clamp(min=0) // P  # [b]
    col = torch.arange(W, device=table.device)[None]  # [1, W]
    full_num = (blk - lo - 1).clamp(min=0).to(torch.int32).view(b, 1, 1)
    full_idx = table.gather(1, (lo[:, None] + 1 + col).clamp(max=W - 1))  # [b, W]
    part_num = (1 + (lo < blk).long()).to(torch.int32).view(b, 1, 1)
    part_idx = table.gather(1, torch.where(col == 1, lo[:, None], blk[:, None]))  # [b, W]: current page, then lo
    mask = BlockMask.from_kv_blocks(
        part_num, part_idx.view(b, 1, 1, W), full_num, full_idx.contiguous().view(b, 1, 1, W),
        BLOCK_SIZE=P, mask_mod=mask_mod, seq_lengths=(q_len, kv_len), compute_q_blocks=False)
    return mask, addr
