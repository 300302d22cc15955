"""Every GRPO run sees the same prompts in the same order, whatever its seed (train.data_seed)."""
from rollout_bench.assets import learnable
from rollout_bench.grpo import data
from rollout_bench.grpo.config import TrainSpec, grpo_config


def test_prompt_order_is_the_data_seeds_not_the_run_seeds(tmp_path, tiny_assets):
    from transformers import AutoTokenizer

    learnable.build(tmp_path / "d", 60, 8, 5)
    tok = AutoTokenizer.from_pretrained(tiny_assets["tokenizer"])
    stored, _ = data.load(tmp_path / "d", tok, 1.0)
    a, _ = data.load(tmp_path / "d", tok, 1.0, shuffle_seed=3407)
    b, _ = data.load(tmp_path / "d", tok, 1.0, shuffle_seed=3407)
    c, _ = data.load(tmp_path / "d", tok, 1.0, shuffle_seed=1)
    assert a["answer"] == b["answer"] != stored["answer"] and a["answer"] != c["answer"]
    assert sorted(a["answer"]) == sorted(stored["answer"])  # a permutation, nothing dropped
    # TRL's sampler would reshuffle with the run's seed: it is told not to
    for seed in (3407, 3408):
        args = grpo_config(TrainSpec(seed=seed), "hf_generate", max_steps=1, output_dir=str(tmp_path / "o"))
        assert (args.seed, args.data_seed, args.shuffle_dataset) == (seed, 3407, False)
