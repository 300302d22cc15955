"""Runs an HF Qwen3/Llama/Gemma-4 CausalLM over the paged KV cache with flex_attention.

The HF decoder layers are walked here: norms, MLP and projections are the HF modules themselves
(so PEFT-wrapped projections work too); only attention is replaced (models/ + flex_attention).
models/ gives each architecture's layer pieces and a plan of its layers (RoPE table, head dim,
sliding window, which layer's K/V a layer reads); the walk below follows the plan.
Prefill packs every prompt into one row with a document-causal mask and writes K/V into the
pages; decode attends from each row to the whole pool through a physical BlockMask built from the
page table (a GQA group whose size is not a power of two folded into the query axis: ModelRunner.attend).
On CUDA the decode step of each batch bucket is captured as one CUDA graph that embeds, runs all
layers, samples and feeds the sampled token back, so a chunk of decode steps is a chunk of graph
replays with no host work in between.
"""
import time

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from . import fa4, fused, masks, models, sampler, skinny_gemm, smem
from .config import EngineConfig
from .kv_cache import KVCache
from .logits import lm_logits
from .lora import causal_lm
from .masks import prefill_block_mask
from .page_table import PageTable
from .sequence import Sequence


def pre_attention_writing(pre, layer, h, cos, sin, project_qkv, w_qkv, kv, addr, rows_first: bool):
    """arch.pre_attention (norm, projections, RoPE), then the layer's new K/V written into its pages: kv
    [2, 1, Hkv, N*P, D] at addr [n]; none for a KV-sharing layer (k None). rows_first: decode's k [b, Hkv, 1, D]
    (one token a row), else prefill's [1, Hkv, T, D]. One index_put on the whole K/V pair: compiled, Inductor
    writes just the new rows, in place, in one kernel (checked on CPU, torch 2.13). Written
    through kv[0] and kv[1] (index_copy_ into the K and V views), the compiled code went over the whole pair
    each call (a 32 MB pair: 3.9-20 ms against 0.14 ms), which is why the write used to stay outside the
    compiled code, as two index_copy kernels a layer: 0.20 ms of the 4B's 4.21 ms step at B = 8
    (h200-2026-12-03-session14). In this form the 4B's step fell from 4.11 to 3.97 ms at B = 8 and from 5.23
    to 5.09 ms at B = 64, one kernel a layer fewer (h200-2026-12-03-session15). Nothing in here may
    read kv after the write: Inductor would then copy the pair instead of writing in place."""
    q, k, v = pre(layer, h, cos, sin, project_qkv, w_qkv)
    if k is not None:
        new = torch.stack((k, v))  # [2, N, Hkv, T, D]
        kv[:, :, :, addr] = new.transpose(1, 3) if rows_first else new  # [2, 1, Hkv, n, D]
    return q, k, v


def dense_attention(q, k, v, block_mask, scale, kernel_options=None):
    """SDPA under the BlockMask's mask_mod, evaluated by broadcasting: the uncompiled (CPU) path.

    Eager flex_attention costs ~0.1 s a call on CPU and materialises the scores anyway; this checks
    the same masks, not the block lists (tests/test_engine_paging.py checks those).
    """
    N, T, S, dev = q.shape[0], q.shape[2], k.shape[2], q.device
    mask = block_mask.mask_mod(torch.arange(N, device=dev)[:, None, None, None], 0,
                               torch.arange(T, device=dev)[None, None, :, None],
                               torch.arange(S, device=dev)[None, None, None, :])  # [N, 1, T, S]
    return F.scaled_dot_product_attention(q, k.expand(N, -1, -1, -1), v.expand(N, -1, -1, -1), attn_mask=mask,
                                          scale=scale, enable_gqa=True)


def decode_attention(q, k, v, block_mask, scale, kernel_options):
    """q [B, Hq, 1, D] (or [B, Hkv, G, D], folded) over the pool k, v [1, Hkv, N*P, D]. Compiled per
    bucket with a static B: Inductor only picks its split-KV flex-decoding kernel for a static batch size."""
    return flex_attention(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True,
                          kernel_options=kernel_options)


def prefill_attention(q, k, v, block_mask, scale, kernel_options):
    """q [1, Hq, T, D] over the packed prompts' own k, v [1, Hkv, T, D]; compiled with dynamic T."""
    return flex_attention(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True,
                          kernel_options=kernel_options)


def decode_rows(hq: int, hkv: int, page_size: int) -> int:
    """Query rows per KV head in a decode flex call: G = hq // hkv where G is not a power of two (the
    group folded into the query axis, ModelRunner.attend), else 1 (flex's own GQA). Inductor's split-KV
    decode kernel takes only a power-of-two ratio (_use_flex_decoding); otherwise it falls back to its
    main kernel with one block per query head. The G rows must fit the BlockMask's one Q block (a page)."""
    g = hq // hkv
    return g if g & (g - 1) and g <= page_size else 1


_COMPILED = {}


def compiled(fn, dynamic: bool):
    """One torch.compile wrapper per function per process, so engines built later reuse its graphs.
    Layers share them too: their parameters are graph inputs, not constants."""
    if fn not in _COMPILED:
        # one decode-attention graph per batch bucket (up to 20 for max_batch 256)
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 64))
        _COMPILED[fn] = torch.compile(fn, dynamic=dynamic)
    return _COMPILED[fn]


class ModelRunner:
    def __init__(self, model, cfg: EngineConfig, fuse: bool = False):
        """fuse: re-lay q/k/v and gate/up weights as fused tensors (fused.py); the caller decides,
        since it rebinds the model's parameters."""
        self.cfg = cfg
        lm = causal_lm(model)
        self.lm, self.layers = lm, lm.model.layers
        self.fused = fused.fuse_layers(self.layers) if fuse else [(None, None)] * len(self.layers)
        self.arch = models.arch(lm.config.model_type)
        self.project_qkv = self.arch.project_qkv
        self.plan = self.arch.plan(lm)
        # store layers whose fresh K/V a KV-sharing layer reads in a prefill
        self.kv_sources = {p.kv_source for i, p in enumerate(self.plan) if p.kv_source != i}
        self.windows = sorted({p.window for p in self.plan}, key=lambda w: -1 if w is None else w)
        self.q_rows = [decode_rows(lm.config.num_attention_heads, p.kv_heads, cfg.page_size) for p in self.plan]
        # one decode BlockMask per (window, query rows) in use; windows in the same order as above
        self.decode_keys = sorted({(p.window, g) for p, g in zip(self.plan, self.q_rows)},
                                  key=lambda k: (-1 if k[0] is None else k[0], k[1]))
        emb = lm.model.embed_tokens.weight
        self.device, self.dtype = emb.device, emb.dtype
        self.vocab = lm.lm_head.weight.shape[0]
        self.scale = self.plan[0].scale
        self.allocate_kv_cache()
        self.choose_kernels()
        self.build_rope_tables()
        self.allocate_decode_buffers()
        self.graphs: dict[tuple[int, str], torch.cuda.CUDAGraph] = {}
        self.pool = None
        self.capture_s = 0.0  # wall spent capturing graphs (their compiles included)

    def allocate_kv_cache(self) -> None:
        """The paged KV pool and its page table, as many pages as EngineConfig.pages gives; pages
        only for the layers that store K/V."""
        cfg = self.cfg
        shapes = [(p.kv_heads, p.head_dim) for p in self.plan]
        source = [p.kv_source for p in self.plan]
        P = self.P = cfg.page_size
        num_pages = cfg.pages(KVCache.bytes_per_page(shapes, source, P, self.dtype))
        self.pages = PageTable(num_pages, P, cfg.max_batch, cfg.max_pages_per_seq, self.device)
        self.kv = KVCache(shapes, source, num_pages, P, self.dtype, self.device)
        self.kv_len = num_pages * P

    def choose_kernels(self) -> None:
        """Compiled (CUDA) or eager layer pieces and attention, the graph buckets, flex kernel options."""
        cfg = self.cfg
        on_cuda = self.device.type == "cuda"
        self.graphs_on = cfg.cuda_graphs and on_cuda
        compile_on = on_cuda if cfg.compile is None else cfg.compile
        self.pre = compiled(pre_attention_writing, True) if compile_on else pre_attention_writing
        self.post = compiled(self.arch.post_attention, True) if compile_on else self.arch.post_attention
        self.attn_decode = compiled(decode_attention, False) if compile_on else dense_attention
        self.attn_prefill = compiled(prefill_attention, True) if compile_on else dense_attention
        # eager, the hash's [B, V] int64 temporaries and the sorted path's full sort cost a 256-row step ~4 ms
        self.sample_temperature = (compiled(sampler.sample_temperature, True) if compile_on
                                   else sampler.sample_temperature)
        # A batch of 1 would make torch.compile specialise a second set of graphs (sizes 0 and 1
        # are special to it): compiled, bucket 1 runs as bucket 2 with one padding row.
        self.buckets = tuple(b for b in cfg.buckets if not (compile_on and b == 1 and cfg.max_batch > 1))
        # per bucket where the config gives options by batch size (capture sets each bucket's)
        self.per_bucket = on_cuda and bool(cfg.decode_kernel_options_by_batch)
        self.use_decode_options(cfg.decode_kernel_options if on_cuda else {})
        self.sms = torch.cuda.get_device_properties(self.device).multi_processor_count if on_cuda else None
        head_dims = sorted({p.head_dim for p in self.plan})
        opts, self.q_block = fa4.prefill_options(cfg.fa4_prefill, self.device, cfg.prefill_kernel_options, head_dims)
        self.fa4_reason = fa4.why_not(cfg.fa4_prefill, self.device, head_dims)  # None: FA4 runs the prefill
        self.prefill_opts = (opts or None) if on_cuda else None
        # per layer, both option sets are shrunk to the block's shared memory (smem.fit) where a head dim needs it
        self.smem_limit = smem.device_limit(self.device)

    def use_decode_options(self, opts: dict | None) -> None:
        """flex's decode kernel options (decode_opts), and apart from them the decode GEMM tiles (GEMM_TILES:
        gemm_tiles, which `capture` makes active for buckets of at most skinny_gemm.MAX_ROWS rows)."""
        opts = dict(opts or {})
        self.gemm_tiles = skinny_gemm.parse_tiles(opts.pop("GEMM_TILES", {}))
        self.decode_opts = opts or None

    def decode_options(self) -> dict:
        """The decode options as use_decode_options takes them."""
        tiles = {skinny_gemm.shape_key(*shape): t.key() for shape, t in self.gemm_tiles.items()}
        return {**(self.decode_opts or {}), **({"GEMM_TILES": tiles} if tiles else {})}

    def layer_options(self, opts: dict | None, kind: str, plan) -> dict | None:
        """The flex kernel options of one layer's `kind` call: `opts`, with tiles that fit its head dim."""
        if self.smem_limit is None:
            return opts
        return smem.fit(opts, kind, plan.head_dim, self.dtype.itemsize, self.smem_limit,
                        self.lm.config.num_attention_heads // plan.kv_heads)

    def kernel_tiles(self) -> dict:
        """{kind: {head_dim: options}} where a layer's call differs from the options asked for (smem.fit)."""
        out = {}
        for kind, opts in (("prefill", self.prefill_opts), ("decode", self.decode_opts)):
            for p in self.plan:
                got = self.layer_options(opts, kind, p)
                if got != opts:
                    out.setdefault(kind, {})[str(p.head_dim)] = got
        return out

    @torch.no_grad()
    def build_rope_tables(self) -> None:
        """cos/sin [S, D] per RoPE table key, from the model's own rotary module."""
        pos = torch.arange(self.cfg.max_seq_len, device=self.device)[None]  # [1, S]
        self.rope = self.arch.rope(self.lm, pos)

    def allocate_decode_buffers(self) -> None:
        """Static decode buffers: graphs read and write these addresses on every replay."""
        cfg = self.cfg
        B, dev = cfg.max_batch, self.device
        self.ints = torch.zeros(5, B, dtype=torch.long, device=dev)  # ids, pos, slot, top_k, seed
        self.floats = torch.zeros(3, B, dtype=torch.float32, device=dev)  # temperature, top_p, min_p
        self.ids, self.pos, self.slot, self.top_k, self.seed = self.ints.unbind(0)
        self.temp, self.top_p, self.min_p = self.floats.unbind(0)
        self.out_tok = torch.zeros(B, cfg.max_chunk, dtype=torch.long, device=dev)  # [B, chunk]
        self.out_lp = torch.zeros(B, cfg.max_chunk, dtype=torch.float32, device=dev)
        self.step_i = torch.zeros(1, dtype=torch.long, device=dev)
        self.ones = torch.ones(B, 1, 1, dtype=torch.int32, device=dev)
        self.decode_masks = {w: masks.decode_mask_mod(self.slot, self.pos, self.pages.logical_dev, self.P, w)
                             for w in self.windows}
        n_prefill = max(cfg.max_prefill_tokens, cfg.max_seq_len)
        self.doc_start = torch.zeros(-(-n_prefill // self.q_block) * self.q_block, dtype=torch.long, device=dev)
        self.prefill_masks = {w: masks.prefill_mask_mod(self.doc_start, w) for w in self.windows}

    def layer_steps(self):
        """(layer, plan, the K/V pair [2, 1, Hkv, N*P, D] it reads and writes, fused weights, its index) per layer."""
        return zip(self.layers, self.plan, self.kv.pairs, self.fused, range(len(self.layers)))

    # prefill
    @torch.no_grad()
    def prefill(self, docs: list[tuple[list[int], int]]) -> torch.Tensor:
        """docs: (tokens, slot) with pages already reserved -> logits at each last token [n, V] float32."""
        lens = [len(t) for t, _ in docs]
        total = sum(lens)
        Tp = -(-total // self.q_block) * self.q_block
        assert Tp <= self.doc_start.numel(), (Tp, self.doc_start.numel())
        ids = torch.zeros(Tp, dtype=torch.long)  # [Tp]; tail = padding tokens
        pos = torch.zeros(Tp, dtype=torch.long)
        addr = torch.zeros(Tp, dtype=torch.long)  # padding tokens write page 0
        doc_start = torch.arange(Tp)  # a padding token is its own document
        last, start = [], 0
        for (tokens, slot), n in zip(docs, lens):
            p = torch.arange(n)
            ids[start:start + n] = torch.tensor(tokens)
            pos[start:start + n] = p
            pages = self.pages.table[slot, p // self.P].long()
            addr[start:start + n] = pages * self.P + p % self.P
            doc_start[start:start + n] = start
            start += n
            last.append(start - 1)
        assert int(addr[:total].min()) >= self.P, "prefill token without a reserved page"
        dev = self.device
        ids, pos, addr = ids.to(dev), pos.to(dev), addr.to(dev)
        self.doc_start[:Tp].copy_(doc_start)
        block_masks = {w: prefill_block_mask(doc_start, self.q_block, 128, self.prefill_masks[w], dev, w,
                                             full_lists=self.fa4_reason is None)
                       for w in self.windows}
        rope = {key: (cos[pos][None], sin[pos][None]) for key, (cos, sin) in self.rope.items()}  # [1, Tp, D]
        h, layer_inputs = self.arch.embed(self.lm, ids[None])  # [1, Tp, hidden], [1, Tp, L, Dp] or None
        fresh = {}  # store layer -> its K/V of this pass, for the layers that share it
        for layer, plan, kv, (w_qkv, w_gu), i in self.layer_steps():
            q, k, v = self.pre(self.arch.pre_attention, layer, h, *rope[plan.rope], self.project_qkv, w_qkv, kv,
                               addr, False)  # [1, H, Tp, D], written into the pages
            if k is None:  # a KV-sharing layer: its store layer already wrote the pages
                k, v = fresh[plan.kv_source]
            elif i in self.kv_sources:
                fresh[i] = (k, v)
            # a fresh prefill attends to its own K/V; the pages are only written
            o = self.attn_prefill(q, k, v, block_masks[plan.window], plan.scale,
                                  self.layer_options(self.prefill_opts, "prefill", plan))
            h = self.post(layer, h, o, w_gu, None if layer_inputs is None else layer_inputs[:, :, i])
        h = h[0, torch.tensor(last, device=dev)]  # [n, hidden]
        return lm_logits(self.lm, self.lm.model.norm(h))

    # decode
    def kv_splits(self, b: int, kv_heads: int, opts: dict | None = None) -> int:
        """SPLIT_KV of a b-row decode call over kv_heads KV heads: the decode options' own (`opts`, default the
        ones in use), else Inductor's rule (flex_decoding.get_split_k: floor(SMs / (b * kv_heads)) * 2, at least
        1), passed to the kernel explicitly so that the BlockMask's layout (decode_inputs) and the kernel agree. 1
        off CUDA, and where the options force flex's main kernel, which does not split."""
        opts = (self.decode_opts if opts is None else opts) or {}
        if self.sms is None or opts.get("FORCE_USE_FLEX_ATTENTION") or opts.get("BACKEND") in ("TRITON", "FLASH"):
            return 1
        return opts.get("SPLIT_KV") or max(self.sms // (b * kv_heads) * 2, 1)

    def decode_inputs(self, b: int, window: int | None = None, q_rows: int = 1) -> tuple[BlockMask, torch.Tensor]:
        """The physical BlockMask (of layers with this sliding window and query rows) and KV write
        addresses [b] of the first b rows; every page partial where one of those layers' kernels splits
        the K/V (masks.decode_block_mask)."""
        table = self.pages.table_dev[self.slot[:b]]  # [b, W] logical -> physical page
        split = any(self.kv_splits(b, p.kv_heads) > 1
                    for p, g in zip(self.plan, self.q_rows) if (p.window, g) == (window, q_rows))
        return masks.decode_block_mask(table, self.pos[:b], self.P, self.ones[:b], self.decode_masks[window],
                                       self.kv_len, window, q_rows, split)

    def attend(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, mask: BlockMask,
               i: int) -> torch.Tensor:
        """Layer i's decode attention: q [b, Hq, 1, D] over the pool [1, Hkv, N*P, D] -> [b, Hq, 1, D]."""
        plan, G = self.plan[i], self.q_rows[i]
        opts = self.layer_options(self.decode_opts, "decode", plan)
        if self.sms is not None:
            opts = {**(opts or {}), "SPLIT_KV": self.kv_splits(q.shape[0], plan.kv_heads)}
        if G == 1:
            return self.attn_decode(q, k_cache, v_cache, mask, plan.scale, opts)
        # Query head h reads KV head h // G (HF's repeat_kv), so each KV head's G query heads are a view:
        # G query rows of one head (ratio 1, which Inductor's split-KV decode kernel takes), all at the
        # row's one position, so the mask (Q_LEN G) ignores q_idx. Uncompiled, dense_attention runs it too.
        b, Hq, _, D = q.shape
        q = q.view(b, plan.kv_heads, G, D)  # [b, Hkv, G, D]
        o = self.attn_decode(q, k_cache, v_cache, mask, plan.scale, opts)  # [b, Hkv, G, D]
        return o.reshape(b, Hq, 1, D)

    def decode_step(self, b: int, how: str) -> None:
        """One decode step over the first b rows of the static buffers (the body of a CUDA graph)."""
        ids, pos = self.ids[:b], self.pos[:b]
        block_masks = {key: self.decode_inputs(b, *key) for key in self.decode_keys}
        addr = block_masks[self.decode_keys[0]][1]
        rope = {key: (cos[pos][:, None], sin[pos][:, None]) for key, (cos, sin) in self.rope.items()}  # [b, 1, D]
        h, layer_inputs = self.arch.embed(self.lm, ids[:, None])  # [b, 1, hidden], [b, 1, L, Dp] or None
        for layer, plan, kv, (w_qkv, w_gu), i in self.layer_steps():
            # [b, H, 1, D]; the new K/V written into the pages (a KV-sharing layer's store layer wrote them)
            q, k, v = self.pre(self.arch.pre_attention, layer, h, *rope[plan.rope], self.project_qkv, w_qkv, kv,
                               addr, True)
            o = self.attend(q, kv[0], kv[1], block_masks[plan.window, self.q_rows[i]][0], i)
            h = self.post(layer, h, o, w_gu, None if layer_inputs is None else layer_inputs[:, :, i])
        logits = lm_logits(self.lm, self.lm.model.norm(h[:, 0]))  # [b, V]
        params = sampler.Params(self.temp[:b], self.top_k[:b], self.top_p[:b], self.min_p[:b], self.seed[:b])
        if how == "temperature":
            tok, lp = self.sample_temperature(logits, params.temperature, params.seed, pos + 1)
        else:
            tok, lp = sampler.sample(logits, params, pos + 1, how, self.cfg.sampler_topk_cap,
                                     self.cfg.logprobs == "processed")
        col = self.step_i.expand(b, 1)
        self.out_tok[:b].scatter_(1, col, tok[:, None])
        self.out_lp[:b].scatter_(1, col, lp[:, None])
        ids.copy_(tok)
        pos.add_(1)
        self.step_i.add_(1)

    def set_rows(self, seqs: list[Sequence], bucket: int) -> None:
        """Write the rows' state; rows past len(seqs) become padding (slot 0, page 0, greedy)."""
        n = len(seqs)
        ints = torch.zeros(5, bucket, dtype=torch.long)
        floats = torch.zeros(3, bucket, dtype=torch.float32)
        floats[1] = 1.0
        if n:  # one tensor from a list of rows: a tensor per row cost ~4 ms of host time a chunk at 256 rows
            ints[:, :n] = torch.tensor([(s.last_token, s.num_tokens - 1, s.slot, s.top_k, s.seed) for s in seqs]).T
            floats[:, :n] = torch.tensor([(s.temperature, s.top_p, s.min_p) for s in seqs], dtype=torch.float32).T
        self.ints[:, :bucket].copy_(ints)
        self.floats[:, :bucket].copy_(floats)
        self.step_i.zero_()

    @torch.no_grad()
    def decode(self, seqs: list[Sequence], steps: int) -> tuple[list[list[int]], list[list[float]]]:
        """`steps` decode steps for `seqs` (pages reserved, table synced) -> tokens, logprobs per row."""
        assert 1 <= steps <= self.cfg.max_chunk and seqs
        bucket = self.bucket(len(seqs))
        how = sampler.mode([(s.temperature, s.top_k, s.top_p, s.min_p) for s in seqs], self.cfg.sampler_topk_cap,
                           self.vocab, self.cfg.sampler_temperature_path)
        if self.graphs_on and (bucket, how) not in self.graphs:
            self.capture([bucket], how)
        elif self.per_bucket and not self.graphs_on:  # uncaptured steps read the options in use
            self.use_decode_options(self.cfg.decode_options_for(bucket))
        self.set_rows(seqs, bucket)
        for _ in range(steps):
            if self.graphs_on:
                self.graphs[(bucket, how)].replay()
            else:
                self.decode_step(bucket, how)
        n = len(seqs)
        tok = self.out_tok[:n, :steps].cpu()  # the one host sync of the chunk
        lp = self.out_lp[:n, :steps].cpu()
        return tok.tolist(), lp.tolist()

    def bucket(self, rows: int) -> int:
        """The graph bucket `rows` rows decode in: the smallest at least as large."""
        return next(b for b in self.buckets if b >= rows)

    def mode(self, temperature: float, top_k: int, top_p: float, min_p: float) -> str:
        """The sampling path (sampler.mode) of rows that all sample with these parameters."""
        return sampler.mode([(temperature, top_k, top_p, min_p)], self.cfg.sampler_topk_cap, self.vocab,
                            self.cfg.sampler_temperature_path)

    @torch.no_grad()
    def capture(self, buckets, how: str) -> None:
        """Capture the decode step of each bucket (largest first, so smaller ones reuse its memory); with options
        per batch size (per_bucket), each bucket with its own (EngineConfig.decode_options_for)."""
        assert self.graphs_on
        t0 = time.perf_counter()
        for b in sorted(buckets, reverse=True):
            if self.per_bucket:
                self.use_decode_options(self.cfg.decode_options_for(b))
            with skinny_gemm.active(self.gemm_tiles if b <= skinny_gemm.MAX_ROWS else None):
                self.set_rows([], b)  # padding rows: warm-up and capture write only page 0
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(2):  # compile + autotune outside the capture
                        self.decode_step(b, how)
                torch.cuda.current_stream().wait_stream(stream)
                if self.pool is None:
                    self.pool = torch.cuda.graph_pool_handle()
                graph = torch.cuda.CUDAGraph()
                self.set_rows([], b)
                with torch.cuda.graph(graph, pool=self.pool):
                    self.decode_step(b, how)
            self.graphs[(b, how)] = graph
        torch.cuda.synchronize()
        self.capture_s += time.perf_counter() - t0
