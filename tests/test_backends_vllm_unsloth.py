"""vllm / unsloth backends on a CPU machine: skip reasons, the mapping onto each engine's API (fake
modules stand in for the engines), the adapter weight copy, and the seeds' integration notes
checked against the pinned releases."""
import json
import os
import re
import sys
import types
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rollout_bench import ROOT, backends
from rollout_bench.backends import hf_generate, hf_model
from rollout_bench.backends import unsloth as us
from rollout_bench.backends import vllm as vb
from rollout_bench.core import envinfo
from rollout_bench.core.workload import SAMPLING_PRESETS, GenSpec, Sampling
from rollout_bench.grpo import availability
from rollout_bench.host import wheelhouse as wh


def spec(**kw) -> GenSpec:
    base = dict(model_dir="/m", adapter_dir=None, variant="default", batch_size=8, max_new_tokens=16,
                sampling=Sampling(), ignore_eos=False, eos_token_id=2, pad_token_id=0, max_prompt_tokens=32)
    return GenSpec(**{**base, **kw})


def versions(monkeypatch, **present):
    monkeypatch.setattr(envinfo, "version", lambda p: present.get(p.replace("-", "_")))


# --- skip reasons ------------------------------------------------------------------------------

@pytest.mark.skipif(envinfo.version("vllm") is not None, reason="vllm is installed here")
def test_vllm_skipped_without_vllm():
    reason = backends.unavailable("vllm", "default", 0)
    assert "vllm" in reason and "envs/" in reason


@pytest.mark.skipif(envinfo.version("unsloth") is not None, reason="unsloth is installed here")
def test_unsloth_skipped_without_unsloth():
    reason = backends.unavailable("unsloth", "4bit", 0)
    assert "unsloth" in reason and "envs/" in reason


@pytest.mark.parametrize("mod,name", [(vb, "vllm"), (us, "unsloth")])
def test_reason_names_the_package_and_what_installs_it(monkeypatch, mod, name):
    versions(monkeypatch, torch="2.13.0", transformers="5.17.0", peft="0.19.0", trl="1.15.0")
    for reason in (backends.unavailable(name, "default", 1), availability.unavailable(name, 1)):
        assert f"package(s) {name} not installed" in reason and mod.INSTALL in reason
        assert f"envs/{name}.yaml" in reason and f"wheelhouse build {name}" in reason and "install" in reason


@pytest.mark.parametrize("mod,name", [(vb, "vllm"), (us, "unsloth")])
def test_reason_when_installed_but_broken_or_no_gpu(monkeypatch, mod, name):
    versions(monkeypatch, torch="2.11.0", **{name: "9.9"})
    assert "needs a CUDA GPU" in backends.unavailable(name, "default", 0)
    monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError
    for k in list(vb.ENV) + list(us.ENV):
        monkeypatch.delenv(k, raising=False)
    # installed but broken is a failure with its cause, never a skip (only what is absent by design skips)
    with pytest.raises(backends.BrokenBackend) as e:
        mod.unavailable("default", 1)
    assert f"{name} 9.9 is installed but does not import (" in str(e.value) and f"envs/{name}.yaml" in str(e.value)
    env = vb.ENV if mod is vb else us.ENV
    assert all(os.environ[k] == v for k, v in env.items())  # set before the import


def test_unsloth_4bit_needs_bitsandbytes(monkeypatch):
    versions(monkeypatch, torch="2.11.0", unsloth="2026.10.9")
    assert "bitsandbytes" in us.unavailable("4bit", 1)


def test_variants():
    assert vb.VARIANTS == ("default", "dummy", "gmu_low") and vb.NEEDS_GPU and vb.REQUIRES == ("torch", "vllm")
    assert us.VARIANTS == ("default", "4bit") and us.NEEDS_GPU and us.REQUIRES == ("torch", "unsloth")
    assert "unknown variant" in backends.unavailable("vllm", "nope", 1)


# --- vllm: engine and sampling mapping -----------------------------------------------------------

def adapter(tmp_path, r):
    d = tmp_path / f"lora{r}"
    d.mkdir()
    (d / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": 2 * r}))
    return str(d)


def test_engine_kwargs(tmp_path):
    kw = vb.engine_kwargs(spec(dtype="bfloat16"))
    assert kw == dict(model="/m", dtype="bfloat16", seed=3407, gpu_memory_utilization=0.9, max_model_len=48,
                      max_num_seqs=8, enforce_eager=False,  # normal weight loading: no load_format
                      logprobs_mode="processed_logprobs")  # TRL's: the logprobs of the distribution drawn from
    assert vb.engine_kwargs(spec(variant="dummy"))["load_format"] == "dummy"
    assert vb.engine_kwargs(spec(variant="gmu_low"))["gpu_memory_utilization"] == 0.3
    opts = {"gpu_memory_utilization": 0.85, "enforce_eager": True, "engine_kwargs": {"max_num_batched_tokens": 4096}}
    kw = vb.engine_kwargs(spec(options=opts))
    assert kw["gpu_memory_utilization"] == 0.85 and kw["enforce_eager"] and kw["max_num_batched_tokens"] == 4096
    assert vb.engine_kwargs(spec(variant="gmu_low", options=opts))["gpu_memory_utilization"] == 0.3
    for r, cap in [(4, 8), (8, 8), (24, 32), (32, 32), (64, 64)]:
        kw = vb.engine_kwargs(spec(adapter_dir=adapter(tmp_path, r)))
        assert kw["enable_lora"] and kw["max_loras"] == 1 and kw["max_lora_rank"] == cap


def test_sampling_kwargs_greedy_and_sampled():
    greedy = vb.sampling_kwargs(spec(), 1)
    assert greedy == dict(n=1, max_tokens=16, ignore_eos=False, logprobs=0, temperature=0.0, top_p=1.0,
                          top_k=0, min_p=0.0, stop_token_ids=[2])
    s = Sampling.from_config("equivalence", seed=7)
    kw = vb.sampling_kwargs(spec(sampling=s, ignore_eos=True), 4)
    assert kw == dict(n=4, max_tokens=16, ignore_eos=True, logprobs=0, temperature=0.1, top_p=0.97, top_k=5,
                      min_p=0.5)
    assert vb.sampling_kwargs(spec(sampling=s, options={"request_seed": True}), 1)["seed"] == 7
    assert vb.engine_kwargs(spec(sampling=s))["seed"] == 7
    assert vb.sampling_kwargs(spec(options={"detokenize": False}), 1)["detokenize"] is False
    assert "logprobs" not in vb.sampling_kwargs(spec(options={"logprobs": False}), 1)  # the engine without them
    # ... and its sampling path as vLLM picks it without TRL's logprobs mode
    assert "logprobs_mode" not in vb.engine_kwargs(spec(options={"logprobs": False}))
    for preset in SAMPLING_PRESETS:  # 0 is "off" in vLLM 0.26; -1 is never sent
        assert vb.sampling_kwargs(spec(sampling=Sampling.from_config(preset, 1)), 1)["top_k"] >= 0


def test_requests_split_greedy_n():
    p = [[1, 2], [3]]
    assert vb.requests(p, 3, greedy=True) == ([[1, 2]] * 3 + [[3]] * 3, 1)
    assert vb.requests(p, 3, greedy=False) == (p, 3)
    assert vb.requests(p, 1, greedy=True) == (p, 1)


class FakeVLLM:
    """The slice of vLLM 0.26's offline API the backend uses, with its greedy n>1 refusal."""

    def __init__(self):
        self.llm_kwargs, self.calls = None, []
        fake = self

        class SamplingParams:
            def __init__(self, **kw):
                if kw.get("temperature", 1.0) < 1e-5 and kw.get("n", 1) > 1:
                    raise ValueError(f"n must be 1 when using greedy sampling, got {kw['n']}.")
                assert kw.get("top_k", 0) >= -1
                self.kw = kw

        class LLM:
            def __init__(self, **kw):
                fake.llm_kwargs = kw

            def generate(self, prompts, params, use_tqdm=True, lora_request=None):
                fake.calls.append((prompts, params.kw, lora_request))
                n = params.kw["n"]

                def completion(p, i):  # logprobs=0: per token, {sampled token: Logprob}
                    toks = (len(p["prompt_token_ids"]), i)
                    return SimpleNamespace(index=i, token_ids=toks, logprobs=[
                        {t: SimpleNamespace(logprob=-0.1 * (t + 1), rank=1)} for t in toks])

                return [SimpleNamespace(outputs=[completion(p, i) for i in reversed(range(n))]) for p in prompts]

        class LoRARequest:
            def __init__(self, name, int_id, path):
                self.args = (name, int_id, path)

        self.vllm = types.ModuleType("vllm")
        self.vllm.LLM, self.vllm.SamplingParams, self.vllm.TokensPrompt = LLM, SamplingParams, dict
        self.lora = types.ModuleType("vllm.lora")
        self.request = types.ModuleType("vllm.lora.request")
        self.request.LoRARequest = LoRARequest

    def install(self, monkeypatch):
        for name, mod in [("vllm", self.vllm), ("vllm.lora", self.lora), ("vllm.lora.request", self.request)]:
            monkeypatch.setitem(sys.modules, name, mod)


def test_generator_with_fake_vllm(monkeypatch, tmp_path):
    fake = FakeVLLM()
    fake.install(monkeypatch)
    for k in vb.ENV:
        monkeypatch.delenv(k, raising=False)
    lora = adapter(tmp_path, 16)
    gen = vb.load(spec(adapter_dir=lora, variant="dummy"))
    assert os.environ["VLLM_HOST_IP"] == "127.0.0.1" and os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert fake.llm_kwargs["load_format"] == "dummy" and fake.llm_kwargs["max_lora_rank"] == 16

    out = gen.generate([[5, 6, 7], [8]], 2)  # greedy, n=2: submitted as 4 requests of n=1
    prompts, params, req = fake.calls[-1]
    assert prompts == [{"prompt_token_ids": [5, 6, 7]}] * 2 + [{"prompt_token_ids": [8]}] * 2
    assert params["n"] == 1 and params["temperature"] == 0.0
    assert req.args == ("adapter", 1, str(Path(lora).resolve()))
    assert out == [[3, 0], [3, 0], [1, 0], [1, 0]]
    assert gen.row_logprobs([0, 3]) == [[-0.4, -0.1], [-0.2, -0.1]]  # each row's own tokens, in output order
    gen.spec = spec(options={"logprobs": False})
    assert gen.row_logprobs([0]) is None

    gen.spec = spec(sampling=Sampling.from_config("equivalence", 1))
    out = gen.generate([[5, 6, 7], [8]], 3)  # sampled: one request per prompt, n=3, index order
    assert fake.calls[-1][1]["n"] == 3 and out == [[3, 0], [3, 1], [3, 2], [1, 0], [1, 1], [1, 2]]
    gen.close()


def test_engine_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (30e9, 140e9))
    mc = SimpleNamespace(dtype=torch.bfloat16, get_num_layers=lambda pc: 36, get_num_kv_heads=lambda pc: 8,
                         get_head_size=lambda: 128)
    cfg = SimpleNamespace(cache_config=SimpleNamespace(num_gpu_blocks=1000, block_size=16, cache_dtype="auto"),
                          model_config=mc, parallel_config=None)
    llm = SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=cfg))
    m = vb.engine_memory(llm, 0.9)
    assert m["kv_cache_memory_bytes"] is None and vb.engine_memory(llm, 0.1, 2**30)["kv_cache_memory_bytes"] == 2**30
    assert m == {"reserved_gb": 110.0, "gpu_memory_utilization": 0.9, "kv_cache_memory_bytes": None, "kv_cache_tokens": 16000,
                 "kv_cache_gb": round(16000 * 2 * 36 * 8 * 128 * 2 / 1e9, 3)}
    assert vb.engine_memory(SimpleNamespace(), 0.3)["kv_cache_gb"] is None  # not exposed: in-use only


# --- unsloth: key normalisation and the adapter copy ------------------------------------------

def test_core_key():
    saved = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    live = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"
    assert us.core_key(saved) == us.core_key(live) == "layers.0.self_attn.q_proj.lora_A.weight"
    assert us.core_key("model.layers.1.mlp.down_proj.lora_B.other.weight") == "layers.1.mlp.down_proj.lora_B.weight"
    assert us.core_key("base_model.model.lm_head.weight") == "lm_head.weight"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rollout_bench.assets import lora

    d = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=128, eos_token_id=2, pad_token_id=0)
    Qwen3ForCausalLM(cfg).save_pretrained(d / "model")
    lora.build(d / "model", d / "lora", 4, 8, ["q_proj", "v_proj", "down_proj"], 0.5, 0)
    return {"model": str(d / "model"), "lora": str(d / "lora")}


def fake_unsloth(monkeypatch, calls):
    """FastLanguageModel over plain transformers + PEFT: from_pretrained / get_peft_model / for_inference."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    class FastLanguageModel:
        @staticmethod
        def from_pretrained(model_name, max_seq_length, dtype, load_in_4bit, fast_inference, **kw):
            calls["from_pretrained"] = dict(model_name=model_name, max_seq_length=max_seq_length, dtype=dtype,
                                            load_in_4bit=load_in_4bit, fast_inference=fast_inference, **kw)
            return AutoModelForCausalLM.from_pretrained(model_name, dtype=dtype), None

        @staticmethod
        def get_peft_model(model, r, lora_alpha, target_modules, lora_dropout, bias, use_rslora, **kw):
            calls["get_peft_model"] = dict(r=r, lora_alpha=lora_alpha, target_modules=sorted(target_modules))
            return get_peft_model(model, LoraConfig(r=r, lora_alpha=lora_alpha, target_modules=target_modules,
                                                    lora_dropout=lora_dropout, bias=bias, use_rslora=use_rslora))

        @staticmethod
        def for_inference(model):
            calls["for_inference"] = True
            model.eval()

    mod = types.ModuleType("unsloth")
    mod.FastLanguageModel = FastLanguageModel
    monkeypatch.setitem(sys.modules, "unsloth", mod)


def test_unsloth_load_copies_the_shared_adapter(monkeypatch, tiny):
    calls = {}
    fake_unsloth(monkeypatch, calls)
    s = spec(model_dir=tiny["model"], adapter_dir=tiny["lora"], max_new_tokens=6, batch_size=2, max_prompt_tokens=8)
    gen = us.load(s)
    assert calls["from_pretrained"] == dict(model_name=tiny["model"], max_seq_length=14, dtype=torch.float32,
                                            load_in_4bit=False, fast_inference=False)
    assert calls["get_peft_model"] == dict(r=4, lora_alpha=8, target_modules=["down_proj", "q_proj", "v_proj"])
    assert calls["for_inference"]
    ref = hf_generate.load(s)  # PeftModel.from_pretrained on the same adapter dir
    ref_params = {us.core_key(n): p for n, p in ref.model.named_parameters() if ".lora_" in n}
    own = {us.core_key(n): p for n, p in gen.model.named_parameters() if ".lora_" in n}
    assert own.keys() == ref_params.keys() and len(own) == 2 * 2 * 3
    assert all(torch.equal(own[k], ref_params[k]) for k in own)
    prompts = [[5, 9, 11], [7, 3], [4, 4, 4, 4]]
    assert gen.generate(prompts, 2) == ref.generate(prompts, 2)
    n_bytes = sum(t.numel() * t.element_size() for t in [*gen.model.parameters(), *gen.model.buffers()])
    assert gen.info() == {"weights_gb": round(n_bytes / 1e9, 3), "linear4bit_modules": 0}

    calls.clear()
    us.load_model(spec(model_dir=tiny["model"], variant="4bit"))
    assert calls["from_pretrained"]["load_in_4bit"] and "get_peft_model" not in calls


def test_copy_adapter_refuses_a_partial_match(tiny):
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    tensors = load_file(str(Path(tiny["lora"]) / "adapter_model.safetensors"))
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny["model"]),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with pytest.raises(ValueError, match="unmatched"):
        us.copy_adapter(model, tensors)  # down_proj tensors have no home
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny["model"]),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj", "o_proj"]))
    with pytest.raises(ValueError, match="12 of 16 LoRA parameters filled"):
        us.copy_adapter(model, tensors)  # o_proj would keep its random init


# --- the seeds' integration notes, against the pinned releases ---------------------------------
# Where the package cannot be imported here (vLLM, Unsloth need CUDA) the wheel's source is read:
# from a wheelhouse under .wheelhouse/ (or $ROLLOUT_BENCH_WHEELHOUSE); skipped when none is built.

def wheel_source(project: str, version: str, member: str) -> str:
    root = Path(os.environ.get("ROLLOUT_BENCH_WHEELHOUSE", ROOT / ".wheelhouse"))
    for d in sorted(p for p in root.glob("*") if (p / wh.MANIFEST).exists()):
        entry = next((f for f in wh.load_manifest(d)["files"] if f["project"] == project), None)
        if entry and entry["version"] == version:
            return wh.open_wheel(d, project).read(member).decode()
    for w in root.glob(f"**/{project.replace('-', '_')}-{version}-*.whl"):
        return zipfile.ZipFile(w).read(member).decode()
    pytest.skip(f"no {project}=={version} wheel under {root}: python -m rollout_bench.host.wheelhouse build "
                f"{'vllm' if project == 'vllm' else 'unsloth'}")


def test_note_top_k_minus_one_still_breaks_transformers():
    """Seed note 1 holds for transformers 5.17: -1 ("off" in vLLM) raises in HF sampling. Kept
    workaround: the workload says 0 for off; hf_generate maps 0 to None, vllm sends 0."""
    from transformers.generation.logits_process import TopKLogitsWarper

    with pytest.raises(ValueError, match="strictly positive"):
        TopKLogitsWarper(top_k=-1)
    assert hf_model.generation_kwargs(spec(sampling=Sampling(temperature=1.0)))["top_k"] is None
    with pytest.raises(AssertionError):
        Sampling(temperature=1.0, top_k=-1)


def test_note_vllm_top_k_semantics():
    src = wheel_source("vllm", "0.26.0", "vllm/sampling_params.py")
    assert re.search(r"^\s+top_k: int = 0$", src, re.M)  # 0 = off is the default
    assert "if self.top_k < -1:" in src  # -1 only tolerated
    assert "n must be 1 when using greedy sampling" in src  # why vb.requests splits greedy n > 1
    sampler = wheel_source("vllm", "0.26.0", "vllm/v1/sample/ops/topk_topp_sampler.py")
    assert "q[i].exponential_(generator=generator)" in sampler  # seeded rows: a per-row loop


def test_note_trl_no_longer_imports_guided_decoding_params():
    """Seed note 4 is gone: TRL 1.15 imports StructuredOutputsParams instead, so no shim."""
    import importlib.util

    trl_dir = Path(importlib.util.find_spec("trl").submodule_search_locations[0])
    text = "".join(p.read_text() for p in trl_dir.rglob("*.py"))
    assert "GuidedDecodingParams" not in text
    assert "from vllm.sampling_params import StructuredOutputsParams" in text


def test_note_vllm_defines_structured_outputs_params():
    src = wheel_source("vllm", "0.26.0", "vllm/sampling_params.py")
    assert "class StructuredOutputsParams" in src and "GuidedDecodingParams" not in src


def test_note_unsloth_trainer_hooks_guarded_but_trainers_still_replaced():
    """Seed note 5: UnslothGRPOTrainer now checks hasattr(model, "for_training"/"for_inference"),
    but importing unsloth still swaps TRL's trainers process-wide, so only backends/unsloth.py
    imports it (each job is its own process)."""
    rl = wheel_source("unsloth", "2026.10.9", "unsloth/models/rl.py")
    assert 'hasattr(self.model, "for_training")' in rl and 'hasattr(self.model, "for_inference")' in rl
    assert "trl.trainer.{RLTrainer_name} = created_module.Unsloth{RLTrainer_name}" in rl
    llama = wheel_source("unsloth", "2026.10.9", "unsloth/models/llama.py")
    assert re.search(r"^PatchFastRL\(", llama, re.M)  # at import time


def test_only_the_unsloth_backend_imports_unsloth():
    for path in (ROOT / "src/rollout_bench/backends").glob("*.py"):
        if path.name != "unsloth.py":
            assert not re.search(r"^\s*(import unsloth|from unsloth)", path.read_text(), re.M), path


def test_note_unsloth_attention_still_bypasses_the_paged_interface():
    """Seed note 3 holds for Unsloth 2026.10.9: its Qwen3 attention never reads
    config._attn_implementation, so generate_batch (paged) cannot run on an Unsloth-patched model.
    Kept workaround: transformers_cb loads plain HF + PEFT; the unsloth backend uses model.generate."""
    src = wheel_source("unsloth", "2026.10.9", "unsloth/models/qwen3.py")
    body = src.split("def Qwen3Attention_fast_forward(", 1)[1].split("\ndef ", 1)[0]
    assert "run_attention(" in body and "_attn_implementation" not in body and "paged" not in body.replace(
        "paged_attention", "")
    assert "generate_batch" not in Path(us.__file__).read_text()


def test_an_import_error_of_the_projects_own_engine_fails_a_grpo_job_instead_of_skipping_it(monkeypatch):
    """GRPO's flex rollout is the project's own code: a broken engine is a failure with its traceback."""
    monkeypatch.setitem(sys.modules, "rollout_bench.engine", None)  # `import rollout_bench.engine` raises
    with pytest.raises(ImportError):
        availability.unavailable("flex", 1)
