"""Engine knobs: sizes of the paged KV pool, batch buckets, kernel options, graphs, FA4 prefill."""
from dataclasses import dataclass, field, fields

# Keys torch's FlexKernelOptions accepts in both torch 2.11 and 2.13 (we pass them through unchanged).
KERNEL_OPTION_KEYS = frozenset({
    "num_warps", "num_stages", "BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2",
    "PRESCALE_QK", "ROWS_GUARANTEED_SAFE", "BLOCKS_ARE_CONTIGUOUS", "WRITE_DQ", "FORCE_USE_FLEX_ATTENTION",
    "USE_TMA", "BACKEND", "fwd_num_warps", "fwd_num_stages", "fwd_BLOCK_M", "fwd_BLOCK_N",
    # flex-decoding only: KV splits per (row, KV head); unset, ModelRunner.kv_splits passes Inductor's rule. Above 1,
    # decode_block_mask also lists every page as partial
    "SPLIT_KV",
    # the engine's own, taken out before flex sees the options: decode GEMM tiles per weight shape, {"NxK": tiles
    # key} (skinny_gemm.py; the autotune pass records them where they beat cuBLAS)
    "GEMM_TILES",
})


@dataclass(slots=True)
class EngineConfig:
    max_batch: int = 64  # sequences in flight = batch slots (+1 reserved padding slot)
    max_seq_len: int = 2048  # prompt + completion of one sequence
    page_size: int = 128  # tokens per KV page = the BlockMask's KV block size
    num_pages: int | None = None  # None: from kv_memory_gb, else every slot can hold max_seq_len
    kv_memory_gb: float | None = None
    max_prefill_tokens: int = 16384  # packed prompt tokens per prefill pass
    decode_chunk: int = 16  # decode steps between host syncs (finished checks, admission)
    # ... while no running sequence can stop at EOS (ignore_eos): its next finish is then known, and
    # the chunk runs up to it; at most one page of steps
    decode_chunk_no_eos: int = 64
    # GPU time a host sync between decode chunks costs (the GPU idles while the host checks finished rows, admits
    # and writes the rows' state), in row-steps: a chunk stops where budgets end only to spare finished rows more
    # idle row-steps than this (Scheduler.chunk_len). On the 4B (h100-2026-12-05-headline) a decode step cost
    # 4.15 ms at 1 row and 13.0 ms at 256 (0.035 ms a row), and the rollout cell, cut at every budget, took 6.05 s
    # for 461 steps in 200 chunks at 110 rows a step: ~10 ms a chunk beyond its steps, ~300 row-steps
    decode_sync_row_steps: int = 256
    cuda_graphs: bool = True  # one graph per batch bucket; only on CUDA
    capture_all: bool = True  # capture every bucket (greedy + top-k sampling) at start, not on first use
    compile: bool | None = None  # torch.compile the layer step; None = on for CUDA
    fa4_prefill: str = "auto"  # 'auto' | 'on' | 'off'
    decode_kernel_options: dict = field(default_factory=dict)
    # {batch size: decode options} (the autotune record's entries): a bucket's graph is captured with the entry of
    # the smallest batch >= the bucket, else the largest; one engine then serves every batch size with the options
    # tuned for it. Not with decode_kernel_options
    decode_kernel_options_by_batch: dict = field(default_factory=dict)
    prefill_kernel_options: dict = field(default_factory=dict)
    sampler_topk_cap: int = 64  # when every request has 0 < top_k <= cap, sample from torch.topk(cap)
    # rows that truncate nothing (GRPO's sampling) sample without a sort, compiled in the decode graphs
    # (sampler.sample_temperature; the same draws as the sorted path: on CPU, and on the GPU compiled in the graphs
    # against the uncompiled sorted path, tests/test_engine_gpu.py). False: every sampled row takes the sorted path
    sampler_temperature_path: bool = True
    # sampled tokens' logprobs: "policy" = log_softmax(z / T), the trainer's quantity; "processed" =
    # renormalised over what top-k/top-p/min-p kept, as vLLM returns them to TRL (sampler.sample)
    logprobs: str = "policy"
    lora_targets: tuple[str, ...] = ()  # module names kept as pristine + merged copy; () = no LoRA
    lora_merge: bool = True  # False: run a PEFT model's adapter unmerged (the slow reference path)
    pristine_on_host: bool | None = None  # LoRA's pristine base in pinned host memory; None = when the engine owns the weights
    fuse_projections: bool | None = None  # q/k/v and gate/up as one GEMM each; None = when the engine owns the weights

    def __post_init__(self):
        self.lora_targets = tuple(self.lora_targets)
        assert self.max_batch >= 1 and self.max_seq_len >= 2
        assert self.page_size >= 16 and self.page_size & (self.page_size - 1) == 0, \
            "page_size must be a power of two >= 16 (it is the flex KV block size)"
        assert self.num_pages is None or self.num_pages >= 2, "page 0 is reserved for padding rows"
        assert self.kv_memory_gb is None or self.kv_memory_gb > 0
        assert self.num_pages is None or self.kv_memory_gb is None, "give num_pages or kv_memory_gb, not both"
        assert self.max_prefill_tokens >= self.page_size
        assert 1 <= self.decode_chunk <= self.page_size
        assert self.decode_chunk_no_eos >= 1
        assert self.decode_sync_row_steps >= 0
        assert self.fa4_prefill in ("auto", "on", "off"), self.fa4_prefill
        assert self.sampler_topk_cap >= 1
        assert self.logprobs in ("policy", "processed"), \
            f"engine option logprobs must be 'policy' or 'processed', not {self.logprobs!r}"
        self.decode_kernel_options_by_batch = {int(b): dict(o) for b, o in self.decode_kernel_options_by_batch.items()}
        assert not (self.decode_kernel_options and self.decode_kernel_options_by_batch), \
            "give decode_kernel_options (every bucket) or decode_kernel_options_by_batch (per batch size), not both"
        assert all(b >= 1 for b in self.decode_kernel_options_by_batch), self.decode_kernel_options_by_batch
        decode_sets = (self.decode_kernel_options, *self.decode_kernel_options_by_batch.values())
        for opts in (*decode_sets, self.prefill_kernel_options):
            unknown = set(opts) - KERNEL_OPTION_KEYS
            assert not unknown, f"unknown flex kernel options {sorted(unknown)}; known: {sorted(KERNEL_OPTION_KEYS)}"
        assert "GEMM_TILES" not in self.prefill_kernel_options, \
            "GEMM_TILES is a decode option (decode_kernel_options): prefill's GEMMs are cuBLAS's"
        # The decode kernel then steps from one KV block to the next without reading kv_indices, but a
        # sequence's pages are wherever the allocator found them (and shared across a GRPO group).
        assert not any(o.get("BLOCKS_ARE_CONTIGUOUS") for o in decode_sets), \
            "BLOCKS_ARE_CONTIGUOUS is wrong for paged decode: physical pages are not contiguous"
        # Padding rows and reserved slot 0 rely on the kernel's empty-row guard.
        for opts in (*decode_sets, self.prefill_kernel_options):
            assert not opts.get("ROWS_GUARANTEED_SAFE"), "ROWS_GUARANTEED_SAFE NaNs padded rows"

    def decode_options_for(self, bucket: int) -> dict:
        """The decode options a bucket's graph is captured with: its decode_kernel_options_by_batch entry (the
        smallest batch >= bucket, else the largest), else decode_kernel_options."""
        by = self.decode_kernel_options_by_batch
        if not by:
            return dict(self.decode_kernel_options)
        sizes = sorted(by)
        return dict(by[next((b for b in sizes if b >= bucket), sizes[-1])])

    def chunk_cap(self, can_stop_early: bool) -> int:
        """Decode steps before the next host sync, for a batch that can (or cannot) stop at EOS."""
        return self.decode_chunk if can_stop_early else max(self.decode_chunk, min(self.decode_chunk_no_eos,
                                                                                    self.page_size))

    @property
    def max_chunk(self) -> int:
        return self.chunk_cap(False)

    @property
    def max_pages_per_seq(self) -> int:
        return -(-self.max_seq_len // self.page_size)

    @property
    def buckets(self) -> tuple[int, ...]:
        """Batch sizes with a CUDA graph: 1, 2, 4, 8, then steps of 16, and max_batch itself."""
        small = [b for b in (1, 2, 4, 8) if b < self.max_batch]
        steps = list(range(16, self.max_batch, 16))
        return tuple(small + steps + [self.max_batch])

    def bucket(self, n: int) -> int:
        assert 1 <= n <= self.max_batch, (n, self.max_batch)
        return next(b for b in self.buckets if b >= n)

    def pages(self, bytes_per_page: int) -> int:
        """Physical pages in the pool, page 0 (padding) included."""
        if self.num_pages is not None:
            return self.num_pages
        if self.kv_memory_gb is not None:
            n = int(self.kv_memory_gb * 1e9) // bytes_per_page
            assert n >= 2, f"kv_memory_gb={self.kv_memory_gb} holds fewer than 2 pages of {bytes_per_page} bytes"
            return n
        return 1 + self.max_batch * self.max_pages_per_seq

    @classmethod
    def from_options(cls, options: dict, **defaults) -> "EngineConfig":
        """`defaults` (from the job spec) overridden by `options` (the config's backend options)."""
        known = {f.name for f in fields(cls)}
        unknown = set(options) - known
        assert not unknown, f"unknown flex engine options {sorted(unknown)}; known: {sorted(known)}"
        return cls(**{**defaults, **options})
