"""The compiled + CUDA-graph path on a GPU (tiny Qwen3, float32): greedy identical to HF with either decode
BlockMask layout (split K/V, one tile or several a split; full blocks), graph replays equal to the uncompiled
eager path for sampled GRPO groups under preemption; a GQA ratio of 3 (tiny Llama) decoding through the
flex-decoding kernel."""
import pytest
import torch

from rollout_bench.core.workload import Sampling
from rollout_bench.diagnostics import random_model
from rollout_bench.engine import Engine, EngineConfig

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
P = 16


@pytest.fixture(scope="module")
def model():
    return random_model.build("qwen3-tiny", seed=0, device="cuda", tie_word_embeddings=False)


def prompts(n=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 4096, (int(k),), generator=g).tolist() for k in torch.randint(3, 60, (n,), generator=g)]


def config(**kw):
    base = {"max_batch": 8, "max_seq_len": 96, "page_size": P, "decode_chunk": 4, "decode_chunk_no_eos": 4,
            "num_pages": 24, "capture_all": False,
            "decode_kernel_options": {"BLOCK_N": P}}  # the default 64-wide KV tile would not divide a page
    return EngineConfig(**{**base, **kw})


@pytest.mark.parametrize("split_kv", [None, 2, 1])
def test_graphs_greedy_match_hf(model, split_kv):
    """Both decode layouts: at 2 KV heads and up to 8 rows Inductor's rule splits the K/V (every page
    partial, masks.decode_block_mask) into 16 or more splits of one tile; SPLIT_KV 2 walks several tiles
    a split, across pages, through the index list; SPLIT_KV 1 keeps the earlier pages as full blocks."""
    ps = prompts()
    opts = {"BLOCK_N": P} if split_kv is None else {"BLOCK_N": P, "SPLIT_KV": split_kv}
    engine = Engine(model, config(decode_kernel_options=opts))
    assert engine.runner.graphs_on
    mask, _ = engine.runner.decode_inputs(8)
    assert (mask.full_kv_num_blocks is None) == (split_kv != 1) == (engine.runner.kv_splits(8, 2) > 1)
    outs = engine.generate(ps, Sampling(), 24, ignore_eos=True)
    assert engine.scheduler.preemptions > 0
    with torch.no_grad():
        for p, o in zip(ps, outs):
            ref = model.generate(torch.tensor([p], device="cuda"), max_new_tokens=24, min_new_tokens=24,
                                 do_sample=False, pad_token_id=0)[0, len(p):].tolist()
            assert o.token_ids == ref
    assert engine.runner.graphs, "decode ran through captured graphs"


@pytest.mark.parametrize("sampling", [Sampling(temperature=0.1, top_p=0.97, top_k=5, min_p=0.5, seed=3),
                                      Sampling(temperature=1.0, seed=3)], ids=["topk", "temperature"])
def test_graphs_sampling_equals_uncompiled(model, sampling):
    """Each sampling path in the captured graphs (the 'temperature' one compiled, option sampler_temperature_path)
    draws the uncompiled sorted path's tokens."""
    ps = prompts(6, seed=2)
    fast = Engine(model, config(sampler_temperature_path=True)).generate(ps, sampling, 20, n=4, ignore_eos=True)
    slow = Engine(model, config(cuda_graphs=False, compile=False, num_pages=80, max_batch=24,
                                sampler_temperature_path=False)).generate(
        ps, sampling, 20, n=4, ignore_eos=True)
    assert [o.token_ids for o in fast] == [o.token_ids for o in slow]
    torch.testing.assert_close(torch.tensor([o.logprobs for o in fast]), torch.tensor([o.logprobs for o in slow]),
                               atol=1e-3, rtol=0)


def test_gqa3_decode_runs_the_flex_decoding_kernel_and_passes_the_gate():
    """Hq / Hkv = 3 (Llama-3.2-3B's 24 / 8): decode folds each KV head's 3 query heads into the query
    axis, so Inductor takes its split-KV flex-decoding kernel (BACKEND TRITON_DECODE raises where it
    cannot); the graphs pass the gate against HF and sample as the uncompiled path does."""
    from rollout_bench.engine import correctness

    gqa3 = random_model.build("llama-tiny", seed=0, device="cuda", tie_word_embeddings=False,
                              hidden_size=96, num_attention_heads=6, num_key_value_heads=2)
    engine = Engine(gqa3, config(decode_kernel_options={"BLOCK_N": P, "BACKEND": "TRITON_DECODE"}))
    assert engine.runner.graphs_on and engine.runner.q_rows == [3, 3]
    res = correctness.check(engine, gqa3, correctness.gate_prompts(4096, P), 24, correctness.LOGIT_TOL["float32"])
    assert res["passed"], res
    assert engine.runner.graphs, "decode ran through captured graphs"
    ps = prompts(6, seed=2)
    sampling = Sampling(temperature=0.1, top_p=0.97, top_k=5, min_p=0.5, seed=3)
    fast = engine.generate(ps, sampling, 20, n=4, ignore_eos=True)
    slow = Engine(gqa3, config(cuda_graphs=False, compile=False, num_pages=80, max_batch=24)).generate(
        ps, sampling, 20, n=4, ignore_eos=True)
    assert [o.token_ids for o in fast] == [o.token_ids for o in slow]
    torch.testing.assert_close(torch.tensor([o.logprobs for o in fast]), torch.tensor([o.logprobs for o in slow]),
                               atol=1e-3, rtol=0)


def test_offloaded_pristine_is_drift_free_and_holds_no_gpu_copy():
    """pristine_on_host: the base lives in pinned host memory; merged weights equal the on-GPU
    double copy's bit for bit, through perturb+refresh cycles and a restore."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    from rollout_bench.core.workload import LORA_TARGETS
    from rollout_bench.engine.lora import sha256

    def peft(seed=0):
        base = random_model.build("qwen3-tiny", seed=seed, device="cuda", dtype=torch.bfloat16,
                                  tie_word_embeddings=False)
        torch.manual_seed(seed + 1)
        return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=list(LORA_TARGETS),
                                               init_lora_weights=False)).cuda()

    on_gpu, offloaded = Engine(peft(), config()), Engine(peft(), config(pristine_on_host=True))
    state = {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft()).items()}
    assert all(w.device.type == "cpu" and w.is_pinned() for w in offloaded.lora.pristine.values())
    assert all(w.device.type == "cuda" for w in on_gpu.lora.pristine.values())
    assert offloaded.weight_bytes() < on_gpu.weight_bytes() and offloaded.weight_bytes("cpu") > 0
    base = sha256(offloaded.lora.pristine.items())
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(3):
        noisy = {k: v + 0.01 * torch.randn(v.shape, generator=g, device="cuda").to(v.dtype) for k, v in state.items()}
        for e in (on_gpu, offloaded):
            e.refresh_lora(noisy, 2.0)
    for e in (on_gpu, offloaded):
        e.refresh_lora(state, 2.0)
    assert sha256(offloaded.lora.live.items()) == sha256(on_gpu.lora.live.items())
    assert sha256(offloaded.lora.pristine.items()) == base
    ps = prompts(4, seed=3)
    assert [o.token_ids for o in offloaded.generate(ps, Sampling(), 8, ignore_eos=True)] == \
           [o.token_ids for o in on_gpu.generate(ps, Sampling(), 8, ignore_eos=True)]


def test_step_sweep_times_every_candidate_and_leaves_engine_usable(model):
    from rollout_bench.diagnostics import decode_sweep

    engine = Engine(model, config())
    ps = prompts(6, seed=4)
    res = decode_sweep.step_sweep(engine, ps, 24, candidates=({}, {"num_warps": 4}), rounds=2)
    assert set(res["step_ms"]) == {"{}", '{"num_warps": 4}'}
    assert all(isinstance(v, float) and v > 0 for v in res["step_ms"].values()), res
    assert res["rows"] == 6 and not engine.scheduler.has_work
    out = engine.generate(ps, Sampling(), 24, ignore_eos=True)  # still decodes, with its own options
    assert all(len(o.token_ids) == 24 for o in out)


def test_options_per_batch_size_capture_each_bucket_with_its_own_and_stay_exact(model):
    """One engine serving several batch sizes (a generation job's cells): bucket 2 captured with the entry tuned
    at 2 (one KV split), buckets 4 and 8 with the one at 8 (Inductor's rule); greedy still HF's, each completion to
    its own budget."""
    by_batch = {2: {"BLOCK_N": P, "SPLIT_KV": 1}, 8: {"BLOCK_N": P}}
    engine = Engine(model, config(decode_kernel_options={}, decode_kernel_options_by_batch=by_batch))
    runner = engine.runner
    assert runner.per_bucket and engine.config.decode_options_for(2) == by_batch[2]
    assert engine.config.decode_options_for(4) == engine.config.decode_options_for(64) == by_batch[8]
    ps = prompts(8, seed=4)
    budgets = [3 + 2 * i for i in range(len(ps))]  # every bucket from 8 rows down to 2 as rows finish
    outs = engine.generate(ps, Sampling(), budgets, ignore_eos=True)
    assert [len(o.token_ids) for o in outs] == budgets
    assert {b for b, _ in runner.graphs} >= {2, 4, 8}
    with torch.no_grad():
        for p, o, m in zip(ps, outs, budgets):
            ref = model.generate(torch.tensor([p], device="cuda"), max_new_tokens=m, min_new_tokens=m,
                                 do_sample=False, pad_token_id=0)[0, len(p):].tolist()
            assert o.token_ids == ref
    assert runner.kv_splits(2, 2, engine.config.decode_options_for(2)) == 1
    assert runner.kv_splits(8, 2, engine.config.decode_options_for(8)) > 1


def test_a_cells_sampling_path_is_captured_before_its_rounds(model):
    """flex's generator captures the `temperature` sampling path (temperature 1, no truncation) of every bucket a
    cell can shrink to before its warm-up: no graph is captured inside a timed round."""
    from dataclasses import replace

    from rollout_bench.backends import flex
    from rollout_bench.core.workload import GenSpec

    engine = Engine(model, config(capture_all=True, sampler_temperature_path=True))
    spec = GenSpec(model_dir="-", adapter_dir=None, variant="graphs", batch_size=8, max_new_tokens=8,
                   sampling=Sampling(temperature=1.0), ignore_eos=True, eos_token_id=0, pad_token_id=0,
                   max_prompt_tokens=60, device="cuda", dtype="float32")
    gen = flex.Generator(spec, engine=engine)
    assert not any(how == "temperature" for _, how in engine.runner.graphs)
    gen.prepare(spec)
    captured = set(engine.runner.graphs)
    assert {(b, "temperature") for b in engine.runner.buckets} <= captured
    gen.generate(prompts(4, seed=5), 2, max_new_tokens=[2, 5, 3, 8, 1, 4, 6, 7])
    assert set(engine.runner.graphs) == captured
    assert gen.retarget(replace(spec, batch_size=4)) and not gen.retarget(replace(spec, batch_size=16))
