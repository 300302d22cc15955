"""LoRA double copy: merged weights as PEFT merges them, no drift across refreshes, pristine untouched."""
import pytest
import torch

from rollout_bench.core.workload import LORA_TARGETS as TARGETS
from rollout_bench.core.workload import Sampling
from rollout_bench.diagnostics import random_model
from rollout_bench.engine import Engine, EngineConfig
from rollout_bench.engine.lora import DoubleCopy, load_adapter, sha256

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def peft_model(seed=0, dtype=torch.float32):
    from peft import LoraConfig, get_peft_model

    base = random_model.build("qwen3-tiny", seed=seed, dtype=dtype, tie_word_embeddings=False)
    torch.manual_seed(seed + 1)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=list(TARGETS), init_lora_weights=False)
    return get_peft_model(base, cfg)


def adapter_state(model):
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}


def pristine_hash(dc):
    return sha256(dc.pristine.items())


def live_hash(dc):
    return sha256(dc.live.items())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_no_drift_after_perturb_refresh_cycles(dtype):
    model = peft_model(dtype=dtype)
    state = adapter_state(model)
    dc = DoubleCopy(model, TARGETS)
    base_before = pristine_hash(dc)
    ptrs = {n: w.data_ptr() for n, w in dc.live.items()}
    dc.refresh(state, 2.0)
    merged = live_hash(dc)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):  # a training step's worth of change each time
        noisy = {k: v + 0.01 * torch.randn(v.shape, generator=g).to(v.dtype) for k, v in state.items()}
        dc.refresh(noisy, 2.0)
        assert live_hash(dc) != merged
    dc.refresh(state, 2.0)
    assert live_hash(dc) == merged, "inference copy not bit-identical after perturb+refresh cycles"
    assert pristine_hash(dc) == base_before, "pristine base changed"
    assert {n: w.data_ptr() for n, w in dc.live.items()} == ptrs, "refresh must write in place"
    dc.restore()
    assert all(torch.equal(dc.live[n], dc.pristine[n]) for n in dc.live)


def test_merge_matches_peft_and_engine_matches_peft_generate():
    model = peft_model()
    engine = Engine(model, EngineConfig(max_batch=4, max_seq_len=64, page_size=16))  # merges the PEFT adapter
    assert engine.lora is not None and set(engine.config.lora_targets) == set(TARGETS)
    ref_model = peft_model()
    ref_model.merge_adapter()
    for name, live in engine.lora.live.items():
        peft_w = ref_model.get_base_model().get_submodule(name).base_layer.weight
        torch.testing.assert_close(live, peft_w, atol=1e-6, rtol=0)
    # the PEFT model (pristine) still computes base + unmerged LoRA; greedy tokens agree
    prompts = [[5, 6, 7, 8, 9] * 4, [100, 200, 300], list(range(40, 73))]
    outs = engine.generate(prompts, Sampling(), 12, ignore_eos=True)
    with torch.no_grad():
        for p, o in zip(prompts, outs):
            ref = model.generate(input_ids=torch.tensor([p]), max_new_tokens=12, min_new_tokens=12,
                                 do_sample=False, pad_token_id=0)[0, len(p):].tolist()
            assert o.token_ids == ref


def test_unmerged_peft_path_and_refresh_changes_outputs():
    model = peft_model()
    prompts = [[5, 6, 7, 8, 9] * 4, [100, 200, 300]]
    cfg = EngineConfig(max_batch=4, max_seq_len=64, page_size=16)
    unmerged = Engine(model, EngineConfig(max_batch=4, max_seq_len=64, page_size=16, lora_merge=False))
    assert unmerged.lora is None
    merged = Engine(model, cfg)
    a = [o.token_ids for o in unmerged.generate(prompts, Sampling(), 10, ignore_eos=True)]
    b = [o.token_ids for o in merged.generate(prompts, Sampling(), 10, ignore_eos=True)]
    assert a == b
    state = {k: v * 50 for k, v in adapter_state(model).items()}  # a very different adapter
    merged.refresh_lora(state, 2.0)
    c = [o.token_ids for o in merged.generate(prompts, Sampling(), 10, ignore_eos=True)]
    assert c != b


def test_from_pretrained_with_adapter_dir(tmp_path):
    random_model.build("qwen3-tiny", seed=0, tie_word_embeddings=False).save_pretrained(tmp_path / "base")
    model = peft_model(seed=0)  # the same base weights, plus the adapter
    model.save_pretrained(tmp_path / "lora")
    _state, scaling, targets = load_adapter(tmp_path / "lora")
    assert scaling == 2.0 and set(targets) == set(TARGETS)
    engine = Engine.from_pretrained(tmp_path / "base", EngineConfig(max_batch=2, max_seq_len=64, page_size=16),
                                    adapter_dir=tmp_path / "lora")
    prompt = [list(range(7, 30))]
    got = engine.generate(prompt, Sampling(), 8, ignore_eos=True)[0].token_ids
    with torch.no_grad():
        ref = model.generate(input_ids=torch.tensor(prompt), max_new_tokens=8, min_new_tokens=8, do_sample=False,
                             pad_token_id=0)[0, len(prompt[0]):].tolist()
    assert got == ref
