"""The autotune-replay pass: which tuned entry a flex job replays, and the record on a host without CUDA."""
import json

import pytest
import torch

from rollout_bench.backends import kernel_tuning
from rollout_bench.diagnostics import autotune, decode_sweep


def record(**best):
    return {"status": "ok", "by_batch": {b: {"best": opts} for b, opts in best.items()}}


def test_options_for_picks_smallest_tuned_batch_at_least_the_jobs():
    rec = record(**{"64": {"BLOCK_N": 64}, "256": {"SPLIT_KV": 2}})
    assert kernel_tuning.options_for(rec, 8) == {"BLOCK_N": 64}
    assert kernel_tuning.options_for(rec, 64) == {"BLOCK_N": 64}
    assert kernel_tuning.options_for(rec, 65) == {"SPLIT_KV": 2}
    assert kernel_tuning.options_for(rec, 1024) == {"SPLIT_KV": 2}  # beyond the largest: the largest
    assert kernel_tuning.options_for({"status": "skipped", "by_batch": {}}, 64) == {}


def test_replay_merges_the_picked_entry_unless_the_job_sets_its_own(tmp_path):
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(record(**{"8": {"GEMM_TILES": {"2560x4096": "n32_k128_s4_st4_w4"}}})))
    opts, info = kernel_tuning.replay(path, 4, {"page_size": 16})
    assert opts == {"page_size": 16, "decode_kernel_options": {"GEMM_TILES": {"2560x4096": "n32_k128_s4_st4_w4"}}}
    assert info == {"file": str(path), "status": "ok", "replayed": opts["decode_kernel_options"],
                    "tuned": opts["decode_kernel_options"]}
    own = {"decode_kernel_options": {"num_warps": 8}}
    opts, info = kernel_tuning.replay(path, 4, own)
    assert opts == own and info["replayed"] == {} and info["tuned"]["GEMM_TILES"]
    path.write_text(json.dumps({"status": "skipped", "by_batch": {}}))  # tuned on a host without CUDA
    assert kernel_tuning.replay(path, 4, {}) == ({}, {"file": str(path), "status": "skipped", "replayed": {},
                                                      "tuned": {}})


def test_best_options_needs_a_real_gain_over_the_default():
    assert decode_sweep.best_options({"{}": 1.0, '{"SPLIT_KV": 2}': 0.99}) == {}  # within MIN_GAIN: keep default
    assert decode_sweep.best_options({"{}": 1.0, '{"SPLIT_KV": 2}': 0.9}) == {"SPLIT_KV": 2}
    assert decode_sweep.best_options({"{}": 1.0, '{"SPLIT_KV": 2}': "RuntimeError('no')"}) == {}
    assert decode_sweep.best_options({'{"SPLIT_KV": 2}': 0.5}) == {}  # no default timed: nothing to compare


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the record written without CUDA")
def test_run_without_cuda_writes_a_skipped_record(tiny_assets, tmp_path):
    out = tmp_path / "flex.json"
    rec = autotune.run(model="qwen3-tiny", model_dir=tiny_assets["model"], batch_sizes=[64, 8],
                       prompt_tokens=[128, 256], max_new_tokens=32, dtype="float32", out=str(out))
    assert rec["status"] == "skipped" and "no CUDA" in rec["reason"]
    saved = json.loads(out.read_text())
    assert saved["workload"]["batch_sizes"] == [8, 64] and saved["env"]["torch"]
    assert kernel_tuning.options_for(saved, 64) == {}


def test_to_mid_generation_stops_half_way_whatever_the_decode_chunk(tiny_assets):
    """An ignore_eos batch decodes in chunks of up to decode_chunk_no_eos steps: stepping the engine
    new_tokens // 2 // decode_chunk times (the old warm-up) ran it to its end and left nothing to time."""
    import random

    from rollout_bench.engine import Engine, EngineConfig

    cfg = EngineConfig(max_batch=4, max_seq_len=192, decode_chunk=16, decode_chunk_no_eos=64)
    engine = Engine.from_pretrained(tiny_assets["model"], cfg)
    rng = random.Random(0)
    prompts = [[rng.randrange(engine.runner.vocab) for _ in range(rng.randint(20, 40))] for _ in range(4)]
    running = decode_sweep.to_mid_generation(engine, prompts, new_tokens=128, timed_steps=16)
    assert len(running) == 4 and [s.num_generated for s in running] == [64] * 4
    # every row has its timed chunk's pages: the graph replays write inside the sequence's own pages
    assert all(engine.runner.pages.pages_needed(s.num_tokens - 1 + 16, s.slot) == 0 for s in running)
    engine.abort()
    short = decode_sweep.to_mid_generation(engine, prompts[:2], new_tokens=24, timed_steps=16)
    assert [s.remaining for s in short] == [16, 16]  # short runs keep a full timed chunk to go
    engine.abort()
    with pytest.raises(AssertionError, match="above the timed chunk"):
        decode_sweep.to_mid_generation(engine, prompts, new_tokens=16, timed_steps=16)


def test_one_engine_replays_the_whole_record_each_bucket_its_entry(tmp_path):
    """A generation job's engine serves several batch sizes: each decode bucket gets the entry of the smallest tuned
    batch >= it, each cell's stats what a job of its size would have replayed; the job's own options win."""
    import json

    import pytest

    from rollout_bench.backends import kernel_tuning
    from rollout_bench.engine import EngineConfig

    rec = {"status": "ok", "by_batch": {"8": {"best": {"BLOCK_N": 64}}, "64": {"best": {}},
                                        "256": {"best": {"SPLIT_KV": 2}}}}
    (tmp_path / "t.json").write_text(json.dumps(rec))
    opts, info = kernel_tuning.replay_by_batch(tmp_path / "t.json", [1, 64, 512], {})
    assert opts == {"decode_kernel_options_by_batch": {8: {"BLOCK_N": 64}, 64: {}, 256: {"SPLIT_KV": 2}}}
    assert info[1]["replayed"] == {"BLOCK_N": 64} and info[64]["replayed"] == {} and info[512]["tuned"] == {"SPLIT_KV": 2}
    cfg = EngineConfig(max_batch=256, **opts)
    assert [cfg.decode_options_for(b) for b in (2, 8, 16, 64, 80, 256, 300)] == [
        {"BLOCK_N": 64}, {"BLOCK_N": 64}, {}, {}, {"SPLIT_KV": 2}, {"SPLIT_KV": 2}, {"SPLIT_KV": 2}]
    own, info = kernel_tuning.replay_by_batch(tmp_path / "t.json", [8], {"decode_kernel_options": {"num_warps": 8}})
    assert own == {"decode_kernel_options": {"num_warps": 8}} and info[8]["replayed"] == {}
    with pytest.raises(AssertionError, match="not both"):
        EngineConfig(decode_kernel_options={"num_warps": 4}, decode_kernel_options_by_batch={8: {}})
    with pytest.raises(AssertionError, match="BLOCKS_ARE_CONTIGUOUS"):
        EngineConfig(decode_kernel_options_by_batch={8: {"BLOCKS_ARE_CONTIGUOUS": True}})
