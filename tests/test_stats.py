import dataclasses
import json
import statistics
import time

import jsonschema
import pytest

from rollout_bench.core import atomic, stats
from rollout_bench.core.workload import GenSpec, Sampling
from rollout_bench.generation import job as generation_job
from rollout_bench.generation import measure

WL = {"lora_rank": 0, "num_generations": 1, "sampling": Sampling().to_dict(), "ignore_eos": True,
      "max_new_tokens": 4}


def test_skipped_record_validates_and_needs_reason(tmp_path):
    rec = stats.base("generate", backend="vllm", variant="default", model="m", workload=WL)
    out = stats.finish(stats.skipped(rec, "package vllm not installed; install envs/vllm"), tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text()) == out
    with pytest.raises(jsonschema.ValidationError):
        stats.validate({**out, "reason": None})


def test_ok_generation_record_requires_speed_fields(tmp_path):
    rec = stats.base("generate", backend="hf_generate", variant="default", model="m", workload=WL)
    with pytest.raises(jsonschema.ValidationError):
        stats.finish(rec, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()  # invalid -> nothing written


def test_failed_record_may_not_carry_speed(tmp_path):
    rec = stats.base("generate", backend="flex", variant="eager", model="m", workload=WL)
    with pytest.raises(jsonschema.ValidationError):
        stats.validate({**stats.failed(rec, "greedy mismatch vs HF at token 3"), "decode_tps": 1.0, "wall_s": 0})


def test_atomic_write_leaves_old_file_on_crash(tmp_path):
    p = tmp_path / "a.json"
    atomic.write_json(p, {"v": 1})
    with pytest.raises(TypeError):
        atomic.write_json(p, {"v": object()})
    assert json.loads(p.read_text()) == {"v": 1}
    assert [f.name for f in tmp_path.iterdir()] == ["a.json"]


def test_measure_counts_rounds_and_lengths():
    spec = GenSpec(model_dir="-", adapter_dir=None, variant="default", batch_size=2, max_new_tokens=3,
                   sampling=Sampling(), ignore_eos=True, eos_token_id=0, pad_token_id=1, max_prompt_tokens=4,
                   num_generations=2)

    class Fake:
        calls = 0

        def generate(self, prompts, n):
            Fake.calls += 1
            time.sleep(0.01)
            return [[7, 7, 7] for _ in prompts for _ in range(n)]

    r = measure.measure(lambda s: Fake(), spec, [[[1, 2], [3]], [[4], [5]], [[6, 7, 8, 9], [10]]], [[11, 12]])
    f = r["fields"]
    assert Fake.calls == 4 and len(f["rounds"]) == 3  # warm-up + 3 timed rounds
    assert [x["prompt_tokens"] for x in f["rounds"]] == [6, 4, 10]  # each round's own prompts, x n = 2
    assert f["n_decoded_tokens"] == 12 and f["n_prompt_tokens"] == 7 and f["n_prompts"] == 2  # 6.67: the mean
    assert f["prompt_tps"] == pytest.approx(statistics.median(x["prompt_tokens"] / x["wall_s"] for x in f["rounds"]),
                                            rel=1e-3)
    assert f["decode_tps"] == pytest.approx(12 / f["median_wall_s"], rel=1e-2)
    assert measure.check_lengths(r["outputs"], spec) is None
    assert "do not have max_new_tokens=3" in measure.check_lengths([[1, 2]], spec)


def test_rates_are_the_median_of_each_rounds_own_rate():
    """With EOS on, rounds decode different counts: a round's rate is its own tokens over its own wall. A slow round
    that decoded little must not pair with another round's count (mean tokens / median wall would read 60/0.2)."""
    spec = GenSpec(model_dir="-", adapter_dir=None, variant="default", batch_size=1, max_new_tokens=100,
                   sampling=Sampling(), ignore_eos=False, eos_token_id=0, pad_token_id=1, max_prompt_tokens=4)
    plan = iter([(0.0, 1), (0.1, 100), (0.2, 20), (0.3, 60)])  # (seconds, tokens): warm-up, then three rounds

    class Fake:
        def generate(self, prompts, n):
            s, k = next(plan)
            time.sleep(s)
            return [[7] * k]

    f = measure.measure(lambda s: Fake(), spec, [[[1]], [[2]], [[3]]], [[4]])["fields"]
    assert [r["decoded_tokens"] for r in f["rounds"]] == [100, 20, 60]
    rates = [r["decoded_tokens"] / r["wall_s"] for r in f["rounds"]]  # ~1000, ~100, ~200
    assert f["decode_tps"] == pytest.approx(sorted(rates)[1], rel=1e-3) and f["decode_tps"] < 300
    assert f["decode_tps_best"] == pytest.approx(max(rates), rel=1e-3)


def test_failed_gate_writes_failed_status_and_no_speed(tiny_assets, tmp_path, monkeypatch):
    from rollout_bench.backends import flex

    monkeypatch.setattr(flex, "gate", lambda spec, gen: {"passed": False, "max_abs_logit_diff": 3.0})
    wl = {**WL, "batch_size": 2, "n_prompts": 2, "warmup_prompts": 0, "rounds": 1, "prompt_tokens": [1, 4096],
          "shuffle_seed": 3407, "chat_template": "grpo", "device": "cpu", "dtype": "float32", "options": {}}
    rec = generation_job.run_job(backend="flex", variant="eager", model="qwen3-tiny", case="greedy", workload=wl,
                             model_dir=tiny_assets["model"], adapter_dir=None, dataset_dir=tiny_assets["dataset"],
                             out=str(tmp_path / "f.json"))
    assert rec["status"] == "failed" and "correctness gate failed" in rec["reason"]
    assert "decode_tps" not in rec and stats.load(tmp_path / "f.json")["gate"]["passed"] is False


def test_flex_job_records_passed_gate_and_engine_memory(tiny_assets, tmp_path):
    wl = {**WL, "batch_size": 2, "n_prompts": 2, "warmup_prompts": 1, "rounds": 2, "prompt_tokens": [1, 4096],
          "shuffle_seed": 3407, "chat_template": "grpo", "device": "cpu", "dtype": "float32", "options": {}}
    rec = generation_job.run_job(backend="flex", variant="eager", model="qwen3-tiny", case="greedy", workload=wl,
                             model_dir=tiny_assets["model"], adapter_dir=None, dataset_dir=tiny_assets["dataset"],
                             out=str(tmp_path / "ok.json"))
    assert rec["status"] == "ok" and rec["gate"]["passed"] and rec["n_decoded_tokens"] == 2 * 4
    assert rec["peak_memory_gb"]["engine_reserved_gb"] > 0
    assert rec["engine"]["num_pages"] > 1 and set(rec["engine"]["memory_gb"]) == {"kv_pool", "weights_on_device", "weights_on_host"}
    assert rec["engine"]["decode_kernel_options"] == {}
    last = rec["engine"]["last_round"]  # the last timed round's split: prefill, decode chunks, host
    assert last["decode_steps"] == 4 - 1 and last["prefill_tokens"] > 0 and last["step_ms"] > 0
    assert last["wall_s"] == pytest.approx(last["prefill_s"] + last["decode_s"] + last["host_other_s"], abs=1e-3)


def test_flex_job_replays_autotuned_options_unless_configured(tiny_assets, tmp_path):
    tuned = {"status": "ok", "by_batch": {"64": {"best": {"BLOCK_N": 64, "num_warps": 4}}}}
    (tmp_path / "tuned.json").write_text(json.dumps(tuned))
    wl = {**WL, "batch_size": 2, "n_prompts": 2, "warmup_prompts": 0, "rounds": 1, "prompt_tokens": [1, 4096],
          "shuffle_seed": 3407, "chat_template": "grpo", "device": "cpu", "dtype": "float32", "options": {}}
    kw = dict(backend="flex", variant="eager", model="qwen3-tiny", case="greedy", model_dir=tiny_assets["model"],
              adapter_dir=None, dataset_dir=tiny_assets["dataset"], autotune=str(tmp_path / "tuned.json"))
    rec = generation_job.run_job(workload=wl, out=str(tmp_path / "a.json"), **kw)
    assert rec["status"] == "ok" and rec["autotune"]["replayed"] == {"BLOCK_N": 64, "num_warps": 4}
    assert rec["engine"]["decode_kernel_options"] == {"BLOCK_N": 64, "num_warps": 4}
    assert rec["workload"]["options"] == {}  # the recorded workload stays the configured one
    own = {**wl, "options": {"decode_kernel_options": {"num_warps": 8}}}
    rec = generation_job.run_job(workload=own, out=str(tmp_path / "b.json"), **kw)
    assert rec["autotune"]["replayed"] == {} and rec["engine"]["decode_kernel_options"] == {"num_warps": 8}


def test_env_records_the_host_cpu_and_its_load(tmp_path):
    from rollout_bench.core import envinfo

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    assert envinfo.cpu_model(str(info)) == "Intel(R) Xeon(R) Platinum 8480+"
    env = stats.base("generate", backend="flex", variant="graphs", model="m", workload={})["env"]
    assert env["cpu_count"] >= 1 and env["load_avg_1m"] >= 0
    assert env["cpu_model"] == envinfo.cpu_model()


def test_vllm_lora_in_float32_is_skipped_with_its_reason_before_anything_loads(tiny_assets, tmp_path, monkeypatch):
    """vLLM 0.26's LoRA kernels assert float16/bfloat16 (the H200 smoke run); vllm is not installed here, so
    its availability is mocked and its load must not be reached."""
    from rollout_bench import backends
    from rollout_bench.backends import vllm

    monkeypatch.setattr(backends, "unavailable", lambda *a, **k: None)
    monkeypatch.setattr(vllm, "load", lambda spec: (_ for _ in ()).throw(AssertionError("loaded")))
    wl = {**WL, "lora_rank": 4, "batch_size": 2, "n_prompts": 2, "warmup_prompts": 0, "rounds": 1,
          "prompt_tokens": [1, 4096], "shuffle_seed": 3407, "chat_template": "grpo", "device": "cpu",
          "dtype": "float32", "options": {}}
    rec = generation_job.run_job(backend="vllm", variant="default", model="qwen3-tiny", case="lora", workload=wl,
                             model_dir=tiny_assets["model"], adapter_dir=tiny_assets["lora"],
                             dataset_dir=tiny_assets["dataset"], out=str(tmp_path / "v.json"))
    assert rec["status"] == "skipped" and "LoRA kernels take float16 or bfloat16" in rec["reason"]
    assert "workload.dtype" in rec["reason"] and stats.load(tmp_path / "v.json")["status"] == "skipped"
    spec = GenSpec(model_dir="m", adapter_dir=tiny_assets["lora"], variant="default", batch_size=2, max_new_tokens=4,
                   sampling=Sampling(), ignore_eos=True, eos_token_id=1, pad_token_id=0, max_prompt_tokens=8)
    assert vllm.unsupported_spec(spec) is not None
    assert vllm.unsupported_spec(dataclasses.replace(spec, dtype="bfloat16")) is None
    assert vllm.unsupported_spec(dataclasses.replace(spec, adapter_dir=None)) is None


def test_no_timed_round_resends_a_prompt(tiny_assets, tmp_path, monkeypatch):
    """An engine that caches prefixes across calls (vLLM's default) must prefill every timed round: the job sends
    each prompt once, over the warm-up and the rounds, as GRPO's steps do. vllm is mocked by a generator that
    records what it is sent."""
    from rollout_bench import backends
    from rollout_bench.backends import vllm

    sent = []

    class Recorder:
        def generate(self, prompts, n):
            sent.append([tuple(p) for p in prompts])
            return [[7] * 4 for _ in prompts for _ in range(n)]

    monkeypatch.setattr(backends, "unavailable", lambda *a, **k: None)
    monkeypatch.setattr(vllm, "load", lambda spec: Recorder())
    wl = {**WL, "batch_size": 4, "n_prompts": 4, "warmup_prompts": 2, "rounds": 3, "prompt_tokens": [1, 4096],
          "shuffle_seed": 3407, "chat_template": "grpo", "device": "cpu", "dtype": "float32", "options": {}}
    rec = generation_job.run_job(backend="vllm", variant="default", model="qwen3-tiny", case="greedy", workload=wl,
                             model_dir=tiny_assets["model"], adapter_dir=None, dataset_dir=tiny_assets["dataset"],
                             out=str(tmp_path / "v.json"))
    assert rec["status"] == "ok" and [len(call) for call in sent] == [2, 4, 4, 4]  # warm-up, then 3 rounds
    flat = sum(sent, [])
    assert len(set(flat)) == len(flat) == 14
    assert [r["prompt_tokens"] for r in rec["rounds"]] == [sum(map(len, call)) for call in sent[1:]]
    assert rec["n_prompt_tokens"] == round(sum(map(len, flat[2:])) / 3)
