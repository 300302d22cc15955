"""logprob_gap: the engine's sampled-token logprobs against the trainer's forward, the bf16 noise floor
(the trainer's forward with another attention kernel) and an fp32 forward, on tiny random Qwen3 (CPU)."""
import copy
import json

import pytest
import torch

from rollout_bench.core.workload import Sampling
from rollout_bench.diagnostics import logprob_gap, random_model
from rollout_bench.engine import Engine, EngineConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_bf16_engine_gap_is_below_the_kernel_noise_floor():
    model = random_model.build("qwen3-tiny", seed=0).to(torch.bfloat16)
    fp32 = copy.deepcopy(model).float()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in (15, 17, 35, 40)]
    engine = Engine(model, EngineConfig(max_batch=4, max_seq_len=128, page_size=16, cuda_graphs=False,
                                        compile=False))
    r = logprob_gap.measure(engine, model, prompts, Sampling.from_config("equivalence", 3407), 48, fp32)
    assert r["n_sequences"] == 4 and r["n_tokens"] == 4 * 48
    at_t, at_1 = r["temperatures"]["0.1"], r["temperatures"]["1.0"]
    assert set(at_t) == {f"{a}~{b}" for a, b in logprob_gap.PAIRS}
    assert set(at_1) == {"hf_eager~hf_sdpa", "hf_sdpa~fp32", "hf_eager~fp32"}  # engine logprobs are at T = 0.1
    floor = at_t["hf_eager~hf_sdpa"]["mean_abs"]
    # bf16 forwards differ (the floor is real) and T = 0.1 magnifies it against T = 1
    assert floor > 1e-4 and floor > 2 * at_1["hf_eager~hf_sdpa"]["mean_abs"]
    # here the engine is closer to the trainer than the trainer is to itself with eager attention,
    # and exactly as far from fp32 as the trainer's forward
    assert at_t["engine~hf_sdpa"]["mean_abs"] < floor / 10
    assert at_t["engine~fp32"]["mean_abs"] <= 1.2 * at_t["hf_sdpa~fp32"]["mean_abs"]


def test_bf16_lora_merged_copy_against_peft_unmerged():
    """As in GRPO: the engine samples from its merged bf16 copy, the trainer runs PEFT's unmerged adapter.
    The merge's rounding adds to the gap, but it stays within twice the kernel noise floor, and the
    engine stays about as close to the fp32 forward as the trainer's own forward is."""
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    from rollout_bench.core.workload import LORA_TARGETS

    base = random_model.build("qwen3-tiny", seed=0).to(torch.bfloat16)
    state = random_model.lora_state(base, 8)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                            target_modules=list(LORA_TARGETS))).eval()
    set_peft_model_state_dict(model, state)
    fp32 = copy.deepcopy(model).float()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in (15, 17, 35, 40)]
    engine = Engine(model, EngineConfig(max_batch=4, max_seq_len=128, page_size=16, cuda_graphs=False,
                                        compile=False))
    assert engine.lora is not None
    at_t = logprob_gap.measure(engine, model, prompts, Sampling.from_config("equivalence", 3407), 48,
                               fp32)["temperatures"]["0.1"]
    floor = at_t["hf_eager~hf_sdpa"]["mean_abs"]
    assert at_t["engine~hf_sdpa"]["mean_abs"] < 2 * floor
    assert at_t["engine~fp32"]["mean_abs"] < 1.5 * at_t["hf_sdpa~fp32"]["mean_abs"]


def test_cli_writes_the_report(tmp_path):
    out = tmp_path / "gap.json"
    logprob_gap.main(["--model", "qwen3-tiny", "--prompts", "2", "--new-tokens", "8", "--lora-rank", "4",
                      "--out", str(out)])
    r = json.loads(out.read_text())
    assert r["env"]["dtype"] == "float32" and r["sampling"]["temperature"] == 0.1 and r["n_tokens"] == 16
    assert r["args"]["lora_rank"] == 4
    # in fp32 on CPU every forward is the fp32 one, up to summation order
    assert all(v["max_abs"] < 1e-4 for v in r["temperatures"]["0.1"].values())
