"""A real warm start of the tiny Qwen3 shape, small enough for 2 CPU cores, against the card's gates."""
import json
import subprocess
import sys

from rollout_bench.assets import learnable, warm_card, warm_eval, warmstart

from .conftest import ROOT

SFT = warmstart.SFTSpec()  # the rule's SFT knobs, as the session's tiny_warm fixture (conftest.py) runs them


def test_tiny_warm_start_meets_the_gates_and_loads_like_any_model_dir(tiny_warm):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    c, out = tiny_warm["card"], tiny_warm["dir"]
    assert c["passed"] and warm_card.read(out) == c
    f = c["figures"]
    assert f["n_prompts"] == 64 and f["eos_rate"] >= 0.95 and f["format_rate"] >= 0.8 and f["group_std_rate"] >= 0.5
    assert 0 <= f["accuracy"] <= 1 and f["length_p10"] <= f["length_p50"] <= f["length_p90"] < 512
    assert c["training"]["steps"] == SFT.steps and c["training"]["train_loss"] > 0
    # the random model fails the same gates: the SFT is what passes them
    random_figs = warm_eval.evaluate(tiny_warm["base"], learnable.split(2000, 64, 11)[1][:8],
                                     warm_eval.EvalSpec(max_new_tokens=24, group_prompts=2, group_size=2))
    assert random_figs["format_rate"] < 0.8
    AutoTokenizer.from_pretrained(out)
    AutoModelForCausalLM.from_pretrained(out)


def test_the_job_fails_with_the_numbers_and_leaves_no_model(tiny_assets, learnable_dir, tmp_path):
    spec = {"sft": {"steps": 1, "learning_rate": 1e-3, "batch_size": 2, "max_length": 200, "seed": 0},
            "eval": {"max_new_tokens": 8, "group_prompts": 2, "group_size": 2},
            "gates": {"eos_rate": 0.95, "format_rate": 0.8, "group_std_rate": 0.5, "accuracy_band": None}}
    out = tmp_path / "warm"
    r = subprocess.run([sys.executable, "-m", "rollout_bench", "assets", "warmstart", "--model", tiny_assets["model"],
                        "--dataset", str(learnable_dir), "--spec", json.dumps(spec), "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "eos_rate = 0.000, needs >= 0.95" in r.stderr and "warmstart.steps" in r.stderr, r.stderr[-2000:]
    assert not out.exists() and not list(tmp_path.glob(".warm.*"))


def test_wall_budget_stops_training_and_the_probe_records_accuracy(tiny_base, learnable_dir, tmp_path):
    """The GPU knobs that run on CPU too: the budget (probes excluded), the accuracy probe, length grouping."""
    from rollout_bench.assets import dataset

    rows = dataset.load(str(learnable_dir)).to_list()
    held = dataset.load(str(learnable_dir), split="test").to_list()
    spec = warmstart.SFTSpec(steps=50, batch_size=4, micro_batch_size=2, max_length=200, group_by_length=True,
                             gradient_checkpointing=True, probe_every=1, probe_prompts=2, max_seconds=1e-6)
    _, _, info = warmstart.train(tiny_base, rows, spec, tmp_path / "t", held)
    assert info["steps_done"] == 1 and info["stopped_by_budget_at_step"] == 1
    (probe,) = info["probe"]
    assert probe["step"] == 1 and 0.0 <= probe["accuracy"] <= 1.0 and info["probe_s"] > 0
    assert info["train_s"] >= 0 and all("loss" in h for h in info["log"])


def test_a_probe_at_the_target_accuracy_stops_training(tiny_base, learnable_dir, tmp_path):
    """stop_at_accuracy lands a learner in the band: training ends at the first probe that reaches it."""
    from rollout_bench.assets import dataset

    rows = dataset.load(str(learnable_dir)).to_list()
    held = dataset.load(str(learnable_dir), split="test").to_list()
    # every accuracy reaches 0.0: the first probe (step 2) stops a 50-step run
    spec = warmstart.SFTSpec(steps=50, batch_size=2, max_length=200, probe_every=2, probe_prompts=2,
                             stop_at_accuracy=0.0)
    _, _, info = warmstart.train(tiny_base, rows, spec, tmp_path / "t", held)
    assert info["steps_done"] == 2 and info["stopped_at_accuracy_step"] == 2
    assert [p["step"] for p in info["probe"]] == [2] and "stopped_by_budget_at_step" not in info


def test_decoding_in_chunks_continues_each_unfinished_row_to_the_same_completion(tiny_warm):
    """The evaluation decodes chunk_tokens at a time, each call batching the rows still going: greedy gives what one
    call gives, and every sample of a group comes back, ended or cut at max_new_tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollout_bench.assets import dataset

    tok = AutoTokenizer.from_pretrained(tiny_warm["dir"])
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(tiny_warm["dir"], dtype=torch.float32).eval()
    prompts = [r["prompt"] for r in dataset.load(str(tiny_warm["dataset"]), split="test").to_list()[:12]]
    whole = warm_eval.EvalSpec(max_new_tokens=48, batch_size=4, chunk_tokens=48)
    chunked = warm_eval.EvalSpec(max_new_tokens=48, batch_size=4, chunk_tokens=16)
    one, parts = (warm_eval._generate(model, tok, prompts, s, 1, sample=False) for s in (whole, chunked))
    assert [c[0] for c in parts] == [c[0] for c in one]
    assert any(c[0].n_tokens > 16 for c in one) and any(not c[0].ended for c in one)  # rows ran past a chunk, and on
    torch.manual_seed(0)
    groups = warm_eval._generate(model, tok, prompts[:3], chunked, 4, sample=True)
    assert [len(g) for g in groups] == [4, 4, 4]
    assert all(c.n_tokens <= 48 and (c.ended or c.n_tokens == 48) for g in groups for c in g)
