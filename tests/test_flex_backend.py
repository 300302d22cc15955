"""The flex backend in the pipeline: variants, output equal to hf_generate, the correctness gate."""
import pytest
import torch

from rollout_bench.backends import flex, hf_generate, hf_model
from rollout_bench.core.workload import GenSpec, Sampling
from rollout_bench.diagnostics import random_model

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [100, 200, 300, 400, 500, 600, 700], [42] * 11, list(range(300, 340))]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    from peft import LoraConfig, get_peft_model

    d = tmp_path_factory.mktemp("flex")
    random_model.build("qwen3-tiny", seed=0, tie_word_embeddings=False).save_pretrained(d / "model")
    base = random_model.build("qwen3-tiny", seed=0, tie_word_embeddings=False)
    torch.manual_seed(1)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    get_peft_model(base, cfg).save_pretrained(d / "lora")
    return str(d / "model"), str(d / "lora")


def spec(model_dir, variant="eager", **kw):
    base = {"model_dir": model_dir, "adapter_dir": None, "variant": variant, "batch_size": 3, "max_new_tokens": 10,
            "sampling": Sampling(), "ignore_eos": True, "eos_token_id": 1, "pad_token_id": 0,
            "max_prompt_tokens": max(map(len, PROMPTS)), "options": {"page_size": 16}}
    return GenSpec(**{**base, **kw})


def test_variants_and_availability():
    assert flex.VARIANTS == ("graphs", "eager", "peft_unmerged", "fa4")
    assert "CUDA GPU" in flex.unavailable("graphs", 0)
    assert flex.unavailable("graphs", 1) is None and flex.unavailable("eager", 0) is None
    assert flex.unavailable("peft_unmerged", 0) is None


def test_the_fa4_variant_is_skipped_without_flash_attn_4_and_otherwise_asks_fa4_or_fails(dirs, monkeypatch):
    """fa4: graphs with fa4_prefill 'on' (a host where FA4 cannot run fails the job with the guard's reason, never
    times Triton); without flash-attn-4 installed (absent by design: another environment group) it is skipped."""
    from rollout_bench.core import envinfo

    assert "CUDA GPU" in flex.unavailable("fa4", 0)
    monkeypatch.setattr(envinfo, "version", lambda p: None if p == "flash-attn-4" else "1.0")
    reason = flex.unavailable("fa4", 1)
    assert "flash-attn-4" in reason and "envs/fa4.yaml" in reason
    monkeypatch.setattr(envinfo, "version", lambda p: "4.0.0b36")
    assert flex.unavailable("fa4", 1) is None
    assert flex.engine_config(spec(dirs[0], variant="fa4")).fa4_prefill == "on"
    assert flex.engine_config(spec(dirs[0], variant="graphs")).fa4_prefill == "auto"


@pytest.mark.parametrize("variant, lora", [("eager", False), ("eager", True), ("peft_unmerged", True)])
def test_matches_hf_generate(dirs, variant, lora):
    model_dir, lora_dir = dirs
    s = spec(model_dir, variant, adapter_dir=lora_dir if lora else None)
    ref = hf_generate.load(s).generate(PROMPTS, 2)
    gen = flex.load(s)
    assert gen.generate(PROMPTS, 2) == ref
    mem = gen.memory()
    assert mem["reserved"] > 0
    gen.close()


def test_last_round_reports_the_bytes_a_decode_read(dirs):
    """The round's decode bandwidth is the engine's byte count over its decode time; off CUDA there is no copy
    rate to set it against, so no fraction (rather than a made-up one)."""
    gen = flex.load(spec(dirs[0]))
    gen.generate(PROMPTS, 2)
    last, bw = gen.last_call, gen.info()["bandwidth"]
    weights = gen.engine.step_weight_bytes
    assert last["decode_gb"] * 1e9 > last["decode_steps"] * weights * 0.999  # at least the weights every step
    # against the engine's unrounded totals (one call on a fresh engine): the record's own rounded gb and s are
    # off by up to 1% at this size, and the rate is kept to 0.1 GB/s, so allow half that step
    t = gen.engine.timings
    assert last["decode_gb"] == round(t["decode_bytes"] / 1e9, 3)
    assert last["decode_gb_per_s"] == pytest.approx(t["decode_bytes"] / 1e9 / t["decode_s"], rel=0, abs=0.05 + 1e-9)
    assert bw["decode_gb_per_s"] == last["decode_gb_per_s"] and bw["weights_gb_per_step"] == round(weights / 1e9, 3)
    assert bw["copy_gb_per_s"] is None and bw["of_copy_rate"] is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_copy_rate_is_measured_on_the_gpu():
    from rollout_bench.host import copy_rate

    gbps = copy_rate.measure("cuda", gib=0.5)
    assert 100 < gbps < 20_000, gbps  # an H200 copies at ~4,300 GB/s (read + write)


def test_options_override_engine_config(dirs):
    s = spec(dirs[0], options={"page_size": 32, "decode_chunk": 2, "num_pages": 9})
    cfg = flex.engine_config(s)
    assert (cfg.page_size, cfg.decode_chunk, cfg.num_pages, cfg.max_batch) == (32, 2, 9, 3)
    assert cfg.max_seq_len == s.max_seq_len and not cfg.cuda_graphs
    with pytest.raises(AssertionError, match="unknown flex engine options"):
        flex.engine_config(spec(dirs[0], options={"pagesize": 32}))


@pytest.mark.parametrize("lora", [False, True])
def test_gate_passes(dirs, lora):
    s = spec(dirs[0], adapter_dir=dirs[1] if lora else None)
    res = flex.gate(s, flex.load(s))
    print(f"gate lora={lora}: max_abs_logit_diff={res['max_abs_logit_diff']:.2e} "
          f"exact={res['greedy_exact']}/{res['greedy_tokens']}")
    assert res["passed"] and res["max_abs_logit_diff"] < 1e-4
    assert res["greedy_exact"] == res["greedy_tokens"]


def test_bf16_gate_judges_against_float32(dirs, monkeypatch):
    """Below float32 the gate's judge is HF in float32 on the same weights, its tolerance widened by
    HF's own bf16 error (small on this shallow model: the gate stays about as tight as 0.25)."""
    loaded, load = [], hf_model.load_model
    monkeypatch.setattr(hf_model, "load_model", lambda spec, **kw: loaded.append(spec.dtype) or load(spec, **kw))
    s = spec(dirs[0], dtype="bfloat16")
    res = flex.gate(s, flex.load(s))
    assert loaded == ["bfloat16", "float32"]
    assert res["passed"] and res["reference"] == "float32" and res["base_logit_tol"] == 0.25, res
    assert 0 < res["reference_error"] < 0.05 and res["logit_tol"] == pytest.approx(0.25 + 2 * res["reference_error"])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gate_fails_on_wrong_weights(dirs, monkeypatch, dtype):
    """A reference with other weights must fail the gate (the gate can say no)."""
    other = random_model.build("qwen3-tiny", seed=5, tie_word_embeddings=False)
    monkeypatch.setattr(hf_model, "load_model", lambda spec, **kw: other)
    s = spec(dirs[0], dtype=dtype)
    assert not flex.gate(s, flex.load(s))["passed"]
