"""hf_static, transformers_cb and cb_sync against the reference hf_generate, on a tiny random Qwen3 (CPU)."""
import json
from dataclasses import replace

import pytest
import torch

from rollout_bench import MODEL_CONFIGS
from rollout_bench.backends import cb_sync, hf_generate, hf_model, hf_static, transformers_cb
from rollout_bench.core import envinfo
from rollout_bench.core.workload import GenSpec, Sampling

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [100, 200, 300, 400, 500, 600, 700], [42] * 11, [3, 1, 4, 1, 5, 9, 2, 6]]
MAX_NEW = 10


@pytest.fixture(scope="module", autouse=True)
def one_cpu_thread():
    # Tiny matmuls on a busy 2-core box: 2-way OpenMP on the main thread measured up to 20x slower than 1.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(**json.loads((MODEL_CONFIGS / "qwen3-tiny.json").read_text()))
    # Tied random embeddings make greedy decoding repeat the prompt's last token; untied, it wanders,
    # so token-identical output actually means something.
    cfg.tie_word_embeddings = False
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("qwen3-tiny")
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    return str(path)


def make_spec(model_dir, variant="default", **kw):
    spec = GenSpec(model_dir=model_dir, adapter_dir=None, variant=variant, batch_size=3, max_new_tokens=MAX_NEW,
                   sampling=Sampling(), ignore_eos=True, eos_token_id=1, pad_token_id=0,
                   max_prompt_tokens=max(map(len, PROMPTS)))
    return replace(spec, **kw)


@pytest.fixture(scope="module")
def adapter_dir(model_dir, tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                        "up_proj", "down_proj"], init_lora_weights=False)
    path = tmp_path_factory.mktemp("lora")
    get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), cfg).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def reference(model_dir):
    """hf_generate greedy, ignore_eos, 2 completions per prompt."""
    return hf_generate.load(make_spec(model_dir)).generate(PROMPTS, 2)


@pytest.fixture(scope="module")
def eos_case(model_dir, reference):
    """An EOS id the greedy model emits mid-completion, and hf_generate's output when it stops there."""
    eos = reference[2][4]
    spec = make_spec(model_dir, ignore_eos=False, eos_token_id=eos)
    ref = hf_generate.load(spec).generate(PROMPTS, 2)
    assert any(len(o) < MAX_NEW for o in ref)  # the early-stop path is exercised
    return spec, ref


def test_reference_lengths(reference):
    assert [len(o) for o in reference] == [MAX_NEW] * 2 * len(PROMPTS)
    assert len({tuple(o) for o in reference}) > 1


def test_transformers_cb_greedy_matches_hf_generate(model_dir, reference, eos_case):
    gen = transformers_cb.load(make_spec(model_dir, "paged_sdpa"))
    try:
        out = gen.generate(PROMPTS, 2)
        assert out == reference
    finally:
        gen.close()
    spec, ref = eos_case
    gen = transformers_cb.load(replace(spec, variant="paged_sdpa"))
    try:
        assert gen.generate(PROMPTS, 2) == ref
    finally:
        gen.close()


def test_transformers_cb_persistent_manager_reused(model_dir, reference):
    gen = transformers_cb.load(make_spec(model_dir, "paged_sdpa"))
    try:
        first = gen.generate(PROMPTS, 2)
        mgr, cache = gen.manager(), gen.manager().batch_processor.cache
        second = gen.generate(PROMPTS, 2)
        assert gen.manager() is mgr and mgr.batch_processor.cache is cache
        assert first == second == reference
        assert gen.memory()["reserved_cache_gb"] > 0
    finally:
        gen.close()


def test_transformers_cb_in_harness_keeps_batch_size(model_dir):
    """The warm-up (1 prompt) builds the persistent manager; it must still run batch_size requests at once."""
    from rollout_bench.generation import measure  # imports jsonschema, which GPU-only images may lack

    spec = make_spec(model_dir, "paged_sdpa")
    gens = []

    def factory(s):
        gens.append(transformers_cb.load(s))
        return gens[-1]

    rounds = [PROMPTS, [[t + 1 for t in p] for p in PROMPTS]]  # each round's own prompts, the warm-up another
    res = measure.measure(factory, spec, rounds, [[7, 7, 7]])
    assert res["fields"]["n_decoded_tokens"] == MAX_NEW * len(PROMPTS)
    assert res["fields"]["peak_memory_gb"]["reserved_cache_gb"] > 0
    assert gens[0].info() == {}  # closed by the harness
    assert spec.batch_size == 3 and transformers_cb.cb_config(spec).max_requests_per_batch == 3


def test_transformers_cb_sampling_honoured(model_dir):
    """top_k=3 at temperature 1.5: every sampled token is among the model's top 3; seeded calls repeat."""
    sampling = Sampling(temperature=1.5, top_k=3, seed=7)
    gen = transformers_cb.load(make_spec(model_dir, "paged_sdpa", sampling=sampling))
    try:
        a = gen.generate(PROMPTS[:3], 1)
        b = gen.generate(PROMPTS[:3], 1)
    finally:
        gen.close()
    assert a == b and all(len(o) == MAX_NEW for o in a)
    model = hf_model.load_model(make_spec(model_dir))
    greedy_everywhere = True
    for prompt, out in zip(PROMPTS, a):
        seq = torch.tensor([prompt + out])
        with torch.no_grad():
            logits = model(seq).logits[0, len(prompt) - 1:-1]  # [T, V]: the step that produced each token
        top3 = logits.topk(3).indices
        assert all(tok in top3[t] for t, tok in enumerate(out))
        greedy_everywhere &= all(tok == top3[t, 0] for t, tok in enumerate(out))
    assert not greedy_everywhere  # it sampled


def test_generate_batch_inside_inference_mode_kills_worker(model_dir):
    """transformers 5.17 sharp edge: the manager's buffers are made on the calling thread; under
    inference_mode they are inference tensors and the worker thread's in-place reset kills it. No exception
    reaches the caller: requests come back FAILED, or are dropped if the worker died before they were queued.
    The backend switches inference_mode off around its call."""
    spec = make_spec(model_dir, "paged_sdpa")
    model = hf_model.load_model(spec, attn_implementation="paged|sdpa")
    with torch.inference_mode():
        results = model.generate_batch(PROMPTS[:2], generation_config=transformers_cb.cb_generation_config(spec),
                                       continuous_batching_config=transformers_cb.cb_config(spec),
                                       persistent_manager=True)  # kept, so its fatal error can be read
    fatal = model._cached_continuous_batching_manager.background_thread_status.fatal_error
    model.destroy_cached_continuous_batching_manager()
    assert "Inplace update to inference tensor outside InferenceMode" in str(fatal)
    assert all(r.error is not None for r in results.values())
    gen = transformers_cb.load(spec)
    try:
        with torch.inference_mode():
            assert len(gen.generate(PROMPTS[:2], 1)) == 2
    finally:
        gen.close()


def test_cb_sync_eager_matches_hf_generate(model_dir, reference, eos_case):
    gen = cb_sync.load(make_spec(model_dir, "eager"))
    assert gen.generate(PROMPTS, 2) == reference
    assert gen.generate(PROMPTS, 2) == reference  # the driver (cache, scheduler) is reusable across rounds
    info = gen.info()
    assert info["steps"]["decode_eager"] > 0 and info["steps"]["prefill"] > 0
    assert gen.memory()["cuda_graphs"] is False
    spec, ref = eos_case
    assert cb_sync.load(replace(spec, variant="eager")).generate(PROMPTS, 2) == ref


def test_cb_sync_failed_capture_falls_back_honestly(model_dir, reference):
    """Forcing the graph path on CPU makes the capture fail: the step reruns eagerly and the status says why."""
    gen = cb_sync.load(make_spec(model_dir, "eager"))
    gen.graphs = True
    assert gen.generate(PROMPTS, 2) == reference
    status = gen.memory()
    assert status["cuda_graphs"] is False and status["graph_note"].startswith("CUDA graph step failed")
    assert gen.info()["steps"]["decode_eager"] > 0


def test_lora_unmerged_matches_hf_generate(model_dir, adapter_dir, reference):
    spec = make_spec(model_dir, adapter_dir=adapter_dir)
    ref = hf_generate.load(spec).generate(PROMPTS, 1)
    assert ref != reference[::2]  # the adapter changes the output
    cb = transformers_cb.load(replace(spec, variant="paged_sdpa"))
    try:
        assert cb.generate(PROMPTS, 1) == ref
    finally:
        cb.close()
    assert cb_sync.load(replace(spec, variant="eager")).generate(PROMPTS, 1) == ref
    assert hf_static.load(spec).generate(PROMPTS, 1) == ref


def test_hf_static_matches_hf_generate_on_cpu(model_dir, reference):
    """On CPU transformers skips the compile (static cache only); covers the fixed-shape chunk filling."""
    gen = hf_static.load(make_spec(model_dir))
    assert gen.generate(PROMPTS, 2) == reference  # 10 sequences in chunks of 3: last chunk filled
    assert gen.info()["compiled"] is False


def test_unavailable_reasons_say_what_would_run_them():
    assert cb_sync.unavailable("eager", 0) is None
    assert "GPU" in cb_sync.unavailable("graphs", 0)
    assert transformers_cb.unavailable("paged_sdpa", 0) is None
    for variant, (dist, _) in transformers_cb.VARIANT_REQUIRES.items():
        assert "GPU" in transformers_cb.unavailable(variant, 0)
        if envinfo.version(dist) is None:
            reason = transformers_cb.unavailable(variant, 1)
            assert dist in reason and ("pip install" in reason or "build" in reason)
    assert all("|" not in v for v in transformers_cb.VARIANTS)


def test_unknown_options_rejected(model_dir):
    with pytest.raises(ValueError, match="num_blockz"):
        transformers_cb.cb_config(make_spec(model_dir, "paged_sdpa", options={"num_blockz": 4}))
    with pytest.raises(ValueError, match="mode"):
        hf_static.compile_config(make_spec(model_dir, options={"mode": "default"}))
    cfg = transformers_cb.cb_config(make_spec(model_dir, "paged_sdpa", options={"num_blocks": 9, "block_size": 16}))
    assert (cfg.num_blocks, cfg.block_size) == (9, 16)


def agreement(a, b) -> float:
    pairs = [(x, y) for o, r in zip(a, b) for x, y in zip(o, r)]
    return sum(x == y for x, y in pairs) / len(pairs)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("lora", [False, True])
def test_hf_static_compiles_on_gpu(model_dir, adapter_dir, lora):
    spec = make_spec(model_dir, device="cuda", adapter_dir=adapter_dir if lora else None)
    ref = hf_generate.load(spec).generate(PROMPTS, 1)
    gen = hf_static.load(spec)
    out = gen.generate(PROMPTS, 1)
    out = gen.generate(PROMPTS, 1)  # second call: replays, no recompile
    print("hf_static", "lora" if lora else "base", gen.info(), "agreement", agreement(out, ref))
    assert gen.info()["compiled"] is True
    assert [len(o) for o in out] == [MAX_NEW] * len(PROMPTS)
    # compiled kernels may flip near-ties on a random model; most tokens must still agree
    assert agreement(out, ref) >= 0.8


@pytest.mark.gpu
@needs_cuda
def test_transformers_cb_runs_on_gpu(model_dir):
    sized = {"num_blocks": 64, "block_size": 32, "max_batch_tokens": 256}
    spec = make_spec(model_dir, "paged_sdpa", device="cuda", options=sized)
    ref = hf_generate.load(spec).generate(PROMPTS, 2)
    gen = transformers_cb.load(spec)
    try:
        out = gen.generate(PROMPTS, 2)
        print("transformers_cb", gen.info(), gen.memory(), "agreement", agreement(out, ref))
        assert [len(o) for o in out] == [MAX_NEW] * 2 * len(PROMPTS)
        assert agreement(out, ref) >= 0.8
    finally:
        gen.close()


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("lora", [False, True])
def test_cb_sync_graphs_capture_on_gpu(model_dir, adapter_dir, lora):
    spec = make_spec(model_dir, "graphs", device="cuda", adapter_dir=adapter_dir if lora else None,
                     options={"num_blocks": 64, "block_size": 32, "max_batch_tokens": 256})
    eager = cb_sync.load(replace(spec, variant="eager")).generate(PROMPTS, 2)
    gen = cb_sync.load(spec)
    out = gen.generate(PROMPTS, 2)
    out = gen.generate(PROMPTS, 2)
    info = gen.info()
    print("cb_sync graphs", "lora" if lora else "base", info, "agreement", agreement(out, eager))
    assert info["cuda_graphs"], info["graph_note"]
    assert info["steps"]["decode_replayed"] > 0
    assert [len(o) for o in out] == [MAX_NEW] * 2 * len(PROMPTS)
    assert agreement(out, eager) >= 0.8
