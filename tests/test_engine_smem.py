"""flex's Triton tiles shrink to the GPU's shared memory per head dim (engine/smem.py)."""
import pytest

from rollout_bench.engine import smem

H200 = 232_448  # shared_memory_per_block_optin of an H100/H200
BF16 = 2


def test_the_estimate_is_tritons_count_for_the_failing_gemma4_prefill():
    # Inductor's default for head dim > 256 (64, 32, 3 stages) at Gemma-4's 512: what Triton refused on the H200
    assert smem.smem_bytes(64, 32, 3, 512, BF16) == 262_144 > H200


def test_a_512_wide_prefill_gets_explicit_tiles_that_fit():
    got = smem.fit(None, "prefill", 512, BF16, H200)
    assert got == {"BLOCK_M": 64, "BLOCK_N": 32, "num_stages": 2}
    assert smem.smem_bytes(got["BLOCK_M"], got["BLOCK_N"], got["num_stages"], 512, BF16) <= H200


def test_tuned_decode_candidates_fit_at_256_and_512():
    cand = {"BLOCK_N": 128, "num_stages": 2, "num_warps": 8}
    assert smem.smem_bytes(16, 128, 2, 256, BF16) > H200  # as asked, it would not compile
    at256 = smem.fit(cand, "decode", 256, BF16, H200, gqa=8)
    assert at256 == {"BLOCK_N": 128, "num_stages": 1, "num_warps": 8}
    at512 = smem.fit(cand, "decode", 512, BF16, H200, gqa=8)
    assert at512["num_stages"] == 1 and at512["BLOCK_N"] == 64 and at512["num_warps"] == 8
    assert smem.smem_bytes(16, at512["BLOCK_N"], 1, 512, BF16) <= H200
    # a split-KV candidate keeps its split and gains tiles only at 512
    assert smem.fit({"SPLIT_KV": 4}, "decode", 512, BF16, H200)["SPLIT_KV"] == 4


@pytest.mark.parametrize("opts", [None, {}, {"SPLIT_KV": 2}, {"BLOCK_N": 128, "num_stages": 2, "num_warps": 8}])
def test_qwen3_and_llama_head_dims_are_left_as_asked(opts):
    # head dim 128: what the published Qwen3-4B figures ran with stays byte-for-byte the same
    assert smem.fit(opts, "decode", 128, BF16, H200) == (opts or None)
    assert smem.fit(opts, "prefill", 128, BF16, H200) == (opts or None)


def test_fwd_prefixed_options_are_read_and_replaced():
    got = smem.fit({"fwd_BLOCK_N": 64, "fwd_num_stages": 3}, "prefill", 512, BF16, H200)
    assert "fwd_BLOCK_N" not in got and "fwd_num_stages" not in got
    assert smem.smem_bytes(got["BLOCK_M"], got["BLOCK_N"], got["num_stages"], 512, BF16) <= H200


def test_nothing_fits_is_an_error_naming_the_head_dim():
    with pytest.raises(ValueError, match="head_dim 4096"):
        smem.fit(None, "prefill", 4096, 4, 16_384)


def test_off_cuda_there_is_no_limit():
    assert smem.device_limit("cpu") is None
