"""The bytes a decode must read (engine/traffic.py), which the flex stats turn into achieved bandwidth: the
closed form of the keys read against a step-by-step count, the weights a step reads, and the engine's counter
over a real decode, sliding windows and KV sharing included."""
import random

import pytest
import torch

from rollout_bench.core.workload import Sampling
from rollout_bench.diagnostics import random_model
from rollout_bench.engine import Engine, EngineConfig, traffic

GREEDY = Sampling(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, seed=0)


def test_keys_read_matches_counting_step_by_step():
    rng = random.Random(0)
    for _ in range(500):
        context, steps = rng.randint(1, 80), rng.randint(0, 70)
        window = rng.choice([None, 1, 2, 7, 16, 33, 100])
        want = sum(context + k if window is None else min(context + k, window) for k in range(steps))
        assert traffic.keys_read(context, steps, window) == want, (context, steps, window)


def test_weight_bytes_leave_out_embedding_rows_but_not_a_tied_head():
    untied = random_model.build("qwen3-tiny", tie_word_embeddings=False)
    everything = sum(p.numel() * 4 for p in untied.parameters())
    table = untied.model.embed_tokens.weight
    assert traffic.weight_bytes(untied) == everything - table.numel() * 4
    tied = random_model.build("qwen3-tiny", tie_word_embeddings=True)
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    assert traffic.weight_bytes(tied) == sum(p.numel() * 4 for p in tied.parameters())  # the head reads it whole


def expected_bytes(engine, prompt_lens, new_tokens):
    """Step by step: every row decodes new_tokens - 1 steps (the first token comes from the prefill), step k
    attending over its prompt + 1 + k tokens, capped at each layer's window; the weights once a step."""
    steps = new_tokens - 1
    kv = 0
    for (k, v), plan in zip(engine.runner.kv.layers, engine.runner.plan):
        per_token = (k.shape[1] * k.shape[3] + v.shape[1] * v.shape[3]) * k.element_size()
        for length in prompt_lens:
            kv += per_token * sum(min(length + 1 + s, plan.window or 10**9) for s in range(steps))
    return steps * engine.step_weight_bytes + kv


@pytest.mark.parametrize("name", ["qwen3-tiny", "gemma4-tiny"])
def test_engine_counts_the_bytes_of_every_decode_step(name):
    model = random_model.build(name, tie_word_embeddings=False)
    engine = Engine(model, EngineConfig(max_batch=4, max_seq_len=96, page_size=16, decode_chunk=5,
                                        decode_chunk_no_eos=5, num_pages=32))
    if name == "gemma4-tiny":  # the case worth checking: sliding windows that the contexts outgrow, KV sharing
        assert any(p.window for p in engine.runner.plan) and any(p.kv_source != i for i, p in
                                                                  enumerate(engine.runner.plan))
    g = torch.Generator().manual_seed(0)
    lens = [9, 30]
    prompts = [torch.randint(0, 1000, (n,), generator=g).tolist() for n in lens]
    outs = engine.generate(prompts, GREEDY, 23, ignore_eos=True)
    assert [len(o.token_ids) for o in outs] == [23, 23]
    assert engine.timings["decode_steps"] == 22
    assert engine.timings["decode_bytes"] == expected_bytes(engine, lens, 23)
