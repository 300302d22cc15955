"""The step-stats callback, the phase clock, compare() and the report renderers, on synthetic data."""
import json
import math
import time
import types

import pytest
from transformers import TrainerControl, TrainerState, TrainingArguments

from rollout_bench.assets import rewards
from rollout_bench.core import stats
from rollout_bench.grpo import compare, timing
from rollout_bench.grpo.config import TrainSpec, check_optimizer
from rollout_bench.grpo.phases import PHASES, PhaseClock
from rollout_bench.grpo.stats_callback import StepStats
from rollout_bench.report import train as report


def _events(cb, step, *logs):
    args, state, control = TrainingArguments(output_dir="/tmp/unused", report_to="none"), TrainerState(), TrainerControl()
    state.global_step = step - 1
    cb.on_step_begin(args, state, control)
    state.global_step = step  # the Trainer increments before on_step_end and before logging
    cb.on_step_end(args, state, control)
    for log in logs:
        cb.on_log(args, state, control, logs=dict(log))


def test_callback_merges_split_log_calls_by_step():
    cb = StepStats()
    # TRL's vanilla path can log KL on a call without `loss`: the seed's callback dropped it
    _events(cb, 1, {"loss": 0.5, "grad_norm": 1.0, "learning_rate": 0.0}, {"kl": 0.01, "reward": -7.5},
            {"completions/mean_length": 12, "rewards/check_answer/mean": -2.0})
    _events(cb, 2, {"kl": 0.02}, {"loss": float("nan"), "grad_norm": 0.9, "reward": -7.0, "reward_std": 0.5})
    _events(cb, 3)
    cb.on_log(None, _state(3), None, logs={"train_runtime": 1.0, "train_loss": 0.4, "epoch": 0.1})
    r1, r2, r3 = cb.records()
    assert (r1["loss"], r1["kl"], r1["reward"], r1["grad_norm"], r1["completion_len"]) == (0.5, 0.01, -7.5, 1.0, 12.0)
    assert r1["rewards/check_answer/mean"] == -2.0 and r1["learning_rate"] == 0.0
    assert r2["kl"] == 0.02 and r2["loss"] is None and r2["nonfinite"] == ["loss"] and r2["reward_std"] == 0.5
    assert r3["loss"] is None and r3["kl"] is None and r3["step_wall_s"] >= 0
    assert "train_runtime" not in r3 and cb.summary["train_loss"] == 0.4
    assert all(r["mem_gb"] is None for r in (r1, r2, r3))  # CPU: no GPU memory
    json.dumps(cb.records(), allow_nan=False)


def _state(step):
    s = TrainerState()
    s.global_step = step
    return s


def test_phase_clock_times_are_exclusive():
    clock = PhaseClock()
    with clock.phase("rollout"):
        time.sleep(0.03)
        with clock.phase("lora_refresh"):
            time.sleep(0.05)
    clock.on_step_end(None, _state(1), None)
    rec = clock.steps[1]
    assert 0.025 < rec["time/rollout_s"] < 0.05 and rec["time/lora_refresh_s"] >= 0.05
    assert rec["n_completions"] == 0 and rec["time/backward_s"] == 0.0
    with pytest.raises(AssertionError):
        with clock.phase("not-a-phase"):
            pass


def test_phase_clock_counts_a_loss_computed_outside_the_logprob_method_as_forward():
    """Unsloth's compute_loss runs its own fused forward; TRL's calls _get_per_token_logps_and_entropies."""
    class Trainer:
        accelerator = types.SimpleNamespace(backward=lambda loss: time.sleep(0.01))

        def _generate(self, prompts):
            return None, [[1]] * len(prompts)

        def _calculate_rewards(self, *a):
            return None

        def _get_per_token_logps_and_entropies(self, *a):
            time.sleep(0.02)

        def compute_loss(self, fused):
            if not fused:
                self._get_per_token_logps_and_entropies()
            time.sleep(0.03)

        def add_callback(self, cb):
            pass

    for fused in (True, False):
        trainer, clock = Trainer(), PhaseClock()
        clock.install(trainer)
        trainer.compute_loss(fused)
        clock.on_step_end(None, _state(1), None)
        rec = clock.steps[1]
        assert rec["time/forward_s"] >= (0.03 if fused else 0.05) and rec["time/logprobs_s"] == 0.0


def test_median_step_skips_three_warmup_steps_and_falls_back_below_four():
    steps = [{"step": i, "step_wall_s": w} for i, w in enumerate([9.0, 8.0, 7.0, 1.0, 2.0, 3.0], 1)]
    assert timing.median_step(steps) == (2.0, [4, 6])
    assert timing.median_step(steps[:3]) == (8.0, [1, 3])


def test_spec_from_workload_and_batch_invariant():
    spec = TrainSpec.from_workload({"lora_rank": 32, "num_generations": 4, "max_new_tokens": 16, "ignore_eos": False,
                                    "sampling": "equivalence", "seed": 3407, "unknown_key": 1})
    assert spec.max_completion_length == 16 and spec.batch_size == 4 and spec.sampling.top_k == 5
    assert spec.sampling.min_p == 0.5 and spec.learning_rate == 5e-6 and spec.max_grad_norm == 1.0
    with pytest.raises(AssertionError):
        TrainSpec(num_generations=4, per_device_train_batch_size=6)


# ---- compare() and the renderers on synthetic stats files -------------------------------------------------------

def _train_stats(tmp_path, backend, *, loss=(0.1, 0.2, 0.3, 0.2), kl=(0.001, 0.002, 0.003, 0.002),
                 n=(4, 4, 4, 4), median=1.0, reward_sha=None, status="ok", lr=5e-6, moved=0.01,
                 optimizer="adamw_torch", is_weight=1.0, seed=3407, cut=0.0, gap=1e-4):
    wl = {"lora_rank": 32, "num_generations": 4, "sampling": {"temperature": 0.1}, "ignore_eos": False,
          "max_new_tokens": 16, "seed": seed, "dtype": "float32"}
    rec = stats.base("train", backend=backend, variant="default", model="qwen3-tiny", workload=wl)
    path = tmp_path / f"{backend}.json"
    if status != "ok":
        return path, stats.finish(stats.skipped(rec, f"{backend} cannot run here: reason and fix"), path)
    steps = [{"step": i + 1, "loss": l, "reward": -7.5 + i, "kl": k, "grad_norm": 0.5 + i, "step_wall_s": median,
              "n_completions": c, "completion_len": 16.0, "reward_std": 0.0, "mem_gb": None,
              "completions/cut_short_frac": cut}
             for i, (l, k, c) in enumerate(zip(loss, kl, n))]
    if backend == "flex":  # what TRL logs when its IS correction runs, and what importance.py adds
        for i, s in enumerate(steps):
            s.update({"sampling/sampling_logp_difference/mean": 0.01 * (i + 1),
                      "sampling/importance_sampling_ratio/mean": 1.0 - 0.01 * i,
                      "is/logp_gap/mean": gap * (i + 1), "is/logp_gap/p99": 0.1 * (i + 1),
                      "is/kl/mean": gap * gap * (i + 1),
                      "is/weight/mean": is_weight - 0.01 * i, "is/zeroed/token_frac": 0.0,
                      "is/seq_log_ratio/mean": -2.0 * (i + 1)})
    rec.update(steps=steps, median_step_s=median, train_wall_s=median * len(steps),
               peak_memory_gb={"allocated": None, "reserved": None}, optimizer=optimizer,
               optimizer_params=64, adapter_update_norm=moved,
               is_correction=backend == "flex", is_mode="token_truncate" if backend == "flex" else None,
               is_clip=[None, 3.0] if backend == "flex" else None,
               reward_sha256=reward_sha or rewards.source_sha256(),
               grpo={"learning_rate": lr, "num_generations": 4, "device": "cpu", "options": {}})
    return path, stats.finish(rec, path)


def test_vllm_config_is_colocated_and_bounded_to_the_workloads_context(tmp_path):
    from rollout_bench.grpo.config import grpo_config

    args = grpo_config(TrainSpec(max_completion_length=16), "vllm", max_steps=1, output_dir=str(tmp_path),
                       max_prompt_len=200)
    assert (args.use_vllm, args.vllm_mode, args.vllm_max_model_length) == (True, "colocate", 216)
    assert args.vllm_gpu_memory_utilization == 0.3 and args.vllm_importance_sampling_correction
    plain = grpo_config(TrainSpec(max_completion_length=16), "hf_generate", max_steps=1, output_dir=str(tmp_path))
    assert not plain.use_vllm


def test_compare_equivalent_runs(tmp_path):
    ref, _ = _train_stats(tmp_path, "hf_generate")
    cand, _ = _train_stats(tmp_path, "flex", loss=(0.1, 0.25, 0.3, 0.1), kl=(0.001, 0.004, 0.002, 0.002), median=0.25)
    out = tmp_path / "cmp" / "hf_generate__flex.json"
    res = compare.compare(ref, cand, out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    assert res["status"] == "ok" and res["gate"]["passed"], res["gate"]
    assert res["diff"]["loss"]["max_abs"] == pytest.approx(0.1) and res["diff"]["loss"]["n_compared"] == 4
    assert res["diff"]["loss"]["mean_abs"] == pytest.approx((0 + 0.05 + 0 + 0.1) / 4)
    assert res["diff"]["kl"]["max_abs"] == pytest.approx(0.002) and res["diff"]["reward"]["max_abs"] == 0
    assert res["step_time_ratio"] == pytest.approx(0.25) and res["common_steps"] == 4
    assert res["range"]["kl"]["cand"] == [0.001, 0.004]


def test_compare_a_shorter_run_over_the_steps_both_ran(tmp_path):
    """A slow backend run for fewer steps (one device session) is compared over the common steps,
    and the comparison and the equivalence table say so."""
    ref, _ = _train_stats(tmp_path, "hf_generate")
    cand, _ = _train_stats(tmp_path, "transformers_cb", loss=(0.1, 0.2, 0.3), kl=(0.001, 0.002, 0.003), n=(4, 4, 4))
    out = tmp_path / "c.json"
    res = compare.compare(ref, cand, out)
    assert res["gate"]["passed"], res["gate"]
    assert res["steps"] == {"ref": 4, "cand": 3} and res["common_steps"] == 3
    assert "steps: reference 4, candidate 3; compared over 3" in report.equivalence_table([out])
    assert res["diff"]["loss"]["n_compared"] == 3


def test_step_time_ratio_of_a_shorter_run_is_over_the_steps_both_ran(tmp_path):
    """A reference whose later steps got slower must not make a run stopped early look faster: both
    medians are taken over steps 4..M of the M steps both ran."""
    ref, _ = _train_stats(tmp_path, "hf_generate", loss=(0.1,) * 6, kl=(0.001,) * 6, n=(4,) * 6)
    cand, _ = _train_stats(tmp_path, "transformers_cb", loss=(0.1,) * 5, kl=(0.001,) * 5, n=(4,) * 5)
    for path, walls in ((ref, (9.0, 9.0, 9.0, 1.0, 2.0, 10.0)), (cand, (9.0, 9.0, 9.0, 2.0, 4.0))):
        rec = json.loads(path.read_text())
        for st, w in zip(rec["steps"], walls):
            st["step_wall_s"] = w
        med, span = timing.median_step(rec["steps"])
        path.write_text(json.dumps({**rec, "median_step_s": med, "median_step_window": span}))
    res = compare.compare(ref, cand, tmp_path / "c.json")
    assert res["median_step_s"] == {"ref": 2.0, "cand": 3.0}  # each run's own: ratio would read 1.5
    assert res["step_time_window"] == [4, 5] and res["common_median_step_s"] == {"ref": 1.5, "cand": 3.0}
    assert res["step_time_ratio"] == 2.0


@pytest.mark.parametrize("change,failing", [
    ({"loss": (0.1, None, 0.3, 0.2)}, "finite_loss"),
    ({"kl": (0.001, 0.9, 0.003, 0.002)}, "kl_bounded"),
    ({"kl": (0.001, None, 0.003, 0.002)}, "kl_bounded"),
    ({"n": (4, 4, 8, 4)}, "completion_counts"),
    ({"reward_sha": "0" * 64}, "reward_code"),
    ({"lr": 1e-5}, "hyperparameters"),
    ({"optimizer": "adamw_8bit"}, "hyperparameters"),  # the trainer's optimizer, not only the grpo dict
    ({"moved": 0.0}, "adapter_trained"),  # an optimizer without the LoRA parameters: nothing learned
    ({"backend": "flex", "is_weight": 4.6e-6}, "is_weight"),  # TRL's sequence_mask on a bf16 rollout
    ({"cut": 1.0}, "completion_ends"),  # a rollout that drops its EOS token
    ({"backend": "flex", "gap": 0.02}, "logprob_match"),  # a sampler whose logprobs are not the trainer's
])
def test_compare_gate_failures(tmp_path, change, failing):
    ref, _ = _train_stats(tmp_path, "hf_generate")
    cand, _ = _train_stats(tmp_path, change.pop("backend", "transformers_cb"), **change)
    res = compare.compare(ref, cand, tmp_path / "c.json")
    assert not res["gate"]["passed"]
    assert [k for k, c in res["gate"]["checks"].items() if not c["ok"]] == [failing]


def test_compare_reads_the_trainers_optimizer_not_the_requested_name(tmp_path):
    # stats made before `train.optim` existed have no grpo.optim; the optimizer the trainer built decides
    ref, _ = _train_stats(tmp_path, "hf_generate")
    cand, _ = _train_stats(tmp_path, "unsloth")
    rec = json.loads(cand.read_text())
    rec["grpo"]["optim"] = "adamw_torch"
    cand.write_text(json.dumps(rec))
    assert compare.compare(ref, cand, tmp_path / "c.json")["gate"]["checks"]["hyperparameters"]["ok"]
    rec["optimizer"] = "adamw_8bit"
    cand.write_text(json.dumps(rec))
    check = compare.compare(ref, cand, tmp_path / "c.json")["gate"]["checks"]["hyperparameters"]
    assert not check["ok"] and check["detail"] == "differ in ['optimizer']"


def test_an_8bit_optimizer_without_bitsandbytes_names_the_setting(monkeypatch):
    import transformers.trainer_optimizer

    # as where bitsandbytes is not installed; paged_adamw_32bit needs it too (no "8bit" in its name)
    monkeypatch.setattr(transformers.trainer_optimizer, "is_bitsandbytes_available", lambda: False)
    for optim in ("adamw_8bit", "paged_adamw_32bit"):
        with pytest.raises(ValueError, match=rf"train\.optim: '{optim}' cannot be built here \(ImportError: "
                                             r"You need to install `bitsandbytes`.*set train\.optim to adamw_torch"):
            check_optimizer(TrainingArguments(output_dir="/tmp/unused", report_to="none", optim=optim))
    check_optimizer(TrainingArguments(output_dir="/tmp/unused", report_to="none", optim="adamw_torch"))


def test_compare_with_a_skipped_backend_says_why(tmp_path):
    ref, _ = _train_stats(tmp_path, "hf_generate")
    cand, _ = _train_stats(tmp_path, "vllm", status="skipped")
    res = compare.compare(ref, cand, tmp_path / "c.json")
    assert res["status"] == "skipped" and "candidate vllm is skipped" in res["reason"]


def _band(tmp_path, *seeds, **kw):
    """The band of hf_generate runs under `seeds` (their losses shifted a little per seed)."""
    from rollout_bench.core import atomic
    from rollout_bench.grpo import verdict

    refs = []
    for i, seed in enumerate(seeds):
        path, _ = _train_stats(tmp_path / f"s{seed}", "hf_generate", seed=seed,
                               loss=tuple(v + 0.02 * i for v in (0.1, 0.2, 0.3, 0.2)), **kw)
        refs.append(stats.load(path))
    out = tmp_path / "band.json"
    atomic.write_json(out, verdict.band(refs, window=2, alpha=0.05))
    return out


def test_renderers(tmp_path):
    ref, _ = _train_stats(tmp_path, "hf_generate")
    cand, _ = _train_stats(tmp_path, "flex", median=0.5)
    skip, _ = _train_stats(tmp_path, "vllm", status="skipped")
    band = _band(tmp_path, 3407, 3408)
    c1, c2, c3 = tmp_path / "c1.json", tmp_path / "c2.json", tmp_path / "c3.json"
    compare.compare(ref, cand, c1, band_path=band)
    compare.compare(ref, skip, c2, band_path=band)
    table = report.equivalence_table([c1, c2], [band])
    assert table.startswith("Equivalence. ") and "| qwen3-tiny | hf_generate | flex | yes | inside (" in table
    assert "- qwen3-tiny, hf_generate seeds [3407, 3408], windows of 2 steps, alpha 0.05: reward -7 -> -5" in table
    assert "): +2 ± 0 (sd over seeds; band ± " in table  # reward -7.5 + step in both seeds
    assert "| skipped |" in table and "0.50 |" in table
    # a loss far above the band: not equivalent, and the notes say where and by how much
    far, _ = _train_stats(tmp_path / "far", "transformers_cb", loss=(0.1, 0.2, 3.0, 3.0))
    compare.compare(ref, far, c3, band_path=band)
    row = next(line for line in report.equivalence_table([c3], [band]).splitlines() if "| transformers_cb |" in line)
    assert "| NO | OUT (" in row and "loss @ steps 3-4: 3, " in row and " above [" in row
    assert report.equivalence_table([]).endswith("No comparisons in these results (one backend ran).\n")
    train = report.training_table([ref, cand, skip])
    assert "| qwen3-tiny | flex | 3407 | ok | 4 | 0.500 | 0.00025 (worst 0.0004); KL 4e-08 |" in train
    assert "| qwen3-tiny | hf_generate | 3407 | ok | 4 | 1.000 | — |" in train and "skipped: vllm cannot run here" in train
    # per-step medians of the gap (1e-4..4e-4), its p99 (0.1..0.4), the weight (1.0..0.97) and zeroed tokens
    assert ("| token_truncate [-, 3]: mean \\|Δlogp\\| 0.00025, p99 0.25; weight 0.985, zeroed 0%; "
            "log sequence ratio -5 |") in train
    rec = json.loads(cand.read_text())
    cand.write_text(json.dumps({**rec, "sampler_logprobs": "processed"}))
    assert "| token_truncate [-, 3] (processed logprobs): mean \\|Δlogp\\|" in report.training_table([cand])
    assert "| adamw_torch | no |" in train
    df = report.trajectory_frame([ref, cand, skip])
    assert set(df.backend) == {"hf_generate", "flex"} and set(df.metric) == {"reward", "kl", "step_wall_s"}
    bands = report.band_frame([band])
    assert set(bands.metric) == {"reward", "kl"}  # loss is banded, not charted
    assert list(bands[bands.metric == "reward"].step) == [0.5, 2.5, 2.5, 4.5]  # windows 1-2, 3-4 meet at 2.5
    report.save_chart(report.trajectory_charts(df, bands), tmp_path / "t.html", tmp_path / "t.svg")
    assert (tmp_path / "t.svg").read_text().lstrip().startswith("<svg")
    assert not math.isnan(df.value.sum())


def test_old_stats_without_is_figures_render_trls_ratio(tmp_path):
    """Stats written before importance.py (the published runs) keep TRL's own mean ratio in the table."""
    cand, _ = _train_stats(tmp_path, "flex")
    rec = json.loads(cand.read_text())
    for st in rec["steps"]:
        for k in [k for k in st if k.startswith("is/")]:
            del st[k]
    cand.write_text(json.dumps({**rec, "is_mode": "sequence_mask", "is_clip": None}))
    assert "| sequence_mask: mean \\|Δlogp\\| 0.025; mean ratio 0.985 |" in report.training_table([cand])


def test_training_table_takes_every_median_over_the_median_steps_window(tmp_path):
    """The phase columns and IS medians use steps 4..N like the median step: a slow warm-up (graph
    capture, compile) must not move them."""
    path, _ = _train_stats(tmp_path, "flex", loss=(0.1,) * 6, kl=(0.001,) * 6, n=(4,) * 6)
    rec = json.loads(path.read_text())
    for s, rollout in zip(rec["steps"], (20.0, 20.0, 20.0, 1.0, 2.0, 3.0)):
        s.update({f"time/{p}_s": 0.0 for p in PHASES})
        s["time/rollout_s"] = rollout
    path.write_text(json.dumps({**rec, "median_step_window": [4, 6]}))
    row = next(line for line in report.training_table([path]).splitlines() if "| flex |" in line)
    assert row.endswith("| 2.000 | 0.000 | 0.000 | 0.000 | 0.000 | 0.000 | 0.000 |"), row
    assert "mean \\|Δlogp\\| 0.0005," in row  # gaps of steps 4..6: 4e-4, 5e-4, 6e-4


def test_cli_commands_run_compare_and_render(tmp_path, capsys):
    import argparse

    from rollout_bench.grpo import cli
    from rollout_bench.report import cli as report_cli

    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    cli.add_commands(sub)
    report_cli.add_commands(sub)
    ref, _ = _train_stats(tmp_path, "hf_generate")
    cand, _ = _train_stats(tmp_path, "flex", median=0.5)
    ref2, _ = _train_stats(tmp_path / "s2", "hf_generate", seed=3408, loss=(0.12, 0.22, 0.32, 0.22))
    band = tmp_path / "band.json"
    a = ap.parse_args(["band", "--refs", str(ref), str(ref2), "--window", "2", "--alpha", "0.05", "--out", str(band)])
    a.fn(a)
    assert json.loads(capsys.readouterr().out)["status"] == "ok"
    assert json.loads(band.read_text())["seeds"] == [3407, 3408]
    a = ap.parse_args(["compare", "--ref", str(ref), "--band", str(band), "--candidate", str(cand),
                       "--out", str(tmp_path / "c.json")])
    a.fn(a)
    assert json.loads(capsys.readouterr().out) == {"status": "ok", "passed": True, "equivalent": True,
                                                   "step_time_ratio": 0.5}
    a = ap.parse_args(["render-train", "--stats", str(ref), str(cand), "--comparisons", str(tmp_path / "c.json"),
                       "--bands", str(band),
                       "--train-table", str(tmp_path / "t.md"), "--equivalence-table", str(tmp_path / "e.md"),
                       "--chart-html", str(tmp_path / "c.html"), "--chart-svg", str(tmp_path / "c.svg")])
    a.fn(a)
    assert "| flex |" in (tmp_path / "t.md").read_text() and "| yes | inside (" in (tmp_path / "e.md").read_text()
    assert (tmp_path / "c.svg").exists() and (tmp_path / "c.html").exists()


def test_logprob_match_says_where_it_does_not_apply(tmp_path):
    """vLLM's processed logprobs under a truncating sampler differ from the trainer's by design (-log kept mass: 1.17
    a token on the smoke run); a flex run without the IS correction recorded no sampler logprobs to compare."""
    ref, _ = _train_stats(tmp_path, "hf_generate")
    cand, _ = _train_stats(tmp_path, "flex", gap=0.5)
    rec = json.loads(cand.read_text())
    check = lambda r: (cand.write_text(json.dumps(r)),
                       compare.compare(ref, cand, tmp_path / "c.json")["gate"]["checks"]["logprob_match"])[1]
    assert not check(rec)["ok"]
    truncating = {"temperature": 0.1, "top_k": 5, "top_p": 0.97, "min_p": 0.5}
    got = check({**rec, "sampler_logprobs": "processed", "workload": {**rec["workload"], "sampling": truncating}})
    assert got["ok"] and "not comparable" in got["detail"]
    got = check({**rec, "sampler_logprobs": "policy", "workload": {**rec["workload"], "sampling": truncating}})
    assert not got["ok"]  # the policy logprob is the trainer's whatever the sampler kept
    got = check({**rec, "is_correction": False})
    assert got["ok"] and "not measured: the IS correction is off" in got["detail"]


def test_a_failed_runs_traceback_stays_on_its_training_table_row(tmp_path):
    """render.one_line, as the generation table's: a reason's newlines would end the row, its pipes split it."""
    rec = stats.base("train", backend="flex", variant="default", model="qwen3-tiny",
                     workload={"lora_rank": 32, "num_generations": 4, "sampling": {"temperature": 0.1},
                               "ignore_eos": False, "max_new_tokens": 16, "seed": 3407, "dtype": "float32"})
    path = tmp_path / "flex.json"
    stats.finish(stats.skipped(rec, "Traceback:\n  File 'x', line 3\n    a | b\nImportError: no"), path)
    rows = [line for line in report.training_table([path]).splitlines() if "| qwen3-tiny |" in line]
    assert len(rows) == 1 and "| skipped: Traceback: File 'x', line 3 a \\| b ImportError: no |" in rows[0], rows
