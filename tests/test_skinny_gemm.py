"""Decode GEMMs through engine/skinny_gemm.py: the tiles' names and table, the runner's decode options with and
without GEMM_TILES, what the autotune pass keeps, which weights it tunes; on CUDA, the kernel inside the layer code
(eager and captured) against cuBLAS, and that a captured decode step launches it only where the tiles say."""
import pytest
import torch
import torch.nn.functional as F

from rollout_bench.core.workload import Sampling
from rollout_bench.diagnostics import decode_sweep, gemm_bench, random_model
from rollout_bench.engine import Engine, EngineConfig, sampler, skinny_gemm

Tiles = skinny_gemm.Tiles


def test_tiles_keys_round_trip_and_bad_ones_name_the_form():
    for t in skinny_gemm.TUNE_CANDIDATES:
        assert Tiles.parse(t.key()) == t
    with pytest.raises(ValueError, match="n<BLOCK_N>_k<BLOCK_K>"):
        Tiles.parse("n32_k128_s4")
    with pytest.raises(ValueError, match="'<N>x<K>'"):
        skinny_gemm.parse_tiles({"2560-9728": "n32_k128_s4_st4_w4"})
    assert skinny_gemm.parse_tiles({"2560x9728": "n32_k128_s4_st4_w4"}) == {(2560, 9728): Tiles(32, 128, 4, 4, 4)}


def test_the_short_list_is_part_of_the_grid():
    """The autotune's candidates are grid points the benchmark and the GPU test run, and fit an H200 block on the
    4B's shapes they were chosen for."""
    for n, k in [(2560, 9728), (2560, 4096), (19456, 2560), (151936, 2560)]:
        grid = skinny_gemm.candidates(n, k, 232448)
        assert all(t in grid for t in skinny_gemm.TUNE_CANDIDATES), (n, k)


def test_linear_is_f_linear_off_the_decode_path():
    """On CPU the layer code's product is F.linear's, whatever is active (the CUDA cases: the GPU test below)."""
    x, w = torch.randn(3, 1, 64), torch.randn(32, 64)
    with skinny_gemm.active({(32, 64): Tiles(32, 64, 1, 3)}):
        assert torch.equal(skinny_gemm.linear(x, w), F.linear(x, w))
        assert torch.equal(skinny_gemm.linear(x.view(1, 3, 64), w), F.linear(x.view(1, 3, 64), w))
        lin = torch.nn.Linear(64, 32, bias=False)
        assert torch.equal(skinny_gemm.module_linear(lin, x), lin(x))
    assert skinny_gemm.tiles_for(x[:, 0], w) is None  # nothing active outside the context


def test_active_tiles_only_at_few_rows_and_their_shape():
    t = Tiles(32, 128, 4, 4)
    w = torch.empty(2560, 9728)
    with skinny_gemm.active({(2560, 9728): t}):
        assert skinny_gemm.tiles_for(torch.empty(8, 9728), w) == t
        assert skinny_gemm.tiles_for(torch.empty(skinny_gemm.MAX_ROWS + 1, 9728), w) is None
        assert skinny_gemm.tiles_for(torch.empty(8, 2560), torch.empty(9728, 2560)) is None
        with skinny_gemm.active(None):
            assert skinny_gemm.tiles_for(torch.empty(8, 9728), w) is None
        assert skinny_gemm.tiles_for(torch.empty(8, 9728), w) == t


def test_runner_keeps_gemm_tiles_apart_from_flex_options():
    """GEMM_TILES is the engine's key: flex's kernel options never see it, and decode_options gives both back."""
    model = random_model.build("qwen3-tiny", tie_word_embeddings=False)
    opts = {"BLOCK_N": 16, "GEMM_TILES": {"128x64": "n32_k64_s1_st3_w4"}}
    cfg = EngineConfig(max_batch=4, max_seq_len=64, page_size=16, decode_kernel_options=opts)
    runner = Engine(model, cfg).runner
    assert runner.decode_opts is None  # CPU: kernel options are CUDA's
    runner.use_decode_options(opts)
    assert runner.decode_opts == {"BLOCK_N": 16} and runner.gemm_tiles == {(128, 64): Tiles(32, 64, 1, 3)}
    assert runner.decode_options() == opts
    runner.use_decode_options({"BLOCK_N": 16})
    assert runner.gemm_tiles == {} and runner.decode_options() == {"BLOCK_N": 16}
    with pytest.raises(AssertionError, match="unknown flex kernel options"):
        EngineConfig(decode_kernel_options={"GEMM": {}})


def test_buffers_of_the_wrong_shape_are_refused_before_any_launch():
    """The reduce reads the split sums as [splits, M, N] and writes y as M * N contiguous values."""
    x, w, t = torch.randn(8, 256, dtype=torch.bfloat16), torch.randn(64, 256, dtype=torch.bfloat16), Tiles(32, 128, 2, 3)
    with pytest.raises(AssertionError, match="contiguous"):
        skinny_gemm.triton_linear(x, w, t, out=torch.empty(64, 8, dtype=torch.bfloat16).t())
    with pytest.raises(AssertionError):
        skinny_gemm.triton_linear(x, w, t, scratch=torch.empty(2, 16, 64))  # sized for 16 rows, not 8
    with pytest.raises(AssertionError, match="GEMM_TILES is a decode option"):
        EngineConfig(prefill_kernel_options={"GEMM_TILES": {}})


def test_step_winner_is_measured_against_the_first_candidate():
    base, tiles = '{"BLOCK_N": 64}', '{"BLOCK_N": 64, "GEMM_TILES": {"1x1": "n16_k128_s1_st3_w4"}}'
    assert decode_sweep.best_options({base: 1.0, tiles: 0.99}, baseline=base) == {"BLOCK_N": 64}  # within MIN_GAIN
    assert decode_sweep.best_options({base: 1.0, tiles: 0.9}, baseline=base) == {
        "BLOCK_N": 64, "GEMM_TILES": {"1x1": "n16_k128_s1_st3_w4"}}
    assert decode_sweep.best_options({base: 1.0, tiles: "RuntimeError('no')"}, baseline=base) == {"BLOCK_N": 64}
    # a baseline that failed to time keeps its options: the attention winner is not dropped for the defaults
    assert decode_sweep.best_options({base: "RuntimeError('no')", tiles: 0.5}, baseline=base) == {"BLOCK_N": 64}


@pytest.mark.parametrize("name,dtype,fuse", [("qwen3-tiny-hd64", torch.bfloat16, True),
                                             ("qwen3-tiny-hd64", torch.float32, True),
                                             ("qwen3-tiny-hd64", torch.bfloat16, False),
                                             ("gemma4-tiny", torch.bfloat16, None)])
def test_runner_weights_are_the_fused_decode_gemms(name, dtype, fuse):
    """Per shape, layer by layer: fused q/k/v, o, fused gate/up, down, then the head; none where the engine's
    linear does not run them (fp32, unfused projections, Gemma-4's per-layer shapes)."""
    model = random_model.build(name, dtype=dtype, tie_word_embeddings=False)
    runner = Engine(model, EngineConfig(max_batch=4, max_seq_len=64, page_size=16, fuse_projections=fuse)).runner
    got = gemm_bench.runner_weights(runner)
    if dtype is not torch.bfloat16 or fuse is not True:
        assert got is None
        return
    layers = runner.layers
    assert list(got) == ["256x128", "128x128", "512x128", "128x256", "4096x128"]
    assert got["128x128"][1] is layers[1].self_attn.o_proj.weight and got["4096x128"] == [model.lm_head.weight]
    assert all(len(ws) == len(layers) for key, ws in got.items() if key != "4096x128")


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
ALL = {"256x128": "n32_k128_s1_st3_w4", "128x128": "n32_k128_s1_st4_w4", "512x128": "n64_k128_s1_st3_w4",
       "128x256": "n32_k128_s2_st4_w4", "4096x128": "n64_k128_s1_st4_w4"}  # one split-K shape (down)


def engine_on_gpu(**opts):
    model = random_model.build("qwen3-tiny-hd64", seed=0, dtype=torch.bfloat16, device="cuda", tie_word_embeddings=False)
    cfg = EngineConfig(max_batch=8, max_seq_len=128, page_size=16, capture_all=False, fuse_projections=True,
                       decode_kernel_options={"BLOCK_N": 16, **opts})  # fused, as an engine that owns its weights
    return Engine(model, cfg)


def step_logits(engine, tiles):
    """The logits of one eager decode step of 8 rows mid-generation, with `tiles` active."""
    runner, seen = engine.runner, []
    running = decode_sweep.to_mid_generation(engine, [[5 + i] * (20 + 3 * i) for i in range(8)], 32, 4)
    sample = sampler.sample
    sampler.sample = lambda logits, *a, **k: seen.append(logits.clone()) or sample(logits, *a, **k)
    try:
        runner.set_rows(running, 8)
        with skinny_gemm.active(skinny_gemm.parse_tiles(tiles)), torch.no_grad():
            runner.decode_step(8, "greedy")
    finally:
        sampler.sample = sample
        engine.abort()
    return seen[0]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("m", [1, 5, 8, 16])
def test_kernel_matches_torch_on_the_whole_grid(m):
    """Every tile set of the benchmark's grid (the autotune's short list among them), fresh random operands each, bf16
    and fp32 outputs (the head's), the output poisoned."""
    limit = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    for n, k in [(256, 1024), (128, 2560), (64, 9728)]:  # the last two: a shorter last split (Tiles)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
        for t in skinny_gemm.candidates(n, k, limit):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            for dtype in (torch.bfloat16, torch.float32):
                y = skinny_gemm.triton_linear(x, w, t, out=torch.full((m, n), float("nan"), device="cuda", dtype=dtype))
                ref = x.float() @ w.float().t()
                assert ((y.float() - ref).norm() / ref.norm()).item() < 1e-2, (t, dtype)


@pytest.mark.gpu
@needs_cuda
def test_linear_takes_cublas_off_the_decode_path_on_cuda(monkeypatch):
    """Under an active table with the weight's shape: a prefill's packed [1, T, K], fp32 weights and more rows than
    MAX_ROWS are F.linear's, bit for bit; one token a row of bf16 weights is the kernel's."""
    calls, kernel = [], skinny_gemm.triton_linear
    monkeypatch.setattr(skinny_gemm, "triton_linear", lambda x, *a, **k: calls.append(tuple(x.shape)) or kernel(x, *a, **k))
    w = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    with skinny_gemm.active({(128, 256): Tiles(32, 128, 2, 3)}):
        for x, weight in [(torch.randn(1, 40, 256, device="cuda", dtype=torch.bfloat16), w),
                          (torch.randn(8, 1, 256, device="cuda"), w.float()),
                          (torch.randn(skinny_gemm.MAX_ROWS + 1, 1, 256, device="cuda", dtype=torch.bfloat16), w)]:
            assert torch.equal(skinny_gemm.linear(x, weight), F.linear(x, weight))
        assert calls == []
        x = torch.randn(8, 1, 256, device="cuda", dtype=torch.bfloat16)
        y, ref = skinny_gemm.linear(x, w), x.float() @ w.float().t()
    assert calls == [(8, 256)] and y.shape == (8, 1, 128)
    assert ((y.float() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
@needs_cuda
def test_decode_step_with_tiles_matches_cublas_and_launches_the_kernel():
    engine = engine_on_gpu()
    ref = step_logits(engine, {})
    got = step_logits(engine, ALL)
    assert ((got - ref).norm() / ref.norm()).item() < 2e-2
    # captured with the tiles: the graph's kernels are the split-K ones, and greedy decoding still runs to the end
    engine = engine_on_gpu(GEMM_TILES=ALL)
    assert engine.runner.gemm_tiles == skinny_gemm.parse_tiles(ALL)
    outs = engine.generate([[7] * 30, [9] * 12], Sampling(), 40, ignore_eos=True)
    assert [len(o.token_ids) for o in outs] == [40, 40]
    bucket = next(b for b in engine.runner.buckets if b >= 2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        engine.runner.graphs[(bucket, "greedy")].replay()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert sum("skinny_gemm_partial" in n for n in names) == 4 * len(engine.runner.layers) + 1, names
    assert sum("skinny_gemm_reduce" in n for n in names) == len(engine.runner.layers)  # down's two splits
