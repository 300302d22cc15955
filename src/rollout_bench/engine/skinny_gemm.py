"""Decode GEMMs at a few rows: y = x @ w.T by a split-K Triton kernel, for the weight shapes where the autotune pass
measured it faster than cuBLAS.

At B = 8 a decode step is its weight reads, and cuBLAS reads Qwen3-4B's projections at 0.48-0.82 of the copy rate
(o_proj 2.0 TB/s, gate_up 3.4, against 4.15; diagnostics/gemm_bench.py, h200-2026-12-04-session16): 2,560 outputs
make few output tiles, and a small GEMM's ramp-up is a large part of its time. The kernel reads a [BLOCK_N,
k_per_split] slab of w per program, multiplies it with the rows of x (padded to one 16-row tensor-core tile) and
writes fp32 partial sums; a second kernel adds the splits in a fixed order (deterministic, unlike atomics) and
casts. With one split the first kernel writes y itself. The tiles are per weight shape: kernel_tuning times
`TUNE_CANDIDATES` on the model's own weights and records the winners under the decode option `GEMM_TILES`, and
flex jobs replay them.

The layer code calls `linear`, which at decode (one token a row, bf16/fp16 weights on CUDA) goes through the custom
op `rollout_bench::decode_linear`: opaque to Inductor, so the choice is made when the op runs, not when the layer
is compiled. It takes the kernel where the runner made a tile table `active` (around a decode graph's warm-up and
capture, for buckets of at most MAX_ROWS rows) and the table has the weight's shape; everywhere else it is the
same cuBLAS product as F.linear.
"""
import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F

BLOCK_M = 16  # one tensor-core tile of rows; fewer rows are padded with masked loads
MAX_ROWS = BLOCK_M
DTYPES = (torch.bfloat16, torch.float16)  # fp32 weights would make tl.dot round to tf32


@dataclass(frozen=True, slots=True)
class Tiles:
    """A program's w tile (block_n x block_k), the K splits asked for, Triton's stages and warps. split_k is a
    ceiling: each split is a whole number of K tiles, so K = 2560 at s8 (BLOCK_K 128) runs 7 splits (`splits`)."""
    block_n: int
    block_k: int
    split_k: int
    num_stages: int
    num_warps: int = 4

    def key(self) -> str:
        return f"n{self.block_n}_k{self.block_k}_s{self.split_k}_st{self.num_stages}_w{self.num_warps}"

    @classmethod
    def parse(cls, key: str) -> "Tiles":
        parts = key.split("_")
        if len(parts) != 5 or [p.rstrip("0123456789") for p in parts] != ["n", "k", "s", "st", "w"]:
            raise ValueError(f"GEMM tiles {key!r}: expected n<BLOCK_N>_k<BLOCK_K>_s<SPLIT_K>_st<stages>_w<warps>")
        n, k, s, st, w = (int(p.lstrip("nkstw")) for p in parts)
        return cls(n, k, s, st, w)

    def smem_bytes(self, elt: int = 2) -> int:
        """A w and an x tile per pipeline stage (what Triton's pipeliner keeps in shared memory)."""
        return self.num_stages * (self.block_n + BLOCK_M) * self.block_k * elt

    def fits(self, n: int, k: int, smem_limit: int | None = None, elt: int = 2) -> bool:
        """Tiles that divide w [n, k], leave every split a K tile, and fit a block's shared memory."""
        return (n % self.block_n == 0 and k % self.block_k == 0 and k // self.block_k >= self.split_k
                and (smem_limit is None or self.smem_bytes(elt) <= smem_limit))


def candidates(n: int, k: int, smem_limit: int, elt: int = 2) -> list[Tiles]:
    """The whole tile grid, for the benchmark (diagnostics/gemm_bench.py)."""
    grid = [Tiles(bn, bk, s, st) for bn in (16, 32, 64) for bk in (128, 256, 512) for s in (1, 2, 4, 8, 16)
            for st in (3, 4)]
    return [t for t in grid if t.fits(n, k, smem_limit, elt)]


# The autotune pass's short list: each grid point that won a shape of Qwen3-4B or Llama-3.2-3B at M = 4-16 in the
# benchmark (h200-2026-12-04-session16), with the split counts around the narrow shapes' winner (s4). That session's
# autotune ran the first seven; the last two won qkv (where cuBLAS stayed faster) and Llama's o_proj.
TUNE_CANDIDATES = tuple(Tiles.parse(k) for k in (
    "n32_k128_s1_st3_w4", "n64_k128_s1_st3_w4", "n64_k128_s1_st4_w4", "n32_k256_s1_st3_w4",
    "n32_k128_s2_st4_w4", "n32_k128_s4_st4_w4", "n32_k128_s8_st4_w4", "n32_k256_s1_st4_w4", "n64_k256_s1_st4_w4"))


def k_per_split(k: int, tiles: Tiles) -> int:
    """K columns per split, a whole number of K tiles; the last split may be shorter."""
    per = -(-k // tiles.split_k)
    return -(-per // tiles.block_k) * tiles.block_k


def splits(k: int, tiles: Tiles) -> int:
    return -(-k // k_per_split(k, tiles))


def _kernels():
    import triton
    import triton.language as tl

    # M varies per call: no recompilation for it (Triton specialises ints by value 1 and divisibility by 16)
    @triton.jit(do_not_specialize=["M"])
    def skinny_gemm_partial(x_ptr, w_ptr, out_ptr, M, N, K, k_split, stride_xm, stride_wn, stride_os, stride_om,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DIRECT: tl.constexpr):
        pid_n, pid_s = tl.program_id(0), tl.program_id(1)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # N % BLOCK_N == 0 and K % BLOCK_K == 0 (Tiles.fits)
        rm = tl.arange(0, BLOCK_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        k_lo = pid_s * k_split
        k_hi = tl.minimum(k_lo + k_split, K)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(x_ptr + rm[:, None] * stride_xm + rk[None, :], mask=rm[:, None] < M, other=0.0)  # [BM, BK]
            w = tl.load(w_ptr + rn[:, None] * stride_wn + rk[None, :])  # [BN, BK]
            acc = tl.dot(x, tl.trans(w), acc)
        out = out_ptr + pid_s * stride_os + rm[:, None] * stride_om + rn[None, :]
        if DIRECT:
            tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=rm[:, None] < M)
        else:
            tl.store(out, acc, mask=rm[:, None] < M)

    @triton.jit
    def skinny_gemm_reduce(p_ptr, y_ptr, MN, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for s in tl.static_range(SPLITS):  # a fixed order: the same sum every call
            acc += tl.load(p_ptr + s * MN + offs, mask=offs < MN, other=0.0)
        tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=offs < MN)

    return skinny_gemm_partial, skinny_gemm_reduce


_KERNELS = None
REDUCE_BLOCK = 1024


def triton_linear(x: torch.Tensor, w: torch.Tensor, tiles: Tiles, out: torch.Tensor | None = None,
                  scratch: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """x [M, K] (M <= 16), w [N, K] -> y [M, N] in out_dtype (default x's). `scratch` [splits, M, N] fp32: the split
    sums (allocated when None; the benchmark passes its own)."""
    global _KERNELS
    m, k = x.shape
    n = w.shape[0]
    assert m <= BLOCK_M and w.shape[1] == k and x.stride(1) == 1 and w.stride(1) == 1, (x.shape, w.shape)
    assert tiles.fits(n, k), (n, k, tiles)
    assert n * k < 2**31, "the kernels index w with 32-bit offsets"
    if out is None:
        out = torch.empty((m, n), dtype=out_dtype or x.dtype, device=x.device)
    assert out.shape == (m, n) and out.is_contiguous(), (out.shape, "the reduce writes y as m * n contiguous values")
    s, per = splits(k, tiles), k_per_split(k, tiles)
    direct = s == 1
    if not direct and scratch is None:
        scratch = torch.empty((s, m, n), dtype=torch.float32, device=x.device)
    assert direct or (scratch.shape == (s, m, n) and scratch.dtype == torch.float32 and scratch.is_contiguous()), \
        (None if direct else scratch.shape, (s, m, n))
    if _KERNELS is None:
        _KERNELS = _kernels()
    partial_kernel, reduce_kernel = _KERNELS
    target = out if direct else scratch
    partial_kernel[(n // tiles.block_n, s)](
        x, w, target, m, n, k, per, x.stride(0), w.stride(0), 0 if direct else target.stride(0), target.stride(-2),
        BLOCK_M=BLOCK_M, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, DIRECT=direct,
        num_stages=tiles.num_stages, num_warps=tiles.num_warps)
    if not direct:
        reduce_kernel[(-(-m * n // REDUCE_BLOCK),)](scratch, out, m * n, SPLITS=s, BLOCK=REDUCE_BLOCK)
    return out


# weight shape (n, k) -> tiles, while a decode graph of at most MAX_ROWS rows is warmed up and captured. One table per
# process: an engine's captures run one at a time on the thread that drives it
_ACTIVE: dict[tuple[int, int], Tiles] = {}


@contextlib.contextmanager
def active(tiles: dict[tuple[int, int], Tiles] | None):
    global _ACTIVE
    kept, _ACTIVE = _ACTIVE, dict(tiles or {})
    try:
        yield
    finally:
        _ACTIVE = kept


def tiles_for(x: torch.Tensor, w: torch.Tensor) -> Tiles | None:
    if x.shape[0] > MAX_ROWS or not _ACTIVE:
        return None
    return _ACTIVE.get((w.shape[0], w.shape[1]))


@torch.library.custom_op("rollout_bench::decode_linear", mutates_args=())
def decode_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [M, K], w [N, K] -> [M, N]: the active tiles' kernel for w's shape, else cuBLAS. Inference only: no
    autograd formula (the engine runs under no_grad; training goes through the trainer's own model)."""
    tiles = tiles_for(x, w)
    return torch.mm(x, w.t()) if tiles is None else triton_linear(x.contiguous(), w, tiles)


@decode_linear.register_fake
def _(x, w):
    return x.new_empty(x.shape[0], w.shape[0])


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """F.linear(x, w) for bias-free x [N, T, K]: through decode_linear where T = 1 (decode: static in the compiled
    decode layer code, while prefill's packed T is not; a prefill of one token would pass too, and take cuBLAS,
    since prefill runs outside `active`) of bf16/fp16 weights on CUDA."""
    if x.dim() != 3 or x.shape[1] != 1 or not x.is_cuda or w.dtype not in DTYPES:
        return F.linear(x, w)
    n = x.shape[0]
    return decode_linear(x.reshape(n, -1), w).view(n, 1, -1)


def module_linear(mod, x: torch.Tensor) -> torch.Tensor:
    """mod(x) for a projection module: `linear` on a plain bias-free nn.Linear, the module itself otherwise (a PEFT
    wrapper runs its adapter)."""
    if type(mod) is torch.nn.Linear and mod.bias is None:
        return linear(x, mod.weight)
    return mod(x)


def parse_tiles(table: dict) -> dict[tuple[int, int], Tiles]:
    """GEMM_TILES {"NxK": tiles key} -> {(n, k): Tiles}."""
    out = {}
    for shape, key in (table or {}).items():
        try:
            n, k = (int(v) for v in shape.split("x"))
        except ValueError:
            raise ValueError(f"GEMM_TILES key {shape!r}: expected '<N>x<K>' (a weight's output and input "
                             f"features)") from None
        out[(n, k)] = Tiles.parse(key)
    return out


def shape_key(n: int, k: int) -> str:
    return f"{n}x{k}"
