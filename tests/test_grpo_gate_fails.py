"""The equivalence gate can fail: real GRPO runs (TRL's GRPOTrainer, 8 steps of 2 prompts x 4 completions at
temperature 1.0, the learn case's learning rate) on a tiny warm model. The reference's two seeds make the noise band;
flex as it is stays inside it and passes; flex with one thing broken in its rollout does not, and the verdict says
where and by how much. The faults a real integration makes, and the check that catches each (docs/design.md §7):

| fault in the rollout                                         | caught by                                  |
|--------------------------------------------------------------|--------------------------------------------|
| EOS dropped from every completion                            | gate `completion_ends`; band `truncated`   |
| logprobs 3 nats off                                          | gate `is_weight`, `logprob_match`          |
| logprobs at 0.9 x the temperature the tokens were drawn at   | gate `logprob_match`                       |
| logits + 0.05 nats on half the vocabulary                    | gate `logprob_match` (largest gap, fp32)   |
| the adapter not synced for one step (last step's weights)    | gate `logprob_match` (that step only)      |
| top-p applied twice                                          | a no-op at top_p = 1.0 (the learn case);   |
|                                                              | tests/test_engine_sampler.py at top_p < 1  |

The learning band is too wide to see the three small ones in 8 steps; the sampler-vs-trainer logprob gap sees each.
"""
from types import SimpleNamespace

import pytest
import torch

from rollout_bench.core import atomic, stats
from rollout_bench.core.workload import LORA_TARGETS
from rollout_bench.grpo import availability, compare, flex_rollout, job, verdict
from rollout_bench.report import train as report

STEPS, SEEDS, WINDOW = 8, (3407, 3408), 2
WORKLOAD = {"lora_rank": 32, "lora_alpha": 64, "num_generations": 4, "prompts_per_step": 2,
            "per_device_train_batch_size": 8, "max_new_tokens": 256, "ignore_eos": False, "device": "cpu",
            "dtype": "float32", "dataset": "learnable", "learning_rate": 1e-3}


class BrokenEngine:
    """The flex engine with one fault in what its rollouts hand to TRL."""

    def __init__(self, engine, *, drop_eos=False, logprob_shift=0.0, skip_sync=0):
        self.engine, self.drop_eos, self.logprob_shift = engine, drop_eos, logprob_shift
        # skip_sync = k: step k's adapter sync does nothing, and its rollout samples from step k-1's adapter (step 1's
        # learning rate is 0, warm-up: step 3 is the first whose adapter differs from the step before's)
        self.skip_sync, self.syncs = skip_sync, 0
        self.config = engine.config

    def refresh_lora(self, *args, **kwargs):
        self.syncs += 1
        if self.syncs == self.skip_sync:
            return None
        return self.engine.refresh_lora(*args, **kwargs)

    def memory(self):
        return self.engine.memory()

    def generate(self, prompts, sampling, max_new_tokens, n=1, eos_token_id=None, **kwargs):
        outs = []
        for i, o in enumerate(self.engine.generate(prompts, sampling, max_new_tokens, n=n, eos_token_id=eos_token_id,
                                                   **kwargs)):
            ids, lps = list(o.token_ids), [x + self.logprob_shift for x in o.logprobs]
            if self.drop_eos and ids[-1] == eos_token_id:
                # a completion that was the stop token alone would be left empty: the prompt's last token (an
                # ordinary one; completions come prompt-major) stands in, so that it too ends without EOS
                ids, lps = (ids[:-1], lps[:-1]) if len(ids) > 1 else ([prompts[i // n][-1]], lps)
            outs.append(SimpleNamespace(token_ids=ids, logprobs=lps))
        return outs


def faulty_sampler(real, real_temperature, kind):
    """The engine's sampler (engine/sampler.sample, and sample_temperature, the path decode takes where no row
    truncates) with one fault in its draws or its logprobs."""

    def biased(logits):  # a logit processor left on: +0.05 nats on the upper half of the vocabulary
        logits = logits.clone()
        logits[:, logits.shape[-1] // 2:] += 0.05
        return logits

    def rescored(logits, tokens, temperature):  # drawn at the run's temperature, scored at 0.9 of it
        t = torch.where(temperature > 0, 0.9 * temperature, torch.ones_like(temperature))  # [B]
        return torch.log_softmax(logits / t[:, None], -1).gather(1, tokens[:, None])[:, 0]

    assert kind in ("bias", "temperature"), kind

    def sample(logits, p, positions, how, cap, processed=False):  # logits [B, V]
        if kind == "bias":
            return real(biased(logits), p, positions, how, cap, processed)
        tokens, _ = real(logits, p, positions, how, cap, processed)
        return tokens, rescored(logits, tokens, p.temperature)

    def sample_temperature(logits, temperature, seed, positions):
        if kind == "bias":
            return real_temperature(biased(logits), temperature, seed, positions)
        tokens, _ = real_temperature(logits, temperature, seed, positions)
        return tokens, rescored(logits, tokens, temperature)

    return sample, sample_temperature


@pytest.fixture(scope="module")
def runs(tiny_warm, tmp_path_factory, one_torch_thread):
    reason = availability.unavailable("flex", 0)
    if reason:
        pytest.skip(reason)
    from rollout_bench.assets import lora
    from rollout_bench.engine import sampler

    real_sample, real_temperature = sampler.sample, sampler.sample_temperature
    d = tmp_path_factory.mktemp("gate")
    lora.build(tiny_warm["dir"], d / "lora", 32, 64, list(LORA_TARGETS), 1e-4, 0)
    build = flex_rollout.build_engine

    def run(name, backend, seed=SEEDS[0], steps=STEPS, sampler_fault=None, **fault):
        wl = {**WORKLOAD, "seed": seed, "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                                                     "seed": seed}}
        flex_rollout.build_engine = (lambda *a: BrokenEngine(build(*a), **fault)) if fault else build
        if sampler_fault:
            # the runner takes sample_temperature when it is built: patched before run_job builds it
            sampler.sample, sampler.sample_temperature = faulty_sampler(real_sample, real_temperature, sampler_fault)
        try:
            rec = job.run_job(backend=backend, model="qwen3-tiny-warm", workload=wl, model_dir=str(tiny_warm["dir"]),
                              adapter_dir=str(d / "lora"), dataset_dir=str(tiny_warm["dataset"]), steps=steps,
                              out=str(d / f"{name}.json"))
        finally:
            flex_rollout.build_engine = build
            sampler.sample, sampler.sample_temperature = real_sample, real_temperature
        assert rec["status"] == "ok", rec["reason"]
        return d / f"{name}.json"

    refs = [run(f"hf_generate-{s}", "hf_generate", s) for s in SEEDS]
    band = d / "band.json"
    atomic.write_json(band, verdict.band([stats.load(p) for p in refs], window=WINDOW, alpha=0.05))
    out = {"dir": d, "refs": refs, "band": band}
    # the IS weight and the logprob gap show from the step the fault acts: a few steps of those candidates do
    for name, fault in {"flex": {}, "flex_no_eos": {"drop_eos": True},
                        "flex_shifted": {"logprob_shift": 3.0, "steps": 2},
                        "flex_temperature": {"sampler_fault": "temperature", "steps": 2},
                        "flex_bias": {"sampler_fault": "bias", "steps": 2},
                        "flex_stale_adapter": {"skip_sync": 3, "steps": 4}}.items():
        cand = run(name, "flex", **fault)
        out[name] = compare.compare(refs[0], cand, d / f"compare_{name}.json", band_path=band)
    return out


def test_the_reference_seeds_span_a_band_of_a_learning_run(runs):
    b = stats.read_json(runs["band"])
    assert b["status"] == "ok" and b["seeds"] == list(SEEDS) and not b["not_logged"]
    assert [w["steps"] for w in b["metrics"]["reward"]["windows"]] == [[1, 2], [3, 4], [5, 6], [7, 8]]
    for name in ("reward", "accuracy", "kl", "truncated"):
        assert all(w["lo"] <= w["centre"] <= w["hi"] for w in b["metrics"][name]["windows"])
    for p in runs["refs"]:  # the warm start: a GRPO group's rewards differ, so its advantages are not all zero
        assert max(s["reward_std"] for s in stats.load(p)["steps"]) > 0


def test_flex_as_it_is_is_equivalent(runs):
    res = runs["flex"]
    assert res["equivalent"] and res["gate"]["passed"], res["gate"]
    assert res["band"]["status"] == "inside" and res["band"]["windows_compared"] == STEPS // WINDOW
    # its own logprobs match the trainer's: TRL's correction leaves each token's policy loss as it is
    assert "token_truncate weights the policy gradient by 1 per token" in res["gate"]["checks"]["is_weight"]["detail"]


def test_a_rollout_that_drops_eos_is_not_equivalent(runs):
    """No completion ends with the stop token: TRL reads every one as truncated."""
    res = runs["flex_no_eos"]
    assert not res["equivalent"]
    check = res["gate"]["checks"]["completion_ends"]
    assert not check["ok"] and "cand: at steps [1, 2, 3, 4, 5, 6, 7, 8] up to 100% of completions" in check["detail"]
    # and the band: the truncated fraction, 1 in every window, is far above what the reference's seeds spread over
    out = [e for e in res["band"]["excursions"] if e["metric"] == "truncated"]
    assert res["band"]["status"] == "outside" and len(out) == STEPS // WINDOW
    assert all(e["value"] == 1 and e["by"] > 0 for e in out), out
    row = next(line for line in report.equivalence_table([runs["dir"] / "compare_flex_no_eos.json"],
                                                         [runs["band"]]).splitlines() if "| flex |" in line)
    assert "| NO | OUT (" in row and "truncated @ steps 1-2: 1, " in row and " above [" in row


def test_a_rollout_whose_logprobs_are_off_is_not_equivalent(runs):
    """Logprobs 3 nats too high: TRL's correction then weights every token's policy loss by e^-3."""
    res = runs["flex_shifted"]
    assert not res["equivalent"]
    check = res["gate"]["checks"]["is_weight"]
    assert not check["ok"] and "cand: token_truncate weights the policy gradient by 0.0498 per token" in check["detail"]
    assert [k for k, c in res["gate"]["checks"].items() if not c["ok"]] == ["is_weight", "logprob_match"]


@pytest.mark.parametrize("name, steps", [("flex_temperature", [1, 2]), ("flex_bias", [1, 2]),
                                         ("flex_stale_adapter", [3])])
def test_a_small_logprob_fault_is_seen_by_the_logprob_gap(runs, name, steps):
    """Too small to move the IS weight's median or the band in a few steps; the rollout's logprobs against the
    trainer's, step by step, are off where (and only where) the fault acts."""
    res = runs[name]
    assert not res["equivalent"]
    check = res["gate"]["checks"]["logprob_match"]
    assert not check["ok"] and f"at steps {steps}:" in check["detail"], check["detail"]
    assert [k for k, c in res["gate"]["checks"].items() if not c["ok"]] == ["logprob_match"]


def test_flex_as_it_is_reads_the_trainers_logprobs(runs):
    check = runs["flex"]["gate"]["checks"]["logprob_match"]
    assert check["ok"] and "bound 0.001, largest 0.01, float32" in check["detail"], check["detail"]
