"""The decode-GEMM benchmark (diagnostics/gemm_bench.py) and the split-K kernel's tile grid (engine/skinny_gemm.py):
the shapes cover exactly the matrices a decode step reads, the tile grid fits and covers K, the summary's sums; on
CUDA, one small run of the benchmark (the kernel itself: tests/test_skinny_gemm.py)."""
import pytest
import torch

from rollout_bench.diagnostics import gemm_bench, random_model
from rollout_bench.engine import skinny_gemm, traffic


@pytest.mark.parametrize("name", ["qwen3-tiny", "llama-tiny", "qwen3-4b", "llama-3.2-3b"])
def test_shapes_are_the_matrices_a_decode_step_reads(name):
    cfg = gemm_bench.load_config(name)
    shapes = gemm_bench.decode_shapes(cfg)
    if name.endswith("tiny"):  # built: every 2-D weight a step reads, the norms' vectors aside
        model = random_model.build(name)
        vectors = sum(p.numel() * 4 for p in model.parameters() if p.dim() == 1)
        assert gemm_bench.step_bytes(shapes, elt=4) == traffic.weight_bytes(model) - vectors
    if name == "qwen3-4b":  # the 8.05 GB of the session-15 decode profile
        assert gemm_bench.step_bytes(shapes) == pytest.approx(8.05e9, rel=2e-3)
        assert {s["name"]: (s["n"], s["k"]) for s in shapes}["down"] == (2560, 9728)


def test_per_layer_shapes_are_refused_by_name():
    with pytest.raises(ValueError, match="gemma4"):
        gemm_bench.decode_shapes(gemm_bench.load_config("gemma-4-e2b") | {"model_type": "gemma4_text"})


@pytest.mark.parametrize("n,k", [(2560, 9728), (2560, 4096), (6144, 2560), (151936, 2560), (64, 256)])
def test_tile_grid_divides_fits_and_covers_k(n, k):
    limit = 232448  # an H100/H200 block's opt-in shared memory
    grid = skinny_gemm.candidates(n, k, limit)
    assert grid and len({t.key() for t in grid}) == len(grid)
    for t in grid:
        assert n % t.block_n == 0 and k % t.block_k == 0 and t.smem_bytes() <= limit
        per, s = skinny_gemm.k_per_split(k, t), skinny_gemm.splits(k, t)
        assert per % t.block_k == 0 and s <= t.split_k and (s - 1) * per < k <= s * per
    assert any(t.split_k == 1 for t in grid) and any(t.split_k > 1 for t in grid)


def test_summary_takes_the_fastest_timed_implementation_and_sums_the_step():
    shapes = [{"name": "o", "n": 1000, "k": 1000, "count": 10}, {"name": "lm_head", "n": 4000, "k": 1000, "count": 1}]
    results = {8: {"o": {"cublas": 0.002, "cublaslt": 0.0025, "n16_k128_s4_st3_w4": 0.001,
                         "n64_k512_s1_st4_w4": "OutOfResources: shared memory"},
                   "lm_head": {"cublas": 0.003, "cublaslt": "wrong: relative error 0.5 against float32"}}}
    s = gemm_bench.summarize(shapes, results, copy_gb_s=4000.0)[8]
    o, head = s["shapes"]
    assert (o["best"], o["best_ms"], head["best"]) == ("n16_k128_s4_st3_w4", 0.001, "cublas")
    assert o["cublas_gb_s"] == 1000.0 and o["best_gb_s"] == 2000.0 and o["best_of_copy"] == 0.5
    assert s["step_cublas_ms"] == pytest.approx(10 * 0.002 + 0.003)
    assert s["step_best_ms"] == pytest.approx(10 * 0.001 + 0.003)
    assert s["step_at_copy_rate_ms"] == pytest.approx((10 * 2e6 + 8e6) / 4000e9 * 1e3)
    text = gemm_bench.table({"model": "m", "env": {"gpu_name": "g"}, "copy_gb_s": 4000.0, "summary": {"8": s}})
    assert "| 8 | o | 1000 x 1000 | 0.0020 | 1,000 | n16_k128_s4_st3_w4 | 0.0010 | 2,000 |" in text
    assert "| 8 | 0.023 | 0.013 | 0.007 |" in text


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
def test_bench_runs_on_a_small_model(tmp_path):
    """Every shape of qwen3-tiny-hd64 (k >= 128, so the tile grid applies) timed by cuBLAS and by some tiles."""
    rec = gemm_bench.run(model="qwen3-tiny-hd64", config=gemm_bench.load_config("qwen3-tiny-hd64"), ms=[8],
                         out=str(tmp_path / "g.json"), table_out=str(tmp_path / "g.md"), repeats=3)
    s = rec["summary"]["8"]
    assert [r["shape"] for r in s["shapes"]] == ["qkv", "o", "gate_up", "down", "lm_head"]
    assert all(isinstance(v, float) for v in (s["step_cublas_ms"], s["step_best_ms"])) and rec["copy_gb_s"] > 0
    for shape, res in rec["results"]["8"].items():
        assert isinstance(res["cublas"], float), (shape, res["cublas"])
        assert any(isinstance(v, float) for key, v in res.items() if key.startswith("n")), shape
    # rows that start with M = 8 (a tiny shape's GB/s can itself read "| 8 |": the H100 run of 2026-12-06)
    assert sum(line.startswith("| 8 |") for line in (tmp_path / "g.md").read_text().splitlines()) == 6
