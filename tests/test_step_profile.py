"""Where a decode step's time goes: kernel classes by scope and library name, the busy union, the gaps."""
import random
from collections import Counter

import pytest
import torch

from rollout_bench.core.workload import Sampling
from rollout_bench.diagnostics import step_profile
from rollout_bench.engine import Engine, EngineConfig, sampler

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# kernel names of one Qwen3-4B decode step on the H200 (results/published/h200-2026-11-29-engine-check)
H200 = {"nvjet_sm90_tst_192x64_64x6_4x1_v_bz_TNT": "gemm",
        "nvjet_sm90_tst_64x64_64x13_4x1_v_bz_splitK_TNT": "gemm",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16": "gemm",
        "void at::native::index_elementwise_kernel<128, 4, at::native::index_copy_kernel_impl<at::n":
            "norm_rotary_elementwise",
        "triton_red_fused__to_copy__unsafe_view_add_mean_mul_pow_rsqrt_0": "norm_rotary_elementwise",
        "triton_poi_fused__unsafe_view_mul_silu_split_1": "norm_rotary_elementwise",
        "skinny_gemm_partial": "gemm", "skinny_gemm_reduce": "gemm",  # engine/skinny_gemm.py's split-K pair
        "aten::mm": "gemm", "aten::addmm": "gemm", "aten::mul": "norm_rotary_elementwise"}


def test_library_names_of_gemms_on_gpu_and_cpu():
    assert {name: step_profile.library_class(name) for name in H200} == H200


def test_union_counts_overlaps_and_nesting_once():
    assert step_profile.union_us([]) == 0
    assert step_profile.union_us([(0, 10), (2, 5), (8, 12), (20, 21)]) == 13
    assert step_profile.union_us([(5, 6), (0, 1)]) == 2


def test_split_shares_a_name_as_its_eager_launches_were():
    classes = {"k_attn": Counter(attention=3.0), "add": Counter(sampling=1.0, norm_rotary_elementwise=3.0)}
    per_name = Counter({"k_attn": 10.0, "add": 8.0, "nvjet_x": 5.0, "mystery": 1.0})
    out, unseen = step_profile.split(per_name, classes)
    assert out == {"gemm": 5.0, "attention": 10.0, "block_mask": 0.0, "norm_rotary_elementwise": 7.0, "sampling": 2.0}
    assert unseen == ["mystery", "nvjet_x"]  # never launched eagerly: by library name, and listed


def event(name, start, end, device="CPU", parent=None, kernels=(), annotation=False):
    """What step_profile reads of a torch.profiler FunctionEvent."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import Interval, Kernel

    return SimpleNamespace(name=name, time_range=Interval(start, end), device_type=getattr(DeviceType, device),
                           is_async=False, is_user_annotation=annotation, cpu_parent=parent,
                           kernels=[Kernel(k, 0, d) for k, d in kernels], self_cpu_time_total=end - start)


def test_cuda_kernels_go_to_the_scope_of_the_op_that_launched_them():
    """The CUDA branch on a hand-made profile: a kernel is its launching op's, classed by the scope above that
    op; a scope's device-side span is not a kernel, so nothing is counted twice."""
    from types import SimpleNamespace

    scope = event(step_profile.SCOPE + "attention", 0, 50, annotation=True)
    flex = event("triton_tem_fused_flex_attention_0", 1, 40, parent=scope,
                 kernels=[("triton_tem_fused_flex_attention_0", 30)])
    mm = event("aten::mm", 60, 70, kernels=[("nvjet_sm90_tst_64x64_TNT", 20)])
    add = event("aten::add", 71, 72, kernels=[("vectorized_elementwise_kernel", 5)])
    named = SimpleNamespace(events=lambda: [scope, flex, mm, add])
    classes = step_profile.attribute(named, on_cuda=True)
    assert classes == {"triton_tem_fused_flex_attention_0": Counter(attention=30),
                       "nvjet_sm90_tst_64x64_TNT": Counter(gemm=20),
                       "vectorized_elementwise_kernel": Counter(norm_rotary_elementwise=5)}
    replay = SimpleNamespace(events=lambda: [
        event("cudaGraphLaunch", 0, 5),  # host side: not a kernel
        event(step_profile.SCOPE + "attention", 100, 140, device="CUDA", annotation=True),
        event("triton_tem_fused_flex_attention_0", 100, 130, device="CUDA"),
        event("nvjet_sm90_tst_64x64_TNT", 130, 150, device="CUDA"),
        event("vectorized_elementwise_kernel", 160, 165, device="CUDA")])
    per_name, spans = step_profile.timeline(replay, on_cuda=True)
    assert per_name == {"triton_tem_fused_flex_attention_0": 30, "nvjet_sm90_tst_64x64_TNT": 20,
                        "vectorized_elementwise_kernel": 5}
    assert step_profile.union_us(spans) == 55
    out, unseen = step_profile.split(per_name, classes)
    assert (out["attention"], out["gemm"], out["norm_rotary_elementwise"], unseen) == (30, 20, 5, [])


def test_ops_of_the_package_namespace_are_not_scopes():
    """skinny_gemm's rollout_bench::decode_linear shares the scopes' prefix: an aten::mm under it is a GEMM, not a
    class named 'decode_linear' (a KeyError in split on the H200, h200-2026-12-04-session16). A real CPU profile of
    the op under the sampling scope and outside any."""
    from torch.profiler import ProfilerActivity, profile

    from rollout_bench.engine import skinny_gemm

    x, w = torch.randn(4, 64), torch.randn(32, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        skinny_gemm.decode_linear(x, w)
        with torch.profiler.record_function(step_profile.SCOPE + "sampling"):
            skinny_gemm.decode_linear(x, w)
    classes = step_profile.attribute(prof, on_cuda=False)
    assert classes["aten::mm"]["gemm"] > 0 and classes["aten::mm"]["sampling"] > 0
    assert set(classes["aten::mm"]) == {"gemm", "sampling"}
    per_name, _ = step_profile.timeline(prof, on_cuda=False)
    out, _ = step_profile.split(per_name, classes)
    assert set(out) == set(step_profile.CLASSES) and out["gemm"] > 0
    assert step_profile.scope_of("rollout_bench::decode_linear") is None
    assert step_profile.scope_of(step_profile.SCOPE + "attention") == "attention"


@pytest.fixture(scope="module")
def engine(tiny_assets):
    cfg = EngineConfig(max_batch=4, max_seq_len=192, decode_chunk=16)
    return Engine.from_pretrained(tiny_assets["model"], cfg)


def prompts(engine, n=3):
    rng = random.Random(0)
    return [[rng.randrange(engine.runner.vocab) for _ in range(rng.randint(20, 40))] for _ in range(n)]


def test_profile_of_the_eager_step_on_cpu(engine):
    rows = prompts(engine)
    before = engine.generate(rows, Sampling(), 8)
    attend, masks, sample = engine.runner.attn_decode, engine.runner.decode_inputs, sampler.sample
    r = step_profile.profile(engine, rows, new_tokens=48, steps=8)
    assert (r["rows"], r["steps"], r["replay"]) == (3, 8, "eager")
    assert all(r["class_ms"][c] > 0 for c in step_profile.CLASSES), r["class_ms"]
    # host ops' own times add up to their top-level spans: every microsecond is in exactly one class
    assert sum(r["class_ms"].values()) == pytest.approx(r["busy_ms"], rel=0.01)
    assert r["profiled_step_ms"] >= r["busy_ms"] and r["gaps_ms"] >= 0 and r["step_ms"] > 0
    top = {name: cls for name, cls, _ in r["top"]}
    assert top.get("aten::mm") == "gemm"
    assert any(cls == "attention" and "scaled_dot_product" in name for name, cls in top.items()), r["top"]
    # the engine is left idle and as it was: the scopes are gone and a new request decodes the same
    assert not engine.scheduler.has_work
    assert engine.runner.attn_decode is attend and sampler.sample is sample
    assert "decode_inputs" not in vars(engine.runner) and engine.runner.decode_inputs == masks
    assert engine.generate(rows, Sampling(), 8) == before


def test_attention_and_sampling_come_from_the_scopes(engine):
    """Without the scopes nothing names attention, the BlockMask or the sampler: those classes are the scopes'."""
    from torch.profiler import ProfilerActivity, profile

    from rollout_bench.diagnostics import decode_sweep

    running = decode_sweep.to_mid_generation(engine, prompts(engine, 2), 48, 4)
    bucket = next(b for b in engine.runner.buckets if b >= len(running))
    try:
        for named in (False, True):
            engine.runner.set_rows(running, bucket)
            with (step_profile.scoped(engine.runner) if named else torch.no_grad()), \
                    profile(activities=[ProfilerActivity.CPU]) as prof, torch.no_grad():
                engine.runner.decode_step(bucket, "greedy")
            classes = step_profile.attribute(prof, on_cuda=False)
            per_name, _ = step_profile.timeline(prof, on_cuda=False)
            out, _ = step_profile.split(per_name, classes)
            assert (out["attention"] > 0 and out["block_mask"] > 0 and out["sampling"] > 0) == named, out
            assert (out["attention"] == out["block_mask"] == out["sampling"] == 0) != named, out
    finally:
        engine.abort()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("graphs,rows", [(True, 8), (False, 8), (True, 1)])
def test_profile_on_gpu(graphs, rows):
    """On CUDA the timed steps are graph replays (or eager steps without graphs): every class has kernels,
    named by one eager step, and kernels on one stream do not overlap, so the classes add up to the busy time.
    One row too (the headline profile's B = 1), replayed in the smallest bucket's graph."""
    from rollout_bench.diagnostics import random_model

    model = random_model.build("qwen3-tiny", seed=0, device="cuda", tie_word_embeddings=False)
    cfg = EngineConfig(max_batch=8, max_seq_len=192, page_size=16, decode_chunk=8, decode_chunk_no_eos=8,
                       capture_all=False, decode_kernel_options={"BLOCK_N": 16}, cuda_graphs=graphs)
    engine = Engine(model, cfg)
    assert engine.runner.graphs_on == graphs
    r = step_profile.profile(engine, prompts(engine, rows), new_tokens=64)
    assert (r["rows"], r["replay"]) == (rows, "graph" if graphs else "eager") and r["kernels_per_step"] > 0
    assert r["bucket"] == engine.runner.bucket(rows)
    assert all(r["class_ms"][c] > 0 for c in step_profile.CLASSES), r
    assert sum(r["class_ms"].values()) == pytest.approx(r["busy_ms"], rel=0.02)
    assert r["gaps_ms"] >= 0 and r["step_ms"] > 0
    assert not engine.scheduler.has_work
