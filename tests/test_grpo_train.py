"""Real 3-step GRPO runs on CPU (tiny random Qwen3, LoRA r=32 on all projections), the flex rollout
wiring through TRL's rollout_func, and the comparison of real trajectories."""
from types import SimpleNamespace

import pytest
import torch

from rollout_bench.core import stats
from rollout_bench.core.workload import LORA_TARGETS, SAMPLING_PRESETS, Sampling
from rollout_bench.grpo import availability, compare, driver, flex_rollout, job
from rollout_bench.grpo.config import TrainSpec
from rollout_bench.report import train as report

STEPS = 3
WORKLOAD = {"lora_rank": 32, "lora_alpha": 64, "num_generations": 4, "max_new_tokens": 16, "ignore_eos": False,
            "sampling": {**SAMPLING_PRESETS["equivalence"], "seed": 3407}, "device": "cpu", "dtype": "float32"}


@pytest.fixture(scope="module")
def grpo_assets(tiny_assets, tmp_path_factory):
    from rollout_bench.assets import lora

    d = tmp_path_factory.mktemp("grpo")
    lora.build(tiny_assets["model"], d / "lora32", 32, 64, list(LORA_TARGETS), 1e-4, 0)
    return {**tiny_assets, "lora": str(d / "lora32"), "dir": d}


@pytest.fixture(scope="module")
def run(grpo_assets):
    done = {}

    def _run(backend):
        if backend not in done:
            out = grpo_assets["dir"] / f"train_{backend}.json"
            rec = job.run_job(backend=backend, model="qwen3-tiny", workload=WORKLOAD, model_dir=grpo_assets["model"],
                              adapter_dir=grpo_assets["lora"], dataset_dir=grpo_assets["dataset"], steps=STEPS,
                              out=str(out))
            done[backend] = (out, rec)
        return done[backend]

    return _run


@pytest.mark.parametrize("backend", ["hf_generate", "transformers_cb"])
def test_three_step_run_writes_the_stats_contract(run, backend):
    out, rec = run(backend)
    assert rec["status"] == "ok", rec["reason"]
    assert stats.load(out)["backend"] == backend  # schema-valid on disk
    assert [s["step"] for s in rec["steps"]] == [1, 2, 3]
    assert rec["nonfinite_grad_step"] is None  # finite_grads.FiniteGrads watched every step
    # cuDNN's SDPA off in every GRPO process (attention_kernels.py), the others left to SDPA's choice
    assert rec["attention_kernels"]["sdpa"] == {"cudnn": False, "flash": True, "mem_efficient": True, "math": True}
    for s in rec["steps"]:
        assert all(k in s for k in job.CONTRACT)
        assert s["n_completions"] == 4 and s["completion_len"] <= 16
        # KL to the base model: the shared adapter's lora_B ~ N(0, 1e-4) makes it tiny but the gradient non-zero;
        # at that size the k3 estimate is fp32 rounding around 0, hence the tolerance
        assert s["kl"] is not None and s["kl"] >= -1e-6 and s["grad_norm"] > 0
        assert s["loss"] is not None and "rewards/check_answer/mean" in s and "entropy" in s
        assert s["time/rollout_s"] > 0 and s["time/backward_s"] > 0 and s["time/logprobs_s"] > 0
    assert rec["steps"][1]["learning_rate"] > 0  # warm-up is ceil(0.1 * 3) = 1 step
    # the optimizer holds the LoRA (2 layers x 7 projections x (A + B), r=32) and moved it
    per_layer = [(64, 64), (64, 32), (64, 32), (64, 64), (64, 128), (64, 128), (128, 64)]  # q k v o gate up down
    assert rec["optimizer_params"] == 2 * sum(32 * (i + o) for i, o in per_layer) and rec["adapter_update_norm"] > 0
    assert rec["median_step_s"] > 0 and rec["median_step_window"] == [1, 3]  # fewer than 4 steps: all of them
    assert rec["optimizer"] == rec["grpo"]["optim"] == "adamw_torch"  # built what the config asked for
    assert rec["is_correction"] is False and rec["grpo"]["max_grad_norm"] == 1.0 and rec["grpo"]["beta"] > 0
    assert rec["reward_funcs"] == ["match_format_exactly", "match_format_approximately", "check_answer", "check_numbers"]


def test_real_trajectories_compare_as_equivalent(run, tmp_path):
    ref, _ = run("hf_generate")
    cand, _ = run("transformers_cb")
    res = compare.compare(ref, cand, tmp_path / "hf_generate__transformers_cb.json")
    assert res["gate"]["passed"], res["gate"]
    table = report.equivalence_table([tmp_path / "hf_generate__transformers_cb.json"])
    assert "| hf_generate | transformers_cb | yes |" in table


def test_wall_budget_stops_between_steps_and_keeps_the_planned_schedule(run, grpo_assets, tmp_path):
    """A budget smaller than one step stops the run after step 1 of 3: the stats are ok with one step,
    say the plan and why, and step 1 ran with the 3-step run's learning rate (same warm-up/decay plan)."""
    out = tmp_path / "budget.json"
    rec = job.run_job(backend="hf_generate", model="qwen3-tiny", workload=WORKLOAD, model_dir=grpo_assets["model"],
                      adapter_dir=grpo_assets["lora"], dataset_dir=grpo_assets["dataset"], steps=STEPS,
                      out=str(out), max_wall_s=1e-3)
    assert rec["status"] == "ok", rec["reason"]
    assert [s["step"] for s in rec["steps"]] == [1] and rec["steps_planned"] == STEPS
    assert rec["wall_budget"] == {"max_wall_s": 1e-3, "stopped_after_step": 1}
    assert rec["median_step_window"] == [1, 1] and stats.load(out)["steps_planned"] == STEPS
    _, full = run("hf_generate")
    assert full["wall_budget"] == {"max_wall_s": None, "stopped_after_step": None}
    assert rec["steps"][0]["learning_rate"] == full["steps"][0]["learning_rate"]
    row = next(line for line in report.training_table([out]).splitlines() if "| hf_generate |" in line)
    assert "| ok | 1 of 3 (wall budget 0 s) |" in row


@pytest.mark.parametrize("backend", ["vllm", "unsloth"])
def test_backends_that_cannot_run_here_are_skipped_with_a_reason(grpo_assets, backend):
    out = grpo_assets["dir"] / f"skip_{backend}.json"
    rec = job.run_job(backend=backend, model="qwen3-tiny", workload=WORKLOAD, model_dir=grpo_assets["model"],
                      adapter_dir=grpo_assets["lora"], dataset_dir=grpo_assets["dataset"], steps=STEPS, out=str(out))
    assert rec["status"] == "skipped" and ("install" in rec["reason"] or "GPU" in rec["reason"])
    assert stats.load(out)["status"] == "skipped"


def test_flex_real_engine(run):
    reason = availability.unavailable("flex", 0)
    if reason:
        pytest.skip(f"flex engine not importable yet: {reason}")
    out, rec = run("flex")
    assert rec["status"] == "ok", rec["reason"]
    assert rec["is_correction"] and rec["engine"]["lora_refreshes"] == STEPS and rec["sampler_logprobs"] == "policy"
    assert rec["optimizer_params"] > 0 and rec["adapter_update_norm"] > 0
    # the engine adds only the merged copy; the base it reads is the trainer's
    assert "shared_weights_gb" in rec["engine"]
    for s in rec["steps"]:
        assert s["time/lora_refresh_s"] > 0 and s["n_completions"] == 4
        # the engine's logprobs are what TRL recomputes with the trained adapter: IS ratio ~ 1
        assert s["sampling/sampling_logp_difference/max"] < 1e-3
        assert 0.99 < s["sampling/importance_sampling_ratio/mean"] < 1.01


# ---- the flex rollout wiring, against a stand-in with the engine's API ------------------------------------------

class ReferenceEngine:
    """The flex engine's API (generate / refresh_lora) on plain HF: merged-LoRA copy of the base, HF sampling,
    logprob = log_softmax(logits / temperature) of each sampled token, which is what TRL recomputes."""

    def __init__(self, peft_model, spec, max_prompt_len):
        from transformers import AutoModelForCausalLM

        # its own copy of the trainer's base, from disk: a deepcopy would carry TRL's patched LM head
        self.model = AutoModelForCausalLM.from_pretrained(peft_model.get_base_model().name_or_path).eval()
        self.pristine = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        self.calls, self.refreshes = [], []
        self.config = SimpleNamespace(logprobs="policy")  # what the driver records as `sampler_logprobs`

    @torch.no_grad()
    def refresh_lora(self, state, scaling):
        mods = dict(self.model.named_modules())
        for n, p in self.model.named_parameters():
            p.copy_(self.pristine[n])
        for key, a in state.items():
            if ".lora_A." in key:
                target = key.removeprefix("base_model.model.").split(".lora_A.")[0]
                mods[target].weight += scaling * (state[key.replace(".lora_A.", ".lora_B.")] @ a)
        self.refreshes.append(scaling)

    @torch.no_grad()
    def generate(self, prompts, sampling, max_new_tokens, n=1, ignore_eos=False, eos_token_id=None):
        self.calls.append((len(prompts), n, sampling.seed))
        torch.manual_seed(sampling.seed)
        out = []
        for p in prompts:
            ids = torch.tensor([p] * n)
            g = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                    temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                                    min_p=sampling.min_p, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                                    pad_token_id=eos_token_id, output_logits=True, return_dict_in_generate=True)
            seqs = g.sequences[:, ids.shape[1]:]  # [n, T]
            logp = torch.log_softmax(torch.stack(g.logits, 1).float() / sampling.temperature, -1)
            logp = logp.gather(-1, seqs[..., None]).squeeze(-1)  # [n, T]
            for row, lp in zip(seqs.tolist(), logp.tolist()):
                end = row.index(eos_token_id) + 1 if eos_token_id in row else len(row)
                out.append(SimpleNamespace(token_ids=row[:end], logprobs=lp[:end]))
        return out


def test_flex_rollout_through_trl_with_importance_sampling(grpo_assets):
    engines = []

    def factory(*a):
        engines.append(ReferenceEngine(*a))
        return engines[-1]

    spec = TrainSpec.from_workload(WORKLOAD)
    run = driver.train("flex", spec, model_dir=grpo_assets["model"], adapter_dir=grpo_assets["lora"],
                       dataset_dir=grpo_assets["dataset"], steps=STEPS, dataset_limit=64, engine_factory=factory)
    eng = engines[0]
    assert run.info["is_correction"] and run.info["engine"]["lora_refreshes"] == STEPS
    assert run.info["sampler_logprobs"] == "policy"
    assert eng.refreshes == [2.0] * STEPS  # alpha / r, once per optimizer step
    assert eng.calls == [(1, 4, 3407), (1, 4, 3408), (1, 4, 3409)]  # one prompt group of 4, a seed per step
    for s in run.steps:
        assert s["n_completions"] == 4 and s["loss"] is not None and s["kl"] is not None
        assert s["time/lora_refresh_s"] > 0
        # TRL's own IS correction ran, and the refreshed merged copy samples from the trained policy
        assert s["sampling/sampling_logp_difference/max"] < 1e-3, s["sampling/sampling_logp_difference/max"]
        assert s["sampling/importance_sampling_ratio/min"] > 0.99


def test_shared_adapter_is_copied_into_the_trl_applied_lora(grpo_assets):
    from peft import get_peft_model
    from safetensors.torch import load_file

    spec = TrainSpec.from_workload(WORKLOAD)
    model, cfg = driver.load_policy(grpo_assets["model"], grpo_assets["lora"], spec)
    assert cfg is not None and cfg.r == 32 and sorted(cfg.target_modules) == sorted(LORA_TARGETS)
    peft_model = get_peft_model(model, cfg)  # what GRPOTrainer does with peft_config
    driver.load_adapter_weights(peft_model, grpo_assets["lora"])
    saved = load_file(f"{grpo_assets['lora']}/adapter_model.safetensors")
    state = flex_rollout.adapter_state(peft_model)
    assert set(state) == set(saved) and len(saved) == 2 * 7 * 2  # A and B, 7 projections, 2 layers
    assert all(torch.equal(state[k].float(), saved[k].float()) for k in saved)
    assert flex_rollout.lora_scaling(peft_model.peft_config["default"]) == 2.0


def test_group_detection():
    assert flex_rollout.groups([[1, 2], [1, 2], [3], [3]]) == ([[1, 2], [3]], 2)
    assert flex_rollout.groups([[1], [1], [2]]) == ([[1], [1], [2]], 1)
    assert flex_rollout.groups([[1], [2]]) == ([[1], [2]], 1)


def test_unsloth_driver_wiring_with_a_stand_in_module(grpo_assets, monkeypatch):
    """Our glue around Unsloth (its loader's arguments, LoRA from the shared adapter's config, the
    adapter's tensors copied in, TRL given the PeftModel and no peft_config) on CPU, with a stand-in
    `unsloth` module built on HF + PEFT: Unsloth itself needs a CUDA GPU to import."""
    import sys
    from types import ModuleType

    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from rollout_bench.backends.unsloth import core_key

    calls = {}

    class FastLanguageModel:
        @staticmethod
        def from_pretrained(model_name, max_seq_length, dtype, load_in_4bit, fast_inference, **kw):
            calls["from_pretrained"] = dict(max_seq_length=max_seq_length, load_in_4bit=load_in_4bit,
                                            fast_inference=fast_inference)
            return AutoModelForCausalLM.from_pretrained(model_name, dtype=dtype), None

        @staticmethod
        def get_peft_model(model, r, lora_alpha, target_modules, lora_dropout, bias, use_rslora,
                           use_gradient_checkpointing, random_state):
            calls["get_peft_model"] = dict(r=r, lora_alpha=lora_alpha, targets=sorted(target_modules))
            return get_peft_model(model, LoraConfig(r=r, lora_alpha=lora_alpha, target_modules=target_modules,
                                                    lora_dropout=lora_dropout, bias=bias, use_rslora=use_rslora))

    fake = ModuleType("unsloth")
    fake.FastLanguageModel = FastLanguageModel
    monkeypatch.setitem(sys.modules, "unsloth", fake)

    spec = TrainSpec.from_workload(WORKLOAD)
    model, peft_config = driver.load_unsloth_policy(grpo_assets["model"], grpo_assets["lora"], spec, 300)
    assert peft_config is None and calls["from_pretrained"] == {"max_seq_length": 300, "load_in_4bit": False,
                                                                "fast_inference": False}
    assert calls["get_peft_model"] == {"r": 32, "lora_alpha": 64, "targets": sorted(LORA_TARGETS)}
    saved = {core_key(k): v for k, v in load_file(f"{grpo_assets['lora']}/adapter_model.safetensors").items()}
    live = {core_key(n): p for n, p in model.named_parameters() if ".lora_" in n}
    assert saved.keys() == live.keys() and all(torch.equal(live[k], saved[k]) for k in saved)

    run = driver.train("unsloth", spec, model_dir=grpo_assets["model"], adapter_dir=grpo_assets["lora"],
                       dataset_dir=grpo_assets["dataset"], steps=2)
    assert [s["step"] for s in run.steps] == [1, 2] and all(s["loss"] is not None for s in run.steps)
    assert run.info["trainer_class"].endswith("GRPOTrainer")


def test_flex_rollout_engine_shares_the_trainers_base_as_its_pristine_copy(grpo_assets):
    """The engine's pristine base is the trainer's frozen base (same tensors, never written, on the
    trainer's device); it adds only the merged copy, which equals base + scaling * B @ A."""
    from peft import get_peft_model

    spec = TrainSpec.from_workload(WORKLOAD)
    model, cfg = driver.load_policy(grpo_assets["model"], grpo_assets["lora"], spec)
    peft_model = get_peft_model(model, cfg)
    peft_model.base_model.model.enable_input_require_grads()  # what gradient checkpointing installs
    driver.load_adapter_weights(peft_model, grpo_assets["lora"])
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    engine = flex_rollout.build_engine(peft_model, spec, 64)
    assert engine.config.pristine_on_host is False and engine.lora is not None
    q = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    assert engine.lora.pristine["model.layers.0.self_attn.q_proj"] is q.base_layer.weight
    merged = q.base_layer.weight + 2.0 * q.lora_B["default"].weight @ q.lora_A["default"].weight
    torch.testing.assert_close(engine.lora.live["model.layers.0.self_attn.q_proj"], merged)
    mem = engine.memory()
    assert mem["weights_gb"] == round(engine.lora.nbytes / 1e9, 3) and mem["shared_weights_gb"] > 0
    engine.generate([[1, 2, 3]], Sampling(), 4)
    assert all(torch.equal(p, before[n]) for n, p in peft_model.named_parameters())
    assert any(p.requires_grad for p in peft_model.parameters())  # the trainer's LoRA stays trainable


def test_flex_rollout_replays_the_autotune_record_for_one_rollouts_rows(grpo_assets, tmp_path, monkeypatch):
    """A flex GRPO job replays the tuned entry for the rows one rollout decodes (prompts x completions) into its
    engine options, as a generation job of that batch would, and records it; its own engine options win."""
    import json

    tuned = {"status": "ok", "by_batch": {"4": {"best": {"BLOCK_N": 32}}, "64": {"best": {"BLOCK_N": 64}}}}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(tuned))
    seen = []

    def train(backend, spec, **kw):
        seen.append(spec)
        raise RuntimeError("stop after the spec")

    monkeypatch.setattr(driver, "train", train)
    kw = dict(backend="flex", model="qwen3-tiny", model_dir=grpo_assets["model"], adapter_dir=grpo_assets["lora"],
              dataset_dir=grpo_assets["dataset"], steps=1, out=str(tmp_path / "t.json"), autotune=str(path))
    with pytest.raises(RuntimeError, match="stop after the spec"):
        job.run_job(workload=WORKLOAD, **kw)  # 1 prompt x 4 completions: the 4-row entry
    with pytest.raises(RuntimeError):
        job.run_job(workload={**WORKLOAD, "per_device_train_batch_size": 8}, **kw)  # 8 rows: the next tuned size
    own = {**WORKLOAD, "options": {"engine": {"decode_kernel_options": {"BLOCK_N": 16}, "page_size": 16}}}
    with pytest.raises(RuntimeError):
        job.run_job(workload=own, **kw)
    assert [s.options["engine"]["decode_kernel_options"] for s in seen] == [{"BLOCK_N": 32}, {"BLOCK_N": 64},
                                                                            {"BLOCK_N": 16}]
    assert seen[2].options["engine"]["page_size"] == 16
    from rollout_bench.engine import EngineConfig

    assert EngineConfig.from_options(seen[0].options["engine"]).decode_kernel_options == {"BLOCK_N": 32}
