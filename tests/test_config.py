import copy
import json
import re

import pytest
import yaml

from rollout_bench.assets import warmstart
from rollout_bench.pipeline import config, jobs
from rollout_bench.pipeline.config import ConfigError

from .conftest import ROOT


@pytest.fixture
def raw():
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    raw["profile"] = "cpu"
    return raw


def resolve_with(raw, **over):
    raw = copy.deepcopy(raw)
    for dotted, value in over.items():
        node = raw
        *path, last = dotted.split("__")
        for k in path:
            node = node.setdefault(k, {})
        node[last] = value
    return config.resolve(raw)


def test_default_resolves_to_cpu_tiny(raw):
    cfg = config.resolve(raw)
    assert cfg["models"] == ["qwen3-tiny", "llama-tiny", "gemma4-tiny"]
    assert cfg["workload"]["ignore_eos"] is True and cfg["lora"]["rank"] == 32
    gen = jobs.gen_jobs(cfg)
    assert gen and all(j.path.startswith("results/generate/") for j in gen)
    assert len({j.path for j in gen}) == len(gen)


def test_gpu_profile_is_the_qwen3_4b_workload(raw):
    cfg = resolve_with(raw, profile="gpu")
    assert cfg["models"] == ["qwen3-4b", "llama-3.2-3b", "gemma-4-e2b"]
    # the other two families run greedy and LoRA at B = 64 and the sweep (Llama the prefill case too); the rest is
    # the 4B's alone
    cases = {}
    for j in jobs.gen_jobs(cfg):
        cases.setdefault(j.model, set()).add(j.case)
    assert cases["llama-3.2-3b"] == {"greedy", "lora", "sweep", "prefill"}  # and the 4B: FA4's shapes
    assert cases["gemma-4-e2b"] == {"greedy", "lora", "sweep"}
    assert cases["qwen3-4b"] == {"greedy", "lora", "sweep", "lora_sweep", "lora_eqv", "grpo_group", "prefill"}
    # the 4B's LoRA sweep: flex against vLLM at every batch the plain sweep runs, with the shared adapter
    lora_sweep = {(j.backend, j.batch_size) for j in jobs.gen_jobs(cfg) if j.case == "lora_sweep"}
    assert lora_sweep == {(b, n) for b in ("flex", "vllm") for n in (8, 16, 32, 128, 256)}
    assert jobs.job_workload(cfg, "qwen3-4b", "vllm", "lora_sweep", 8)["lora_rank"] == 32
    assert cases["qwen3-4b-warm"] == {"realistic", "realistic_t1"} and "gemma-4-e2b-warm" not in jobs.all_models(cfg)
    wl = jobs.job_workload(cfg, "qwen3-4b", "flex", "greedy", 64)
    assert (wl["max_new_tokens"], wl["n_prompts"], wl["prompt_tokens"], wl["device"], wl["dtype"]) == \
        (512, 64, [128, 256], "cuda", "bfloat16")
    group = jobs.job_workload(cfg, "qwen3-4b", "flex", "grpo_group", 256)
    assert group["n_prompts"] == 64 and group["num_generations"] == 4 and group["lora_rank"] == 32
    assert group["sampling"] == {"temperature": 0.1, "top_p": 0.97, "top_k": 5, "min_p": 0.5, "seed": 3407}
    # a case's own variants replace the top-level ones for that case only
    flex = {(j.case, j.variant) for j in jobs.gen_jobs(cfg) if j.backend == "flex"}
    assert {("greedy", "graphs"), ("greedy", "eager"), ("lora", "peft_unmerged"), ("sweep", "graphs")} <= flex
    assert ("sweep", "eager") not in flex and ("lora", "eager") not in flex


def test_auto_profile_follows_gpu_detection(raw, monkeypatch):
    raw["profile"] = "auto"
    monkeypatch.setattr(config.envinfo, "physical_gpu_count", lambda: 0)
    assert config.resolve(raw)["profile"] == "cpu"
    monkeypatch.setattr(config.envinfo, "physical_gpu_count", lambda: 2)
    assert config.resolve(raw)["profile"] == "gpu"


@pytest.mark.parametrize("over, field", [
    ({"backends": ["hf_generate", "warp_drive"]}, "backends[1]"),
    ({"profiles__cpu__workload__cases": {"x": {"batch_sizes": [0]}}}, "workload.cases.x.batch_sizes[0]"),
    ({"profiles__cpu__workload__cases": {"x": {"batch_sizes": [-4]}}}, "workload.cases.x.batch_sizes[0]"),
    ({"profiles__cpu__models": ["no-such-model"]}, "models"),
    ({"profiles__cpu__workload__cases": {"x": {"batch_sizes": [4], "sampling": {"temprature": 0.5}}}},
     "workload.cases.x.sampling"),
    ({"lora__rank": 0}, "lora.rank"),
    ({"lora__rank": -8}, "lora.rank"),
    ({"profiles__cpu__workload__cases": {"x": {"batch_sizes": [6], "num_generations": 4}}},
     "workload.cases.x.batch_sizes"),
    ({"reference_backend": "vllm", "backends": ["hf_generate"]}, "reference_backend"),
    ({"variants": {"hf_generate": ["turbo"]}}, "variants.hf_generate"),
    ({"versus": ["flex", "vlm"]}, "versus[1]"),
    ({"profiles__cpu__workload__cases": {"x": {"batch_sizes": [4], "variants": {"flex": ["warp"]}}}},
     "workload.cases.x.variants.flex"),
    ({"autotune__batch_sizes": [0]}, "autotune.batch_sizes[0]"),
    # was "widen workload.prompt_tokens" from inside every job
    ({"workload__prompt_tokens": [256, 128]}, "workload.prompt_tokens"),
])
def test_bad_input_names_the_field(raw, over, field):
    with pytest.raises(ConfigError) as e:
        resolve_with(raw, **over)
    msg = str(e.value)
    assert msg.startswith(f"config error at {field}:"), msg
    assert "(" in msg  # carries what to do or what is allowed


def test_unknown_sampling_key_message_says_what_to_do(raw):
    with pytest.raises(ConfigError, match="unknown key"):
        resolve_with(raw, profiles__cpu__workload__cases={"x": {"batch_sizes": [4], "sampling": {"tmp": 1}}})


def test_nested_value_given_as_text_points_to_configfile(raw):
    """snakemake --config train='{max_wall_s: 1500}' arrives as {"max_wall_s": "1500"}."""
    with pytest.raises(ConfigError, match=r"config error at train.max_wall_s: .*--configfile"):
        resolve_with(raw, train__max_wall_s="1500")
    assert resolve_with(raw, train__max_wall_s=1500)["train"]["max_wall_s"] == 1500
    assert resolve_with(raw)["train"]["max_wall_s"] is None


def _model_dir(d, files=("config.json", "model.safetensors", "tokenizer.json")):
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_text("{}")
    return d


def test_model_sources(tmp_path):
    from rollout_bench.assets import model

    assert model.resolve("qwen3-4b") == "config"
    assert model.resolve("unsloth/Qwen3-4B-Base") == "hub"
    assert model.resolve(str(_model_dir(tmp_path / "m"))) == "dir"
    with pytest.raises(ValueError, match="no config.json, no weights .*, no tokenizer"):
        model.resolve(str(tmp_path))
    with pytest.raises(ValueError, match=r"no weights \(\*.safetensors or pytorch_model\*.bin\);"):
        model.resolve(str(_model_dir(tmp_path / "no-weights", ("config.json", "tokenizer.json"))))
    with pytest.raises(ValueError, match="no tokenizer"):
        model.resolve(str(_model_dir(tmp_path / "no-tok", ("config.json", "pytorch_model.bin"))))


@pytest.mark.parametrize("path", ["/no/such/model", "./no-such-model", "../no/such-model", "~/no-such-model"])
def test_missing_model_path_is_refused_not_taken_for_a_hub_id(raw, path):
    """It was passed to transformers as a hub id: every job failed with "Repo id must be in the form"."""
    with pytest.raises(ConfigError, match=rf"^config error at models: model '{path}': no such directory"):
        resolve_with(raw, profiles__cpu__models=[path])


def test_model_and_dataset_under_home_are_expanded(raw, tmp_path, monkeypatch):
    from rollout_bench.assets import dataset

    monkeypatch.setenv("HOME", str(tmp_path))
    _model_dir(tmp_path / "m")
    dataset.build(tmp_path / "ds", 4, 0)
    cfg = resolve_with(raw, profiles__cpu__models=["~/m"], dataset__source="~/ds")
    assert cfg["models"] == [str(tmp_path / "m")] and cfg["dataset"]["source"] == str(tmp_path / "ds")


def test_dataset_sources(raw, tmp_path):
    from rollout_bench.assets import dataset

    dataset.build(tmp_path / "ds", 4, 0)
    assert resolve_with(raw, dataset__source=str(tmp_path / "ds"))["dataset"]["source"] == str(tmp_path / "ds")
    assert dataset.resolve("synthetic") == "synthetic"
    assert dataset.resolve("open-r1/DAPO-Math-17k-Processed") == "hub"
    (tmp_path / "other").mkdir()
    (tmp_path / "other/rows.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    with pytest.raises(ValueError, match=r"rows.jsonl lacks column\(s\) \['prompt', 'solution'\]"):
        dataset.resolve(str(tmp_path / "other"))


@pytest.mark.parametrize("make, why", [
    (lambda d: d.mkdir(), "directory holds no data files"),  # was EmptyDatasetError in every job
    (lambda d: None, "no such directory"),
])
def test_unusable_dataset_dir_is_refused(raw, tmp_path, make, why):
    make(tmp_path / "ds")
    with pytest.raises(ConfigError, match=rf"^config error at dataset.source: dataset '.*/ds': {why}"):
        resolve_with(raw, dataset__source=str(tmp_path / "ds"))


def test_user_keys_win_over_the_profile(raw):
    """The cpu profile sets max_new_tokens, models and train.steps; the user's own values must reach the job."""
    user = {"workload": {"max_new_tokens": 7}, "models": ["llama-tiny"], "train": {"steps": 1}}
    cfg = config.resolve(config._deep_merge(raw, user), user)
    assert jobs.job_workload(cfg, "llama-tiny", "hf_generate", "greedy", 4)["max_new_tokens"] == 7
    assert {j.model for j in jobs.gen_jobs(cfg)} == {"llama-tiny", "llama-tiny-warm"}  # the warm case follows
    assert {j.steps for j in jobs.train_jobs(cfg)} == {1}
    # what the user did not set is still the profile's
    assert cfg["workload"]["rounds"] == 2 and cfg["train"]["max_completion_length"] == 96
    assert cfg["train"]["models"] == ["llama-tiny-warm"]  # the profile's warm start follows the user's models
    assert config.resolve(raw)["workload"]["max_new_tokens"] == 32


def test_bad_user_value_is_refused_not_hidden_by_the_profile(raw):
    user = {"workload": {"max_new_tokens": 0}}
    with pytest.raises(ConfigError, match=r"^config error at workload.max_new_tokens: 0 is less than"):
        config.resolve(config._deep_merge(raw, user), user)


def test_user_overrides_follow_snakemakes_order(tmp_path, monkeypatch):
    shipped = ROOT / "config/config.yaml"
    a, b = tmp_path / "a.yaml", tmp_path / "b.json"
    a.write_text("workload: {max_new_tokens: 8, rounds: 1}\nprofiles: {cpu: {models: [llama-tiny]}}\n")
    b.write_text('{"workload": {"max_new_tokens": 9}}')
    user = config.user_overrides([shipped, a, b], {"train": {"steps": 2}, "workload": {"rounds": 4}}, shipped)
    # the shipped file, even passed again, is not the user's: its top level stays under the profile
    assert user == {"workload": {"max_new_tokens": 9, "rounds": 4}, "train": {"steps": 2},
                    "profiles": {"cpu": {"models": ["llama-tiny"]}}}
    assert config.user_overrides([], {}, shipped) == {}
    # by default the shipped file is this checkout's, whatever the working directory (snakemake --directory)
    monkeypatch.chdir(tmp_path)
    assert config.user_overrides([str(shipped)], {}) == {}
    c = tmp_path / "c.json"
    c.write_text('{\n\t"lora": {"rank": 8}\n}')  # tab-indented JSON: Snakemake reads it, so must we
    assert config.user_overrides([str(c)], {}) == {"lora": {"rank": 8}}


def test_profile_names_come_from_the_schema(raw):
    names = config.profile_names()
    assert {"cpu", "gpu"} <= set(names)
    with pytest.raises(ConfigError, match=rf"^config error at profile: 'tpu' \(allowed: auto, {', '.join(names)}\)"):
        resolve_with(raw, profile="tpu")
    with pytest.raises(ConfigError, match=r"^config error at profiles: .*'cpuu' was unexpected"):
        resolve_with(raw, profiles__cpuu={"models": ["qwen3-tiny"]})


def test_autotune_needs_tokens_to_time(raw):
    bad = {**raw, "profile": "smoke", "workload": {**raw["workload"], "max_new_tokens": 16}}
    with pytest.raises(config.ConfigError, match="workload.max_new_tokens: 16 leaves nothing to time"):
        config.resolve(bad, {"workload": {"max_new_tokens": 16}})
    config.resolve({**raw, "profile": "cpu"}, {"workload": {"max_new_tokens": 16}})  # no autotune on CPU


def test_decode_profile_is_one_job_per_flex_model_and_needs_tokens_to_time(raw):
    cfg = config.resolve({**raw, "profile": "cpu"})
    assert jobs.decode_profile_paths(cfg) == []  # off unless asked for
    cfg = config.resolve({**raw, "profile": "cpu"}, {"decode_profile": {"enabled": True}})
    # the warm starts' flex jobs replay their random bases' options: one profile per base
    assert jobs.decode_profile_paths(cfg) == [f"results/decode_profile/{m}/decode_step.json"
                                              for m in ("qwen3-tiny", "llama-tiny", "gemma4-tiny")]
    assert jobs.decode_profile_paths(config.resolve({**raw, "profile": "cpu"}, {
        "decode_profile": {"enabled": True}, "backends": ["hf_generate"]})) == []
    with pytest.raises(config.ConfigError, match="max_new_tokens: 16 leaves nothing to time for the decode profile "
                                                 ".* or set decode_profile.enabled false"):
        config.resolve({**raw, "profile": "cpu"}, {"decode_profile": {"enabled": True},
                                                   "workload": {"max_new_tokens": 16}})


def test_cpu_profile_trains_the_warm_tiny_models_on_the_learnable_task(raw):
    cfg = config.resolve(raw)
    assert cfg["train"]["warm"] and cfg["train"]["dataset"] == "learnable"
    assert cfg["train"]["models"] == ["qwen3-tiny-warm", "llama-tiny-warm"]
    assert {j.model for j in jobs.train_jobs(cfg)} == {"qwen3-tiny-warm", "llama-tiny-warm"}
    # generation stays random but for the case with EOS on; gemma4-tiny has no warm start (warmstart.only)
    gen = jobs.gen_jobs(cfg)
    assert {j.model for j in gen if j.case != "realistic"} == {"qwen3-tiny", "llama-tiny", "gemma4-tiny"}
    assert {j.model for j in gen if j.case == "realistic"} == {"qwen3-tiny-warm", "llama-tiny-warm"}
    assert {(j.backend, j.variant, j.case) for j in gen if j.model == "gemma4-tiny"} >= {
        ("flex", "eager", "greedy"), ("flex", "eager", "lora"), ("transformers_cb", "paged_sdpa", "greedy")}
    wl = jobs.train_workload(cfg, "qwen3-tiny-warm", "hf_generate", 3408)
    assert wl["dataset"] == "learnable" and wl["dtype"] == "float32" and wl["sampling"]["temperature"] == 1.0
    # a few steps of the learn case: 2 prompts x 4 completions; the seed seeds the trainer and the sampler alike
    assert wl["per_device_train_batch_size"] == 8 and wl["seed"] == wl["sampling"]["seed"] == 3408
    assert (wl["is_mode"], wl["is_clip_min"], wl["is_clip_max"]) == ("token_truncate", None, 3.0)
    assert all(p.startswith("results/compare/qwen3-tiny-warm/") or p.startswith("results/compare/llama-tiny-warm/")
               for p in jobs.compare_paths(cfg))
    spec = jobs.warmstart_spec(cfg, "qwen3-tiny")
    assert spec["gates"]["accuracy_band"] is None and spec["gates"]["eos_rate"] == 0.95  # not gated on CPU
    assert spec["sft"]["steps"] > 0 and spec["eval"]["group_size"] == 8
    # the schema's defaults and SFTSpec's are one set of knobs: the tests' tiny warm start (SFTSpec()) is the rule's
    assert warmstart.SFTSpec(**spec["sft"]) == warmstart.SFTSpec()


def test_smoke_profile_trains_a_tiny_model_vllm_takes_in_bf16(raw):
    cfg = resolve_with(raw, profile="smoke")
    # GRPO's colocated vLLM refuses qwen3-tiny's head_dim 16; the learner's shape is head_dim 64 in bf16
    assert not cfg["train"]["warm"] and cfg["train"]["models"] == ["qwen3-tiny-hd64"] and cfg["train"]["dataset"] == "synthetic"
    model_cfg = json.loads((ROOT / "config/models/qwen3-tiny-hd64.json").read_text())
    assert model_cfg["head_dim"] == 64 and model_cfg["torch_dtype"] == "bfloat16"
    assert jobs.train_workload(cfg, "qwen3-tiny-hd64", "vllm", 3407)["dtype"] == "bfloat16"
    # vLLM's max_model_len is the longest prompt plus this: at 16 or 64 new tokens FlashAttention-3 crashed at start-up
    assert jobs.train_workload(cfg, "qwen3-tiny-hd64", "vllm", 3407)["max_new_tokens"] == 512
    assert jobs.train_workload(cfg, "qwen3-tiny-hd64", "flex", 3407)["dataset"] == "synthetic"
    assert any(j.frozen for j in jobs.train_jobs(cfg))  # the control's path runs too
    # its tiny warm start (the realistic case's) cannot do sums: its accuracy is recorded, not gated
    assert jobs.warmstart_spec(cfg, "qwen3-tiny")["gates"]["accuracy_band"] is None


def test_gpu_profile_runs_the_learn_case_on_the_warm_start(raw):
    cfg = resolve_with(raw, profile="gpu")
    # the learner is qwen3-small's warm start, its accuracy gated; the 4B's (the speed model's) is recorded, and so is
    # the 0.6B's, now a config switch
    learner, speed = jobs.warmstart_spec(cfg, "qwen3-small"), jobs.warmstart_spec(cfg, "qwen3-4b")
    assert jobs.warmstart_spec(cfg, "qwen3-0.6b")["gates"]["accuracy_band"] is None
    assert learner["gates"]["accuracy_band"] == [0.15, 0.70] and speed["gates"]["accuracy_band"] is None
    assert learner["sft"]["stop_at_accuracy"] == 0.4 and learner["sft"]["probe_every"] > 0
    assert speed["sft"]["stop_at_accuracy"] is None and speed["sft"]["max_seconds"] <= 360  # the 6 minutes
    assert learner["sft"]["batch_size"] == speed["sft"]["batch_size"] == 16  # warmstart's, not overridden
    assert not learner["sft"]["gradient_checkpointing"] and speed["sft"]["gradient_checkpointing"]
    tr = cfg["train"]
    assert tr["models"] == ["qwen3-small-warm"] and tr["dataset"] == "learnable" and tr["max_wall_s"]
    # the learner's worked solutions slip (GRPO's room to sharpen); the CPU tiny models', which cannot do sums, do not
    assert cfg["warmstart"]["slip_rate"] == 0.3 and resolve_with(raw)["warmstart"]["slip_rate"] == 0.0
    assert "qwen3-4b-warm" in jobs.all_models(cfg) and "qwen3-small-warm" in jobs.all_models(cfg)
    wl = jobs.train_workload(cfg, "qwen3-small-warm", "vllm", 3407)
    assert wl["sampling"] == {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "seed": 3407}
    assert (wl["num_generations"], wl["per_device_train_batch_size"]) == (8, 64) and wl["dtype"] == "bfloat16"
    runs = jobs.train_jobs(cfg)
    assert sorted(j.seed for j in runs if j.backend == "hf_generate" and not j.frozen) == [3407, 3408, 3409]
    assert {j.seed for j in runs if j.backend != "hf_generate"} == {3407}
    # the reference's frozen control: learning rate 0, same prompts (every run's prompt order is train.data_seed's)
    frozen = [j for j in runs if j.frozen]
    assert [(j.backend, j.seed) for j in frozen] == [("hf_generate", 3407)]
    assert frozen[0].path == "results/train/qwen3-small-warm/hf_generate/steps100-seed3407-frozen.json"
    assert jobs.parse_seed("3407-frozen") == (3407, True) and jobs.parse_seed("3408") == (3408, False)
    assert jobs.control_paths(cfg, "qwen3-small-warm") == [frozen[0].path]
    ctrl = jobs.train_workload(cfg, "qwen3-small-warm", "hf_generate", 3407, frozen=True)
    ref = jobs.train_workload(cfg, "qwen3-small-warm", "hf_generate", 3407)
    assert (ctrl["learning_rate"], ctrl["frozen"], ref["learning_rate"], ref["frozen"]) == (0.0, True, 1e-3, False)
    assert ctrl["data_seed"] == ref["data_seed"] == wl["data_seed"] == 3407
    assert jobs.train_workload(cfg, "qwen3-small-warm", "hf_generate", 3409)["data_seed"] == 3407
    assert jobs.control_paths(resolve_with(raw, profile="gpu", profiles__gpu__train__frozen_control=False),
                              "qwen3-small-warm") == []
    assert jobs.band_paths(cfg) == ["results/band/qwen3-small-warm/hf_generate.json"]
    # the learner is a key of its own: the gpu profile can train another model than it generates with
    other = resolve_with(raw, profile="gpu", profiles__gpu__train__models=["llama-3.2-3b-warm"])
    assert other["train"]["models"] == ["llama-3.2-3b-warm"] and "llama-3.2-3b-warm" not in other["models"]
    assert jobs.train_jobs(other)[0].path == "results/train/llama-3.2-3b-warm/hf_generate/steps100-seed3407.json"


@pytest.mark.parametrize("over,says", [
    ({"train__seeds": [1, 1]}, "config error at train.seeds: [1, 1] repeats a seed"),
    ({"train__seeds": []}, "config error at train.seeds: [] should be non-empty"),
    ({"train__importance_sampling": {"clip_min": 3.0, "clip_max": 2.0}},
     "config error at train.importance_sampling.clip_min: 3.0 is not below clip_max 2.0"),
    ({"train__importance_sampling": {"clip_max": None}},
     "config error at train.importance_sampling.clip_max: mode token_truncate needs a bound"),
    ({"train__importance_sampling": {"mode": "token"}}, "config error at train.importance_sampling.mode:"),
    ({"train__band": {"alpha": 1.5}}, "config error at train.band.alpha:"),
    ({"train__models": ["./no/such/model"]}, "config error at train.models: model './no/such/model': no such"),
])
def test_bad_learn_case_keys_name_the_field(raw, over, says):
    with pytest.raises(ConfigError) as e:
        resolve_with(raw, **over)
    assert str(e.value).startswith(says), str(e.value)


def test_warmstart_only_keeps_other_models_cold(raw):
    cfg = resolve_with(raw, profiles__cpu__models=["gemma4-tiny", "llama-tiny"])
    assert cfg["train"]["models"] == ["llama-tiny-warm"]
    assert {j.model for j in jobs.gen_jobs(cfg)} == {"gemma4-tiny", "llama-tiny", "llama-tiny-warm"}
    cfg = resolve_with(raw, profiles__cpu__models=["gemma4-tiny"])
    assert cfg["train"]["models"] == [] and jobs.train_jobs(cfg) == [] and jobs.band_paths(cfg) == []
    assert {j.case for j in jobs.gen_jobs(cfg)} == {"greedy", "lora", "grpo_group"}
    cfg = resolve_with(raw, profiles__cpu__warmstart__only=None)
    assert cfg["train"]["models"] == ["qwen3-tiny-warm", "llama-tiny-warm", "gemma4-tiny-warm"]
    # named explicitly, a learner is trained whatever `only` says
    cfg = resolve_with(raw, profiles__cpu__train__models=["gemma4-tiny-warm"])
    assert cfg["train"]["models"] == ["gemma4-tiny-warm"]


def test_warm_model_names(raw):
    from rollout_bench.assets import model as model_assets

    assert model_assets.resolve("qwen3-4b-warm") == "warm" and model_assets.warm_base("qwen3-4b-warm") == "qwen3-4b"
    assert model_assets.warm_base("qwen3-4b") is None and model_assets.warm_base("nope-warm") is None
    assert jobs.workload_dtype(resolve_with(raw, profile="gpu"), "qwen3-4b-warm") == "bfloat16"
    cfg = resolve_with(raw, profiles__cpu__models=["qwen3-tiny-warm", "llama-tiny"])
    assert [j.model for j in jobs.gen_jobs(cfg)][:1] == ["qwen3-tiny-warm"]
    assert cfg["train"]["models"] == ["qwen3-tiny-warm", "llama-tiny-warm"]  # already warm: as it is


@pytest.mark.parametrize("over,field,says", [
    ({"profiles__cpu__models": ["qwen3-tiny-cold"]}, "models", "<name>-warm"),
    ({"profiles__cpu__train__warm": "yes"}, "train.warm", "boolean"),
    ({"profiles__cpu__train__dataset": "./no/such/dir"}, "train.dataset", "no such directory"),
    ({"warmstart__gates__eos_rate": 1.5}, "warmstart.gates.eos_rate", "eos"),
    ({"warmstart__n_test": 100}, "warmstart.n_test", "minimum of 256"),
    ({"warmstart__gates__accuracy_band": [0.2]}, "warmstart.gates.accuracy_band", "lo, hi"),
    ({"warmstart__stepz": 3}, "warmstart", "unknown key"),
    ({"warmstart__models": {"qwen3-huge": {"steps": 3}}}, "warmstart.models.qwen3-huge", "not a name in config/models"),
    ({"profiles__cpu__warmstart__only": ["qwen3-huge"]}, "warmstart.only", "not a name in config/models"),
    ({"warmstart__models": {"qwen3-tiny": {"stepz": 3}}}, "warmstart.models.qwen3-tiny", "unknown key"),
    ({"warmstart__models": {"qwen3-tiny": {"stop_at_accuracy": 1.5}}}, "warmstart.models.qwen3-tiny.stop_at_accuracy",
     "maximum of 1"),
    ({"warmstart__stop_at_accuracy": 0.4}, "warmstart.stop_at_accuracy", "set warmstart.probe_every"),
    ({"warmstart__models": {"qwen3-tiny": {"stop_at_accuracy": 0.4}}}, "warmstart.models.qwen3-tiny.stop_at_accuracy",
     "probe_every"),
])
def test_bad_warm_start_keys_name_the_field(raw, over, field, says):
    with pytest.raises(ConfigError, match=rf"at {re.escape(field)}[: ].*{re.escape(says)}"):
        resolve_with(raw, **over)


@pytest.mark.parametrize("profile", ["gpu", "smoke", "cpu"])
def test_realistic_case_runs_the_warm_start_with_eos_on_its_own_task(raw, profile):
    cfg = resolve_with(raw, profile=profile)
    real = [j for j in jobs.gen_jobs(cfg) if j.case == "realistic"]
    warm = {"gpu": "qwen3-4b-warm", "smoke": "qwen3-tiny-warm", "cpu": "qwen3-tiny-warm"}[profile]
    assert warm in {j.model for j in real} == set(jobs.case_models(cfg, cfg["workload"]["cases"]["realistic"]))
    assert {j.model for j in jobs.gen_jobs(cfg) if j.case == "greedy"} == set(cfg["models"])  # others: as before
    wl = jobs.job_workload(cfg, warm, real[0].backend, "realistic", real[0].batch_size)
    assert wl["ignore_eos"] is False and wl["dataset"] == "learnable" and wl["prompt_tokens"] == [16, 512]
    greedy = jobs.job_workload(cfg, cfg["models"][0], "hf_generate", "greedy", real[0].batch_size)
    assert greedy["ignore_eos"] is True and greedy["dataset"] == "synthetic"
    assert warm in jobs.all_models(cfg) and warm.removesuffix("-warm") in jobs.all_models(cfg)
    # flex on the warm start replays its random base's kernel options
    assert jobs.autotune_slug(warm) == warm.removesuffix("-warm") and jobs.autotune_slug("x/y") == "x--y"


@pytest.mark.parametrize("case, field, says", [
    ({"warm": "yes"}, "workload.cases.x.warm", "boolean"),
    ({"dataset": "./no/such/dir"}, "workload.cases.x.dataset", "no such directory"),
    ({"prompt_tokens": [300, 20]}, "workload.cases.x.prompt_tokens", "[20, 300]"),
    ({"ignore_eos": "no"}, "workload.cases.x.ignore_eos", "boolean"),
    ({"skip_models": "llama-tiny"}, "workload.cases.x.skip_models", "array"),
])
def test_bad_case_overrides_name_the_field(raw, case, field, says):
    with pytest.raises(ConfigError, match=rf"at {re.escape(field)}[: ].*{re.escape(says)}"):
        resolve_with(raw, profiles__cpu__workload__cases={"x": {"batch_sizes": [4], **case}})


def test_a_case_skips_its_skip_models_only(raw):
    cases = {"cold": {"batch_sizes": [4], "skip_models": ["qwen3-tiny", "gemma4-tiny"]},
             "warm": {"batch_sizes": [4], "warm": True, "skip_models": ["qwen3-tiny"]},
             "all": {"batch_sizes": [4]}}
    cfg = resolve_with(raw, profiles__cpu__workload__cases=cases)
    by_case = {}
    for j in jobs.gen_jobs(cfg):
        by_case.setdefault(j.case, set()).add(j.model)
    assert by_case["cold"] == {"llama-tiny"} and by_case["warm"] == {"llama-tiny-warm"}
    assert by_case["all"] == set(cfg["models"])
    # GRPO's learners are train.models' business, not a case's
    assert cfg["train"]["models"] == ["qwen3-tiny-warm", "llama-tiny-warm"]
    # a list of what to leave out: the user's own models run every case of the gpu profile
    mine = config.resolve({**raw, "profile": "gpu"}, {"models": ["qwen3-0.6b"]})
    assert {(j.model, j.case) for j in jobs.gen_jobs(mine)} == \
        {("qwen3-0.6b-warm" if c["warm"] else "qwen3-0.6b", n) for n, c in mine["workload"]["cases"].items()}


def test_grpo_speed_configfile_is_the_4b_step_time_pair(raw):
    """config/grpo_speed.yaml over the gpu profile: the 4B on random weights, 1 prompt x 4 completions x 512
    tokens, 30 steps, one seed and no control; the warm learner's own settings do not leak in."""
    user = yaml.safe_load((ROOT / "config/grpo_speed.yaml").read_text())
    cfg = config.resolve({**copy.deepcopy(raw), "profile": "gpu"}, user)
    tr = cfg["train"]
    assert (tr["models"], tr["steps"], tr["seeds"], tr["frozen_control"], tr["warm"]) == \
        (["qwen3-4b"], 30, [3407], False, False)
    wl = jobs.train_workload(cfg, "qwen3-4b", "flex", 3407)
    assert (wl["prompts_per_step"], wl["num_generations"], wl["max_new_tokens"], wl["per_device_train_batch_size"]) \
        == (1, 4, 512, 4)
    assert wl["dataset"] != "learnable" and wl["learning_rate"] == 5.0e-6
    paths = {j.path for j in jobs.train_jobs(cfg)}
    assert {f"results/train/qwen3-4b/{b}/steps30-seed3407.json" for b in ("flex", "vllm")} <= paths


def test_the_headline_profile_is_one_job_an_engine_and_no_prompt_twice(raw):
    cfg = config.resolve({**raw, "profile": "headline"})
    groups = {g.key: g for g in jobs.gen_groups(cfg)}
    assert set(groups) == {f"qwen3-4b/{b}/{lora}" for b in ("flex/graphs", "vllm/default") for lora in ("base", "lora")}
    base = groups["qwen3-4b/flex/graphs/base"]
    assert [(c.case, c.batch_size) for c in base.cells] == [("greedy", 1), ("greedy", 8), ("greedy", 64),
                                                           ("greedy", 256), ("rollout", 256)]
    # every cell's prompts start after the ones before it, the same offsets for both backends
    spans = []
    for c in base.cells:
        wl = {b: jobs.job_workload(cfg, c.model, b, c.case, c.batch_size) for b in ("flex", "vllm")}
        assert wl["flex"]["prompt_offset"] == wl["vllm"]["prompt_offset"]
        spans.append((wl["flex"]["prompt_offset"], jobs.prompts_needed(cfg, c.case, c.batch_size)[2]))
    assert all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:])) and spans[0][0] == 0
    assert sum(spans[-1]) <= cfg["dataset"]["n_problems"] * 0.95  # the synthetic set keeps ~99% in the window
    rollout = jobs.job_workload(cfg, "qwen3-4b", "vllm", "rollout", 256)
    assert rollout["n_prompts"] == 64 and rollout["num_generations"] == 8 and rollout["trace"]["name"]
    assert rollout["max_new_tokens"] == 382 and rollout["ignore_eos"] and rollout["max_round_spread"] == 0.05
    assert jobs.compare_paths(cfg) == [] and jobs.band_paths(cfg) == []  # step time only
    assert {j.backend for j in jobs.train_jobs(cfg)} == {"flex", "vllm"}


def test_a_trace_case_must_ignore_eos_and_an_unknown_options_backend_is_refused(raw):
    with pytest.raises(ConfigError, match=r"workload\.cases\.t\.ignore_eos: a trace case"):
        resolve_with(raw, profiles__cpu__workload__cases={"t": {"batch_sizes": [4], "trace": "qwen3-4b-warm-t1",
                                                                "ignore_eos": False}})
    with pytest.raises(ConfigError, match=r"workload\.cases\.t\.trace: no trace 'nope'"):
        resolve_with(raw, profiles__cpu__workload__cases={"t": {"batch_sizes": [4], "trace": "nope"}})
    with pytest.raises(ConfigError, match=r"options\.flexx: unknown backend \(allowed: hf_generate"):
        resolve_with(raw, options={"flexx": {"a": 1}})


def test_the_prefill_case_is_a_job_of_its_own_with_long_prompts(raw):
    """gpu: the prefill-heavy case (2k-8k-token prompts, 64 greedy tokens, B = 8 and 64) on flex, vLLM and
    transformers_cb, in jobs of their own, so that no other case's engine is sized for 8k-token rows; its prompts are
    a pool of their own (no offset after the short cases'). The other cases' jobs and workloads are as before."""
    cfg = config.resolve({**raw, "profile": "gpu"})
    groups = {g.key: g for g in jobs.gen_groups(cfg)}
    own = {k: g for k, g in groups.items() if g.own_case}
    assert set(own) == {f"{m}/{b}/base-prefill" for m in ("qwen3-4b", "llama-3.2-3b")
                        for b in ("flex/graphs", "flex/fa4", "vllm/default", "transformers_cb/paged_sdpa",
                                  "transformers_cb/paged_flash_attention_4")}
    g = own["qwen3-4b/flex/graphs/base-prefill"]
    assert g.record == "results/generate/qwen3-4b/flex/graphs/job-base-prefill.json"
    assert [(c.case, c.batch_size) for c in g.cells] == [("prefill", 8), ("prefill", 64)]
    assert all(c.case != "prefill" for k, g in groups.items() if k not in own for c in g.cells)
    for v in ("paged_sdpa", "paged_flash_attention_4"):  # backend_batch_sizes: its B = 64 rounds took 148 s each
        assert [c.batch_size for c in own[f"qwen3-4b/transformers_cb/{v}/base-prefill"].cells] == [8]
    wl = jobs.job_workload(cfg, "qwen3-4b", "vllm", "prefill", 64)
    assert wl["long_prompts"] and wl["prompt_tokens"] == [2048, 8192] and wl["max_new_tokens"] == 64
    assert wl["prefill_rate"]  # its cells alone make the prefill-only call (generation/prefill.py)
    assert wl["ignore_eos"] and wl["sampling_preset"] == "greedy" and wl["prompt_offset"] == 8 * 5 + 8
    for case in {j.case for j in jobs.gen_jobs(cfg)} - {"prefill"}:  # the other cases' workloads as before
        j = next(j for j in jobs.gen_jobs(cfg) if j.case == case)
        assert not {"long_prompts", "prefill_rate"} & set(jobs.job_workload(cfg, j.model, j.backend, case,
                                                                            j.batch_size)), case


@pytest.mark.parametrize("profile", ["smoke", "headline", "cpu"])
def test_no_routinely_run_profile_has_a_prefill_case(raw, profile):
    """Until a device run has checked the prefill case's code, the smoke, headline and cpu (default) profiles ask
    for none of it: no own job, no long prompts, no prefill-only call (their job lists are as before the case)."""
    cfg = config.resolve({**raw, "profile": profile})
    assert not any(g.own_case for g in jobs.gen_groups(cfg))
    for name, case in cfg["workload"]["cases"].items():
        assert not (case.get("long_prompts") or case.get("own_job") or case.get("prefill_rate")), (profile, name)


def test_the_prefill_profile_is_the_prefill_case_alone_with_fa4_beside_each_engines_own(raw):
    """profile=prefill (issue 50): the 4B's prefill case, one job an engine: flex with FA4 and with its Triton
    prefill, vLLM, transformers_cb with FA4 and with SDPA; no other case, GRPO or autotune pass."""
    cfg = config.resolve({**raw, "profile": "prefill"})
    assert list(cfg["workload"]["cases"]) == ["prefill"] and not cfg["train_backends"]
    assert not cfg["autotune"]["enabled"]
    assert {g.key for g in jobs.gen_groups(cfg)} == {
        f"qwen3-4b/{b}/base-prefill" for b in ("flex/graphs", "flex/fa4", "vllm/default", "transformers_cb/paged_sdpa",
                                               "transformers_cb/paged_flash_attention_4")}
    gpu = config.resolve({**raw, "profile": "gpu"})
    assert cfg["workload"]["cases"]["prefill"] == gpu["workload"]["cases"]["prefill"]  # one case, two profiles
    # its first run's B = 8 rounds spread 25-35%: a cell above 5% is measured again, once
    assert (cfg["workload"]["max_round_spread"], cfg["workload"]["spread_retries"]) == (0.05, 1)


def test_a_cases_backend_batch_sizes_are_a_subset_of_its_own(raw):
    """backend_batch_sizes: a backend runs the case at those batch sizes only, the others at all of them; a backend
    the case does not run, or a batch size the case has not, is an error naming the field."""
    case = {"lora": False, "batch_sizes": [2, 4], "backends": ["flex", "hf_generate"]}
    cfg = resolve_with(raw, profiles__cpu__workload__cases={"c": {**case, "backend_batch_sizes": {"hf_generate": [4]}}})
    sizes = {(j.backend, j.batch_size) for j in jobs.gen_jobs(cfg) if j.model == cfg["models"][0]}
    assert sizes == {("flex", 2), ("flex", 4), ("hf_generate", 4)}
    # in the case's order, whatever the entry's (one job's cells keep the config's order for every backend)
    assert jobs.case_batch_sizes({**case, "backend_batch_sizes": {"flex": [4, 2]}}, "flex") == [2, 4]
    for bad, why in [({"vllm": [4]}, r"'vllm' is not a backend this case runs \(flex, hf_generate\)"),
                     ({"hf_generate": [8]}, r"\[8\] not in the case's batch_sizes \[2, 4\]")]:
        with pytest.raises(ConfigError, match=r"^config error at workload.cases.c.backend_batch_sizes\.\w+: " + why):
            resolve_with(raw, profiles__cpu__workload__cases={"c": {**case, "backend_batch_sizes": bad}})


def test_sites_put_a_groups_directory_first_on_its_jobs_path(raw, tmp_path):
    """A host without conda keeps conflicting groups apart: `sites` names a directory per group, which goes first
    on PYTHONPATH for that group's jobs only; a group it does not name runs in the workflow's environment."""
    site = tmp_path / "site fa4"
    site.mkdir()
    cfg = resolve_with(raw, sites={"fa4": str(site)})
    assert config.site_prefix(cfg, "fa4") == f"export PYTHONPATH='{site}':$PYTHONPATH; "
    assert config.site_prefix(cfg, "core") == "" and config.site_prefix(resolve_with(raw), "fa4") == ""
    # what the site holds is part of its jobs' probe: an install there reruns their `skipped` results
    assert config.site_packages(cfg, "fa4") == "" and config.site_packages(cfg, "core") == ""
    for name in ("nvidia_cutlass_dsl-4.8.1.dist-info", "flash_attn_4-4.0.0b36.dist-info"):
        (site / name).mkdir()
    assert config.site_packages(cfg, "fa4") == "flash_attn_4-4.0.0b36,nvidia_cutlass_dsl-4.8.1"
    with pytest.raises(ConfigError, match=r"^config error at sites\.fa4: .* is not a directory; install the group "
                                          r"there \(pip install --target"):
        resolve_with(raw, sites={"fa4": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match=r"^config error at sites\.fa5: not an environment group \(envs/GROUP"):
        resolve_with(raw, sites={"fa5": str(site)})
