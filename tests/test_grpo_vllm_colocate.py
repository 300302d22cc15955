"""GRPO's colocated vLLM engine: TRL 1.15's own engine construction (`VLLMGeneration._init_vllm`) run against a
fake `LLM`, so that what the engine gets (the trainer's dtype, the config's engine kwargs) is checked on CPU;
the config errors; and the smoke profile's vLLM jobs sharing the GPU once their KV size is fixed."""
import os
from types import SimpleNamespace

import pytest
import torch
import yaml
from trl.generation import vllm_generation

from rollout_bench import ROOT, backends
from rollout_bench.grpo import vllm_colocate
from rollout_bench.pipeline import config, jobs, smoke


class FakeLLM:
    made: list[dict] = []

    def __init__(self, **kwargs):
        FakeLLM.made.append(kwargs)


def trl_engine(monkeypatch):
    """A VLLMGeneration in colocate mode as GRPOTrainer sets it up, its engine built by TRL's own _init_vllm."""
    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda: True)
    monkeypatch.setattr(vllm_generation, "LLM", FakeLLM, raising=False)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(k, os.environ.get(k, {"WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                                                 "MASTER_PORT": "29500"}.get(k, "0")))
    gen = object.__new__(vllm_generation.VLLMGeneration)
    model = torch.nn.Linear(2, 2)
    model.name_or_path = "/models/tiny"
    accelerator = SimpleNamespace(num_processes=1, process_index=0, local_process_index=0,
                                  wait_for_everyone=lambda: None)
    vars(gen).update(mode="colocate", tensor_parallel_size=1, gpu_memory_utilization=0.1, max_model_length=128,
                     max_num_seqs=8, enable_sleep_mode=False, model_impl="vllm", trust_remote_code=False,
                     model=model, accelerator=accelerator)
    FakeLLM.made = []
    return gen


def test_trl_builds_its_engine_with_the_trainers_dtype_and_the_engine_kwargs(monkeypatch):
    gen = trl_engine(monkeypatch)
    with vllm_colocate.engine_options("float32", {"kv_cache_memory_bytes": 2**30}) as built:
        gen._init_vllm()
    (kw,) = FakeLLM.made
    assert kw["dtype"] == "float32" and kw["kv_cache_memory_bytes"] == 2**30
    assert set(kw) - {"dtype", "kv_cache_memory_bytes"} == set(vllm_colocate.TRL_SETS)  # what this TRL passes
    # TRL's own choices are untouched
    assert kw["model"] == "/models/tiny" and kw["gpu_memory_utilization"] == 0.1
    assert kw["logprobs_mode"] == "processed_logprobs"
    assert vllm_colocate.require_built(built) == {"dtype": "float32", "kv_cache_memory_bytes": 2**30}
    # only while the trainer is built: afterwards TRL's LLM is vLLM's again
    assert vllm_generation.LLM is FakeLLM


def test_a_trl_that_sets_the_dtype_itself_is_not_overridden(monkeypatch):
    monkeypatch.setattr(vllm_generation, "LLM", FakeLLM, raising=False)
    FakeLLM.made = []
    with pytest.raises(RuntimeError, match="TRL now passes dtype"):
        with vllm_colocate.engine_options("float32", {}) as built:
            vllm_generation.LLM(model="m", dtype="bfloat16")  # as a TRL that chose the dtype would call it
    assert built == [] and not FakeLLM.made


def test_a_trainer_that_built_no_engine_through_the_wrapper_fails():
    with pytest.raises(RuntimeError, match="saw 0"):
        vllm_colocate.require_built([])


@pytest.mark.parametrize("kwargs,field", [({"dtype": "float16"}, "'dtype' is the trainer's"),
                                          ({"seed": 1, "max_num_seqs": 4}, "max_num_seqs, seed set by TRL.*train.seeds"),
                                          ("1GiB", "a mapping")])
def test_engine_kwargs_that_clash_are_a_config_error_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field) as e:
        vllm_colocate.check(kwargs)
    assert "train.options.vllm.engine_kwargs" in str(e.value)
    doc = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    doc["profiles"]["smoke"]["train"]["options"]["vllm"]["engine_kwargs"] = kwargs
    with pytest.raises(config.ConfigError, match="train.options.vllm.engine_kwargs"):
        config.resolve({**doc, "profile": "smoke"})


def test_vllm_shares_its_gpu_only_with_a_fixed_kv_size():
    assert backends.alone_on_gpu("vllm", {})
    assert backends.alone_on_gpu("vllm", {"gpu_memory_utilization": 0.5, "engine_kwargs": {}})
    assert not backends.alone_on_gpu("vllm", {"engine_kwargs": {"kv_cache_memory_bytes": 2**30}})
    assert backends.alone_on_gpu("vllm", {"engine_kwargs": {"kv_cache_memory_bytes": None}})  # vLLM profiles then
    assert not any(backends.alone_on_gpu(b, {}) for b in backends.NAMES if b != "vllm")


def test_the_smoke_profile_fixes_vllms_kv_size_in_generation_and_grpo():
    cfg = smoke.smoke_config()
    gen = [jobs.job_workload(cfg, j.model, j.backend, j.case, j.batch_size)["options"]
           for j in jobs.gen_jobs(cfg) if j.backend == "vllm"]
    train = [jobs.train_workload(cfg, j.model, j.backend, j.seed)["options"]
             for j in jobs.train_jobs(cfg) if j.backend == "vllm"]
    assert gen and train
    assert not any(backends.alone_on_gpu("vllm", o) for o in gen + train)


def test_a_user_key_this_trl_passes_itself_is_a_config_error(monkeypatch):
    monkeypatch.setattr(vllm_generation, "LLM", FakeLLM, raising=False)
    with pytest.raises(ValueError, match="train.options.vllm.engine_kwargs.*remove them"):
        with vllm_colocate.engine_options("float32", {"enforce_eager": True}):
            vllm_generation.LLM(model="m", enforce_eager=False)


def test_without_vllm_the_wrapper_leaves_no_llm_behind(monkeypatch):
    monkeypatch.delattr(vllm_generation, "LLM", raising=False)
    with vllm_colocate.engine_options("float32", {}):
        assert callable(vllm_generation.LLM)
    assert not hasattr(vllm_generation, "LLM")
