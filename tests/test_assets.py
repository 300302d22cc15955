import json

import pytest
import torch
import yaml

from rollout_bench.assets import chat, dataset, lora, prompts, tokenizer
from rollout_bench.pipeline import config, jobs

from .conftest import ROOT


def test_dataset_is_deterministic_dapo_schema_with_integer_answers(tmp_path):
    a, b = dataset.generate(2000, 3407), dataset.generate(2000, 3407)
    assert a == b and a != dataset.generate(2000, 1)
    assert len(a) >= 2000 and all(int(r["solution"]) == float(r["solution"]) for r in a)
    dataset.build(tmp_path / "ds", 50, 3407)
    ds = dataset.load(str(tmp_path / "ds"))
    assert ds.num_rows == 50 and {"prompt", "solution"} <= set(ds.column_names)


def test_dataset_load_rejects_wrong_schema(tmp_path):
    import pandas as pd

    (tmp_path / "bad").mkdir()
    pd.DataFrame({"question": ["1+1"]}).to_parquet(tmp_path / "bad" / "train.parquet")
    with pytest.raises(ValueError, match="'prompt'"):
        dataset.load(str(tmp_path / "bad"))


def test_tokenizer_carries_grpo_template_and_markers(tiny_assets):
    tok = prompts.load_tokenizer(tiny_assets["model"])
    text = tok.apply_chat_template(chat.messages("What is 2+3?"), add_generation_prompt=True, tokenize=False)
    assert text.startswith(chat.SYSTEM_PROMPT + tok.eos_token) and text.endswith(chat.REASONING_START)
    for m in chat.MARKERS:
        assert len(tok.encode(m, add_special_tokens=False)) == 1
    ids = tok.encode("Answer: 42", add_special_tokens=False)
    assert tok.decode(ids) == "Answer: 42"
    assert prompts.decode(tok, ids + [10**6]) == "Answer: 42"  # out-of-vocab ids of random models dropped


def test_prompt_selection_window_and_determinism(tiny_assets):
    tok = prompts.load_tokenizer(tiny_assets["model"])
    wl = {"prompt_tokens": [128, 256], "n_prompts": 8, "rounds": 3, "shuffle_seed": 3407, "warmup_prompts": 2}
    r1, w1 = prompts.select(tok, wl, tiny_assets["dataset"])
    r2, w2 = prompts.select(tok, wl, tiny_assets["dataset"])
    assert (r1, w1) == (r2, w2) and [len(r) for r in r1] == [8, 8, 8] and len(w1) == 2
    sent = [tuple(p) for p in sum(r1, w1)]
    assert len(set(sent)) == len(sent) == 26  # no round repeats another's prompts, nor the warm-up's
    assert all(128 <= len(p) <= 256 for p in sent)
    one, _ = prompts.select(tok, {**wl, "rounds": 1, "warmup_prompts": 0}, tiny_assets["dataset"])
    assert one == r1[:1]  # the first round is the first n_prompts in the window, as the single measured set was
    with pytest.raises(ValueError, match="widen prompt_tokens") as e:
        prompts.select(tok, {**wl, "prompt_tokens": [5000, 6000], "case": "sweep", "batch_size": 8,
                             "dataset": "synthetic"}, tiny_assets["dataset"])
    msg = str(e.value)
    assert "case 'sweep' at batch size 8 sends 26 distinct prompts" in msg and "workload.rounds=3" in msg
    assert "dataset 'synthetic'" in msg and "dataset.n_problems" in msg
    # a later cell of the same engine starts after the earlier one's prompts; sets of rounds each their own
    later, warm = prompts.select(tok, {**wl, "prompt_offset": 26, "rounds": 2}, tiny_assets["dataset"], sets=2)
    assert len(later) == 2 and [len(r) for r in later[1]] == [8, 8] and len(warm) == 2
    fresh = [tuple(p) for p in sum(sum(later, []), warm)]
    assert len(set(fresh)) == len(fresh) == 34 and not set(fresh) & set(sent)
    whole, _ = prompts.select(tok, {**wl, "rounds": 1, "n_prompts": 60, "warmup_prompts": 0}, tiny_assets["dataset"])
    assert [tuple(p) for p in whole[0][26:34]] == [tuple(p) for p in later[0][0]]


def test_long_prompts_reach_their_window_and_open_apart(tiny_assets):
    """The prefill case's prompts: built from the dataset's rows to lengths drawn from the window, deterministic,
    none sent twice, and no two sharing a prefix beyond the template and the dataset's instruction (a prefix cache
    must not make one prompt's prefill free for another)."""
    from rollout_bench.assets import chat
    from rollout_bench.assets import dataset as dataset_assets

    tok = prompts.load_tokenizer(tiny_assets["model"])
    wl = {"prompt_tokens": [1024, 3072], "n_prompts": 6, "rounds": 2, "shuffle_seed": 3407, "warmup_prompts": 2,
          "long_prompts": True}
    rounds, warm = prompts.select(tok, wl, tiny_assets["dataset"])
    assert (rounds, warm) == prompts.select(tok, wl, tiny_assets["dataset"])
    sent = sum(rounds, warm)
    assert len(sent) == 14 and all(1024 <= len(p) <= 3072 for p in sent)
    assert max(map(len, sent)) - min(map(len, sent)) > 500  # lengths drawn over the window, not one length

    def common(a, b):
        return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    shared = len(prompts.encode(tok, dataset_assets.INSTRUCTION))  # the template's and instruction's tokens
    assert max(common(a, b) for i, a in enumerate(sent) for b in sent[i + 1:]) < shared + 16
    text = prompts.decode(tok, sent[0])
    assert text.count("Answer: ") >= 5 and chat.SYSTEM_PROMPT in text  # worked examples, then a question
    later, _ = prompts.select(tok, {**wl, "prompt_offset": 14, "rounds": 1}, tiny_assets["dataset"])
    assert not {tuple(p) for p in later[0]} & {tuple(p) for p in sent}  # a later cell's are its own
    with pytest.raises(ValueError, match="widen it"):  # narrower than one worked example
        prompts.select(tok, {**wl, "prompt_tokens": [1500, 1501]}, tiny_assets["dataset"])


def test_long_prompt_rounds_of_a_multiple_of_eight_hold_as_many_prompt_tokens(tiny_assets):
    """Every round of the prefill case sends prompts of its own; their target lengths take each eighth of the window
    once in any 8 prompts in a row, so rounds of 8 (or 16) prompts, from any offset, span the window and hold about
    as many prompt tokens each: a round's wall measures the engine, not its draw of lengths (drawn anew for each
    prompt, the B = 8 rounds of h200-2026-12-07-prefill held 29k-49k tokens). A config whose long-prompt rounds are
    not a multiple of 8 prompts is refused."""
    from rollout_bench.assets import long_prompts

    tok = prompts.load_tokenizer(tiny_assets["model"])
    wl = {"prompt_tokens": [1024, 3072], "shuffle_seed": 3407, "warmup_prompts": 0, "long_prompts": True}
    pool = prompts._pool(tok, tiny_assets["dataset"], 3407, 1024, 3072, long=True)
    eighth = (3072 - 1024 + 1) / 8
    assert sorted(int((pool.target(i) - 1024) // eighth) for i in range(5, 13)) == list(range(8))
    for n, offset in ((8, 3), (16, 5)):
        rounds, _ = prompts.select(tok, {**wl, "n_prompts": n, "rounds": 3, "prompt_offset": offset},
                                   tiny_assets["dataset"])
        totals = [sum(map(len, r)) for r in rounds]
        assert (max(totals) - min(totals)) / min(totals) < 0.03, totals
        assert len({tuple(p) for r in rounds for p in r}) == 3 * n  # still prompts of their own
        lengths = [sorted(map(len, r)) for r in rounds]  # the same lengths, to within a worked example
        assert all(abs(a - b) <= max(pool.sizes.values()) for r in lengths[1:] for a, b in zip(lengths[0], r))
    assert long_prompts.PERIOD == 8
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    raw["profiles"]["prefill"]["workload"]["cases"]["prefill"] = {
        **raw["profiles"]["prefill"]["workload"]["cases"]["prefill"], "batch_sizes": [8, 12]}
    with pytest.raises(config.ConfigError, match=r"cases.prefill.batch_sizes: at 12 a round sends 12 long prompts, "
                                                 r"not a multiple of 8"):
        config.resolve({**raw, "profile": "prefill"})


def test_model_dir_loads_with_normal_loader_and_is_seeded(tiny_assets, tmp_path):
    from transformers import AutoModelForCausalLM

    from rollout_bench.assets import model

    m = AutoModelForCausalLM.from_pretrained(tiny_assets["model"])
    model.build(ROOT / "config/models/qwen3-tiny.json", tmp_path / "again", tiny_assets["tokenizer"], seed=0)
    m2 = AutoModelForCausalLM.from_pretrained(tmp_path / "again")
    for (k, a), (_, b) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k


def test_lora_adapter_nonzero_and_config(tiny_assets):
    info = lora.check(tiny_assets["lora"])
    assert info["rank"] == 4 and info["tensors"] == 2 * 3 * 2  # A and B x 3 targets x 2 layers
    cfg = json.loads(open(f"{tiny_assets['lora']}/adapter_config.json").read())
    assert sorted(cfg["target_modules"]) == ["down_proj", "q_proj", "v_proj"]


def test_lora_check_fails_on_zero_tensor(tiny_assets, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file
    shutil.copytree(tiny_assets["lora"], tmp_path / "z")
    t = load_file(str(tmp_path / "z/adapter_model.safetensors"))
    k = next(k for k in t if "lora_B" in k)
    t[k] = torch.zeros_like(t[k])
    save_file(t, str(tmp_path / "z/adapter_model.safetensors"))
    with pytest.raises(ValueError, match="all-zero"):
        lora.check(tmp_path / "z")


def test_every_shipped_profile_job_gets_prompts_of_its_own_per_round(tmp_path):
    """Every generate job on the synthetic dataset sends n_prompts x rounds + warmup_prompts distinct prompts: the
    shipped profiles' largest such need fits the dataset and tokenizer their config builds (the gpu profile's sweep
    at B = 256 needs 1,296 of the 128-256-token window)."""
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    built = {}
    for profile in ("cpu", "smoke", "gpu"):
        cfg = config.resolve({**raw, "profile": profile})
        need = {}
        for j in jobs.gen_jobs(cfg):
            wl = jobs.job_workload(cfg, j.model, j.backend, j.case, j.batch_size)
            if wl["dataset"] == "synthetic":
                key = (tuple(wl["prompt_tokens"]), wl["shuffle_seed"], wl.get("long_prompts", False))
                need[key] = max(need.get(key, 0), wl["n_prompts"] * wl["rounds"] + wl["warmup_prompts"])
        vocab, n, seed = cfg["tokenizer"]["vocab_size"], cfg["dataset"]["n_problems"], cfg["dataset"]["seed"]
        if (vocab, n, seed) not in built:
            d = tmp_path / f"{vocab}-{n}-{seed}"
            tokenizer.build(d / "tokenizer", vocab_size=vocab)
            dataset.build(d / "dataset", n, seed)
            built[(vocab, n, seed)] = (prompts.load_tokenizer(str(d / "tokenizer")), str(d / "dataset"))
        tok, ds = built[(vocab, n, seed)]
        for (window, shuffle, long), k in need.items():
            wl = {"prompt_tokens": list(window), "n_prompts": k, "rounds": 1, "warmup_prompts": 0,
                  "shuffle_seed": shuffle, "long_prompts": long}
            assert len(prompts.select(tok, wl, ds)[0][0]) == k, (profile, window, k)
        if profile == "gpu":
            assert max(need.values()) == 256 * 5 + 16
