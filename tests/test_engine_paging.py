"""Page table book-keeping, the scheduler's preemption, and the decode/prefill masks: the physical
BlockMask's block lists agree with its mask_mod, and flex_attention agrees with the dense path."""
import pytest
import torch

from rollout_bench.diagnostics import random_model
from rollout_bench.engine import EngineConfig, masks
from rollout_bench.engine.model_runner import ModelRunner, decode_attention, decode_rows, dense_attention
from rollout_bench.engine.page_table import PageTable
from rollout_bench.engine.scheduler import Scheduler
from rollout_bench.engine.sequence import Sequence

P = 16


def seq(i, n_tokens, max_new=8):
    return Sequence(id=i, tokens=list(range(1, n_tokens + 1)), prompt_len=n_tokens, max_new_tokens=max_new,
                    temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, seed=i, eos_token_id=None)


def test_page_table_share_copy_on_write_and_free():
    pt = PageTable(num_pages=10, page_size=P, max_slots=4, max_pages_per_seq=4, device="cpu")
    a, b, c = pt.alloc_slot(), pt.alloc_slot(), pt.alloc_slot()
    assert pt.grow(a, 2 * P + 3)  # 3 pages
    assert pt.share(a, b, 2 * P) is None  # page-aligned: nothing to copy
    src, dst = pt.share(a, c, 2 * P + 3)  # partial last page copied
    assert src == pt.pages[a][2] and dst not in pt.pages[a]
    assert pt.pages[b] == pt.pages[a][:2] == pt.pages[c][:2]
    assert [pt.refs[p] for p in pt.pages[a]] == [3, 3, 1]
    pt.check()
    assert not pt.grow(b, 11 * P)  # more than the pool: refused, nothing changed
    pt.check()
    pt.free_slot(a)
    assert [pt.refs[p] for p in pt.pages[b]] == [2, 2]
    pt.free_slot(b), pt.free_slot(c)
    pt.check()
    assert pt.pages_free == 9 and pt.slots_free == 4
    pt.sync()
    assert torch.equal(pt.table_dev, pt.table) and torch.equal(pt.logical_dev, pt.logical)


def test_scheduler_preempts_newest_and_requeues_it():
    cfg = EngineConfig(max_batch=3, max_seq_len=64, page_size=P, decode_chunk=4, num_pages=7)
    pt = PageTable(7, P, 3, cfg.max_pages_per_seq, "cpu")
    sched = Scheduler(cfg, pt)
    seqs = [seq(i, P - 2, max_new=40) for i in range(3)]
    for s in seqs:
        sched.add([s])
    admitted = sched.admit()
    assert [g[0].id for g in admitted] == [0, 1, 2]  # 3 x (1 prompt page + 1 growth page) <= 6
    for s in seqs:
        s.append(7, 0.0)
    for _ in range(2 * P // 4):  # grow until pages run out
        preempted = sched.reserve(4)
        for s in sched.running:
            for _ in range(4):
                s.append(7, 0.0)
        if preempted:
            break
    assert preempted and preempted[0] is seqs[2], "the newest admission goes first"
    assert sched.waiting[0] == [seqs[2]] and seqs[2].slot == 0
    pt.check()


def set_two_rows(runner, bucket: int) -> list[int]:
    """Sequences of 20 and 40 tokens in two fresh slots, set as the first rows of a `bucket`-row decode."""
    pt = runner.pages
    slots = [pt.alloc_slot() for _ in range(2)]
    pt.grow(slots[0], 20), pt.grow(slots[1], 40)
    pt.sync()
    seqs = [seq(0, 20), seq(1, 40)]
    seqs[0].slot, seqs[1].slot = slots
    runner.set_rows(seqs, bucket)
    return slots


@pytest.fixture(scope="module")
def runner():
    model = random_model.build("qwen3-tiny", seed=0)
    return ModelRunner(model, EngineConfig(max_batch=4, max_seq_len=4 * P, page_size=P, num_pages=12))


@pytest.mark.parametrize("sms", [None, 132])
def test_decode_block_mask_consistent_with_mask_mod(runner, sms):
    """Off CUDA (sms None) the pages before the current one are full blocks and the current one partial.
    On a GPU of 132 SMs a 4-row bucket over 2 KV heads splits its K/V (SPLIT_KV 32), and then every page
    of the row is listed as partial, in its logical order, and none as full."""
    runner.sms = sms
    pt = runner.pages
    slots = [pt.alloc_slot() for _ in range(3)]
    lengths = [5, 2 * P + 1, 3 * P]  # last one starts a fresh page
    pt.grow(slots[0], lengths[0])
    pt.grow(slots[1], lengths[1])
    pt.share(slots[1], slots[2], 2 * P)
    pt.grow(slots[2], lengths[2])
    pt.sync()
    seqs = [seq(i, n) for i, n in enumerate(lengths)]
    for s, slot in zip(seqs, slots):
        s.slot = slot
    runner.set_rows(seqs, 4)  # row 3 is padding
    try:
        assert runner.kv_splits(4, 2) == (1 if sms is None else 32)
        mask, addr = runner.decode_inputs(4)
    finally:
        runner.sms = None
    dense = mask.mask_mod(torch.arange(4)[:, None], 0, 0, torch.arange(runner.kv_len)[None, :])  # [4, KV]
    assert (mask.full_kv_num_blocks is None) == (sms is not None)
    for row in range(4):
        pos = seqs[row].num_tokens - 1 if row < 3 else 0
        slot = slots[row] if row < 3 else 0
        on = dense[row].view(-1, P)  # [pages, P]
        listed = mask.kv_indices[row, 0, 0, :int(mask.kv_num_blocks[row, 0, 0])].tolist()
        if sms is None:
            full = mask.full_kv_indices[row, 0, 0, :int(mask.full_kv_num_blocks[row, 0, 0])].tolist()
            assert listed == [int(pt.table[slot, pos // P])]
            assert on[listed[0]].nonzero()[:, 0].tolist() == list(range(pos % P + 1))
        else:
            full = []
            assert listed == pt.table[slot, :pos // P + 1].tolist()
        assert set(on.any(1).nonzero()[:, 0].tolist()) <= set(full) | set(listed)
        assert all(on[p].all() for p in full), "a full block must be wholly unmasked"
        assert int(dense[row].sum()) == pos + 1
        assert int(addr[row]) == int(pt.table[slot, pos // P]) * P + pos % P
    for s in slots:
        pt.free_slot(s)
    pt.check()


def test_kv_splits_follow_inductors_rule_and_the_options():
    model = random_model.build("qwen3-tiny", seed=0)
    runner = ModelRunner(model, EngineConfig(max_batch=4, max_seq_len=4 * P, page_size=P, num_pages=12))
    assert runner.sms is None and runner.kv_splits(8, 8) == 1  # off CUDA: no kernel to split
    runner.sms = 132  # an H200
    # two CTAs an SM over the (row, KV head) pairs, none once the pairs outnumber the SMs
    assert [runner.kv_splits(b, 8) for b in (8, 16, 32, 64)] == [4, 2, 1, 1]
    assert runner.kv_splits(64, 1) == 4 and runner.kv_splits(256, 1) == 1  # Gemma-4 E2B's one KV head
    runner.decode_opts = {"BLOCK_N": 64, "SPLIT_KV": 3}
    assert runner.kv_splits(64, 8) == 3
    for main_kernel in ({"BACKEND": "TRITON"}, {"BACKEND": "FLASH"}, {"FORCE_USE_FLEX_ATTENTION": True}):
        runner.decode_opts = main_kernel  # flex's main kernel does not split
        assert runner.kv_splits(8, 8) == 1


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_agrees_with_dense_path(runner):
    """Eager flex_attention (slow on CPU, so only here) on the decode and the prefill masks."""
    pt = runner.pages
    slots = set_two_rows(runner, 2)
    mask, _ = runner.decode_inputs(2)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 1, 16, generator=g)
    k, v = (torch.randn(1, 2, runner.kv_len, 16, generator=g) for _ in range(2))
    torch.testing.assert_close(decode_attention(q, k, v, mask, 0.25, None), dense_attention(q, k, v, mask, 0.25))
    for s in slots:
        pt.free_slot(s)
    # prefill: documents of 5, 20 and 3 tokens packed into one 128-token row
    starts = torch.tensor([0] * 5 + [5] * 20 + [25] * 3)
    runner.doc_start[:128] = torch.arange(128)
    runner.doc_start[:28] = starts
    from torch.nn.attention.flex_attention import create_block_mask

    pmask = create_block_mask(runner.prefill_masks[None], 1, None, 128, 128, device="cpu", BLOCK_SIZE=(128, 128))
    q = torch.randn(1, 4, 128, 16, generator=g)
    k, v = (torch.randn(1, 2, 128, 16, generator=g) for _ in range(2))
    torch.testing.assert_close(decode_attention(q, k, v, pmask, 0.25, None), dense_attention(q, k, v, pmask, 0.25))


def test_decode_folds_exactly_the_non_power_of_two_gqa_ratios():
    for g in range(1, 40):
        rows = decode_rows(2 * g, 2, page_size=P)
        assert rows == (1 if g & (g - 1) == 0 or g > P else g), g
    assert decode_rows(24, 8, 128) == 3 and decode_rows(32, 8, 128) == 1 and decode_rows(8, 1, 128) == 1


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_folded_gqa_decode_agrees_with_unfolded():
    """GQA ratio 3 (6 query heads, 2 KV heads): the fold (3 query rows per KV head under a Q_LEN-3
    BlockMask), through eager flex_attention and through the dense path, equals flex's own GQA on the
    unfolded query, with and without a sliding window."""
    model = random_model.build("llama-tiny", seed=0, hidden_size=96, num_attention_heads=6, num_key_value_heads=2)
    runner = ModelRunner(model, EngineConfig(max_batch=4, max_seq_len=4 * P, page_size=P, num_pages=12))
    assert runner.q_rows == [3, 3] and runner.decode_keys == [(None, 3)]
    runner.decode_masks[24] = masks.decode_mask_mod(runner.slot, runner.pos, runner.pages.logical_dev, P, 24)
    pt = runner.pages
    slots = set_two_rows(runner, 3)  # row 2 is padding
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 6, 1, 16, generator=g)  # [b, Hq, 1, D]
    k, v = (torch.randn(1, 2, runner.kv_len, 16, generator=g) for _ in range(2))
    for window in (None, 24):
        folded, _ = runner.decode_inputs(3, window, 3)
        plain, _ = runner.decode_inputs(3, window)
        assert folded.shape[-2:] == (3, runner.kv_len)
        ref = decode_attention(q, k, v, plain, runner.plan[0].scale, None)  # [b, Hq, 1, D]
        for attn in (decode_attention, dense_attention):
            runner.attn_decode = attn
            torch.testing.assert_close(runner.attend(q, k, v, folded, 0), ref)
    for s in slots:
        pt.free_slot(s)


def test_prefill_block_mask_covers_document_causal_mask():
    from rollout_bench.engine.model_runner import prefill_block_mask

    doc_start = torch.arange(384)
    bounds = [(0, 5), (5, 150), (150, 151), (151, 300)]  # 300..383 are padding tokens
    for a, b in bounds:
        doc_start[a:b] = a

    def mask_mod(b, h, q, kv):
        return (kv <= q) & (kv >= doc_start[q])

    bm = prefill_block_mask(doc_start, 128, 64, mask_mod, "cpu")
    dense = mask_mod(0, 0, torch.arange(384)[:, None], torch.arange(384)[None, :])  # [Q, KV]
    listed = torch.zeros(3, 6, dtype=torch.bool)
    for i in range(3):
        listed[i, bm.kv_indices[0, 0, i, :int(bm.kv_num_blocks[0, 0, i])].long()] = True
    needed = dense.view(3, 128, 6, 64).any(3).any(1)  # [q blocks, kv blocks]
    assert not (needed & ~listed).any(), "a needed block is missing"
    assert dense.sum(1).min() >= 1  # every row, padding included, sees at least itself


def test_prefill_block_mask_with_empty_full_lists_attends_the_same():
    """full_lists (FA4's flex backend refuses a mask without full-block lists): empty lists, the same attention."""
    from torch.nn.attention.flex_attention import flex_attention

    from rollout_bench.engine.model_runner import prefill_block_mask

    doc_start = torch.arange(256)
    for a, b in [(0, 70), (70, 200), (200, 256)]:
        doc_start[a:b] = a

    def mask_mod(b, h, q, kv):
        return (kv <= q) & (kv >= doc_start[q])

    plain = prefill_block_mask(doc_start, 128, 64, mask_mod, "cpu")
    full = prefill_block_mask(doc_start, 128, 64, mask_mod, "cpu", full_lists=True)
    assert plain.full_kv_num_blocks is None and int(full.full_kv_num_blocks.sum()) == 0
    q, k, v = torch.randn(3, 1, 2, 256, 16).unbind(0)  # [1, H, T, D] each
    torch.testing.assert_close(flex_attention(q, k, v, block_mask=full), flex_attention(q, k, v, block_mask=plain))


def test_compiled_kv_write_touches_only_the_new_rows():
    """pre_attention_writing compiled (as on CUDA) writes the same K/V as eager, in place, in decode and prefill
    shapes and on a layer past the first (its pair a view at an offset), and its time does not grow with the
    pool: the same call on a pool 16x larger stays within a few times the small pool's (a compiled write that
    went over the whole pair, as index_copy_ into the K and V views did, takes ~16x)."""
    import time

    from rollout_bench.engine.model_runner import pre_attention_writing

    model = random_model.build("qwen3-tiny", seed=0)
    compiled = torch.compile(pre_attention_writing, dynamic=True)
    g = torch.Generator().manual_seed(0)
    shapes = ((False, torch.randn(1, 4, 64, generator=g), [0, 1, 2, 3], [96, 97, 98, 99]),
              (True, torch.randn(3, 1, 64, generator=g), [5, 17, 30], [20, 40, 70]))
    best = {}
    threads = torch.get_num_threads()
    for num_pages in (1024, 16384):  # the second layer's pair: 4 MB, then 67 MB
        runner = ModelRunner(model, EngineConfig(max_batch=4, max_seq_len=4 * P, page_size=P, num_pages=num_pages,
                                                 compile=False))
        layer, plan, kv, (w_qkv, _), _ = list(runner.layer_steps())[1]
        assert kv.storage_offset() > 0
        cos, sin = runner.rope[plan.rope]
        for rows_first, h, pos, addr in shapes:
            pos, addr = torch.tensor(pos), torch.tensor(addr)
            rope = (cos[pos][:, None], sin[pos][:, None]) if rows_first else (cos[pos][None], sin[pos][None])
            args = (runner.arch.pre_attention, layer, h, *rope, runner.project_qkv, w_qkv)
            ref = kv.clone()
            want = pre_attention_writing(*args, ref, addr, rows_first)
            with torch.no_grad():
                got = compiled(*args, kv, addr, rows_first)
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(kv, ref)
            assert kv[:, 0, :, addr].abs().sum() > 0
        walls = []
        torch.set_num_threads(1)  # the tiny GEMMs stall when two threads share an oversubscribed CPU
        try:
            for _ in range(7):  # the decode shape, the last of `shapes`
                t = time.perf_counter()
                with torch.no_grad():
                    compiled(*args, kv, addr, rows_first)
                walls.append(time.perf_counter() - t)
        finally:
            torch.set_num_threads(threads)
        best[num_pages] = min(walls)
    assert best[16384] < 4 * best[1024], best


def test_compiled_layers_greedy_match_hf():
    """The layer code compiled as on CUDA (pre-attention with its K/V write, post-attention; Inductor on the CPU),
    attention on the dense path (Inductor's CPU flex template does not compile here, torch 2.13): greedy equals
    HF's through prefill and decode."""
    from rollout_bench.core.workload import Sampling
    from rollout_bench.engine import Engine

    model = random_model.build("qwen3-tiny", seed=0, tie_word_embeddings=False)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 4096, (int(k),), generator=g).tolist() for k in torch.randint(3, 40, (5,), generator=g)]
    engine = Engine(model, EngineConfig(max_batch=8, max_seq_len=96, page_size=P, decode_chunk=4, decode_chunk_no_eos=4,
                                        num_pages=24, capture_all=False, compile=True, cuda_graphs=False))
    engine.runner.attn_decode = engine.runner.attn_prefill = dense_attention
    outs = engine.generate(prompts, Sampling(), 12, ignore_eos=True)
    with torch.no_grad():
        for p, o in zip(prompts, outs):
            ref = model.generate(torch.tensor([p]), max_new_tokens=12, min_new_tokens=12, do_sample=False,
                                 pad_token_id=0)[0, len(p):].tolist()
            assert o.token_ids == ref


def running_scheduler(remaining: list[int], cfg: EngineConfig, waiting: int = 0) -> Scheduler:
    """A scheduler whose running rows have these budgets left (prompts of 4 tokens, one token sampled), and a
    group of `waiting` sequences queued behind them."""
    sched = Scheduler(cfg, PageTable(2 + 2 * cfg.max_batch, P, cfg.max_batch, cfg.max_pages_per_seq, "cpu"))
    for i, r in enumerate(remaining):
        sched.add([seq(i, 4, max_new=r + 1)])
    sched.admit()
    for s in sched.running:
        s.append(7, 0.0)
    if waiting:
        sched.add([seq(100 + j, 4) for j in range(waiting)])
    return sched


def test_chunks_run_past_budgets_unless_finished_rows_would_idle_longer_than_a_sync():
    cfg = EngineConfig(max_batch=64, max_seq_len=128, page_size=P, decode_chunk_no_eos=16, decode_sync_row_steps=64)
    one_short = [1] + [40] * 7
    assert running_scheduler(one_short, cfg).chunk_len(64) == 16  # one row idles 15 steps: not worth a sync
    assert running_scheduler(one_short, cfg).chunk_len(5) == 5  # the caller's limit
    assert running_scheduler([3, 9], cfg).chunk_len(64) == 9  # the last rows: run to the longest
    # 60 rows end at step 2: running on would idle 60 x 14 row-steps
    assert running_scheduler([2] * 60 + [40] * 4, cfg).chunk_len(64) == 2
    # ... and where several budgets end, at the one that spares the most: 8 x 14 against 12 x 10
    assert running_scheduler([2] * 8 + [6] * 4 + [40] * 4, cfg).chunk_len(64) == 6
    free = EngineConfig(max_batch=64, max_seq_len=128, page_size=P, decode_chunk_no_eos=16, decode_sync_row_steps=0)
    assert running_scheduler(one_short, free).chunk_len(64) == 1  # a free sync: no row runs past its budget
    # a group of 3 waits for slots (64 slots, 63 rows): 2 rows must finish before it fits, the second at step 5
    assert running_scheduler([1, 5] + [30] * 61, cfg, waiting=3).chunk_len(64) == 5


def test_a_chunk_never_runs_a_row_past_max_seq_len():
    cfg = EngineConfig(max_batch=4, max_seq_len=24, page_size=P, decode_chunk_no_eos=16)
    sched = running_scheduler([2, 15], cfg)
    near_end = sched.running[0]
    near_end.tokens.extend([7] * 15)  # 20 tokens: 5 positions of room left (its budget, 2, fits in them)
    near_end.max_new_tokens += 15
    assert sched.room(near_end) == 5 and sched.chunk_len(64) == 5


def test_ragged_budgets_decode_the_same_tokens_in_fewer_chunks():
    """A trace's per-completion budgets under ignore_eos: chunks that run rows past their budget drop the extra
    tokens; what is kept (sampled at T = 1) is what chunks cut at every budget give."""
    from rollout_bench.core.workload import Sampling
    from rollout_bench.engine import Engine

    model = random_model.build("qwen3-tiny", seed=0, tie_word_embeddings=False)
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 4096, (int(k),), generator=g).tolist() for k in (5, 17, 9)]
    budgets = [int(b) for b in torch.randint(1, 30, (6,), generator=g)]  # 3 prompts x n = 2
    runs = {}
    for sync in (0, 256):
        engine = Engine(model, EngineConfig(max_batch=4, max_seq_len=64, page_size=P, decode_chunk_no_eos=16,
                                            decode_sync_row_steps=sync, num_pages=24, cuda_graphs=False))
        outs = engine.generate(prompts, Sampling(temperature=1.0, seed=3), budgets, n=2, ignore_eos=True)
        assert [len(o.token_ids) for o in outs] == budgets
        runs[sync] = ([(o.token_ids, o.logprobs) for o in outs], engine.timings["decode_chunks"])
        engine.runner.pages.check()
        assert engine.runner.pages.pages_free == 23  # every page back but the padding page
    (cut, cut_chunks), (ran_on, chunks) = runs[0], runs[256]
    assert [t for t, _ in ran_on] == [t for t, _ in cut]
    # the logprobs within float32's noise: rows past their budget change the batch, not the arithmetic
    assert max(abs(a - b) for (_, x), (_, y) in zip(ran_on, cut) for a, b in zip(x, y)) < 1e-5
    assert chunks < cut_chunks
