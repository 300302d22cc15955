"""A GRPO run whose gradient became non-finite is failed by the job, not reported `ok`."""
import json
from pathlib import Path

from rollout_bench.grpo import job
from rollout_bench.grpo.config import TrainSpec
from rollout_bench.grpo.driver import Run

PUBLISHED = Path(__file__).resolve().parents[1] / "results/published/h200-2026-12-01-session6/learn/stats"


def _run(**info):
    steps = [{"step": i, "loss": 0.1, "n_completions": 4} for i in (1, 2)]
    return Run(steps, 1.0, {}, {"wall_budget": {"stopped_after_step": None}, **info})


def test_the_job_fails_a_run_that_applied_a_nonfinite_gradient():
    spec = TrainSpec(num_generations=4)
    assert job.gate(_run(adapter_update_norm=0.5), spec, 2) is None
    run = _run(adapter_update_norm=float("nan"))
    run.steps[1]["nonfinite"] = ["grad_norm"]  # as stats_callback.records marks a NaN it logged
    run.steps[1]["grad_norm"] = None
    assert "non-finite gradient norm at step(s) [2]" in job.gate(run, spec, 2)
    assert "adapter update norm nan" in job.gate(_run(adapter_update_norm=float("nan")), spec, 2)


def test_the_gate_on_the_h200_learn_runs():
    """The published runs (2026-12-01): flex's NaN at step 28 fails it; the reference and vLLM still pass."""
    spec = TrainSpec(num_generations=8, per_device_train_batch_size=64)

    def gate(path):
        rec = json.loads((PUBLISHED / path).read_text())  # its steps keep stats_callback's `nonfinite` marks
        return job.gate(Run(rec["steps"], rec["train_wall_s"], {}, rec), spec, rec["steps_planned"])

    assert "non-finite gradient norm at step(s) [28, 29, 30, 31, 32]" in gate("flex/steps100-seed3407.json")
    assert gate("vllm/steps100-seed3407.json") is None
    assert gate("hf_generate/steps100-seed3407.json") is None
