"""The NaN dump of a real (tiny, CPU) GRPO run replays through grpo.nan_replay under every variant."""
import json

import pytest
import torch

from rollout_bench.assets import lora
from rollout_bench.core.workload import LORA_TARGETS, SAMPLING_PRESETS
from rollout_bench.grpo import driver, nan_replay
from rollout_bench.grpo.config import TrainSpec
from rollout_bench.grpo.finite_grads import FiniteGrads

WORKLOAD = {"lora_rank": 32, "lora_alpha": 64, "num_generations": 4, "max_new_tokens": 16, "ignore_eos": False,
            "sampling": {**SAMPLING_PRESETS["equivalence"], "seed": 3407}, "device": "cpu", "dtype": "float32"}


class Poisoned(FiniteGrads):
    """The real guard, after one LoRA gradient is made NaN at step 2 (the backward itself stays finite)."""

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if state.global_step == 1:
            next(p for n, p in model.named_parameters() if "lora_B" in n and p.grad is not None).grad.fill_(float("nan"))
        super().on_pre_optimizer_step(args, state, control, model=model, **kwargs)


@pytest.fixture(scope="module")
def dumped(tiny_assets, tmp_path_factory):
    d = tmp_path_factory.mktemp("nan")
    lora.build(tiny_assets["model"], d / "lora32", 32, 64, list(LORA_TARGETS), 1e-4, 0)
    mp = pytest.MonkeyPatch()
    mp.setattr(driver, "FiniteGrads", Poisoned)
    mp.setenv(driver.NAN_DUMP_VAR, str(d / "dump"))
    try:
        run = driver.train("hf_generate", TrainSpec.from_workload(WORKLOAD), model_dir=tiny_assets["model"],
                           adapter_dir=str(d / "lora32"), dataset_dir=tiny_assets["dataset"], steps=3)
    finally:
        mp.undo()
    return {**tiny_assets, "lora": str(d / "lora32"), "run": run, "dir": d}


def test_the_run_stops_at_the_poisoned_step_and_dumps_it(dumped):
    info = dumped["run"].info
    assert info["nonfinite_grad_step"] == 2 and len(dumped["run"].steps) == 2
    assert info["nonfinite_grad_params"] == []  # the backward was finite: the NaN came after it
    dump = torch.load(info["nonfinite_dump"])
    assert dump["step"] == 2 and {"prompt_ids", "completion_ids", "completion_mask"} <= set(dump["inputs"])


def test_replay_runs_every_variant_and_finds_poisoned_weights(dumped, tmp_path):
    dump = torch.load(dumped["run"].info["nonfinite_dump"])
    args = ["--backend", "hf_generate", "--workload", json.dumps(WORKLOAD), "--model-dir", dumped["model"],
            "--adapter", dumped["lora"], "--dataset", dumped["dataset"]]
    torch.backends.cuda.enable_cudnn_sdp(True)  # as a fresh process starts (the fixture's run turned it off)
    assert nan_replay.main([dumped["run"].info["nonfinite_dump"], *args, "--out", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert set(report["variants"]) == set(nan_replay.VARIANTS)
    assert report["as_run_kernels"]["cudnn"] is False  # as_run replays the GRPO job's SDPA policy
    ran = {k: v for k, v in report["variants"].items() if "skipped" not in v}
    assert set(report["variants"]) - set(ran) == set(nan_replay.CUDA_ONLY)  # CPU: SDPA has no efficient kernel
    for rec in ran.values():  # the real step's backward is finite on CPU
        assert rec["grad_finite"] and rec["first_nonfinite_output"] is None and rec["loss"] == rec["loss"]
    # a NaN weight shows in the forward, and anomaly mode names the op
    name = next(n for n in dump["trainable"] if "lora_A" in n)
    dump["trainable"][name] = torch.full_like(dump["trainable"][name], float("nan"))
    trainer = nan_replay.build_trainer("hf_generate", WORKLOAD, dumped["model"], dumped["lora"], dumped["dataset"],
                                       str(tmp_path / "w"))
    bad = nan_replay.replay(trainer, dump, ["as_run", "anomaly"])["variants"]
    assert bad["as_run"]["first_nonfinite_output"] is not None and not bad["as_run"]["grad_finite"]
    assert "error" in bad["anomaly"] or not bad["anomaly"]["grad_finite"]
