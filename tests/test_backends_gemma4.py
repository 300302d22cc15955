"""The HF-based backends on tiny random gemma4-tiny (CPU): hf_static matches hf_generate; transformers_cb and
cb_sync (and GRPO's transformers_cb) are skipped, with the paged cache's reason, before any weights load,
and the reason is true: the library's own cache build fails on this model."""
from unittest import mock

import pytest

from rollout_bench import backends
from rollout_bench.backends import cb_sync, hf_generate, hf_static, transformers_cb
from rollout_bench.diagnostics import random_model
from rollout_bench.grpo import availability
from rollout_bench.workload import GenSpec, Sampling

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# longer than gemma4-tiny's sliding window (20) with the completions
PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], [100, 200, 300, 400, 500, 600, 700] * 3, [42] * 11]
MAX_NEW = 12


@pytest.fixture(scope="module")
def gemma4_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("gemma4-tiny")
    # untied: tied random embeddings make greedy decoding repeat the prompt's last token
    random_model.build("gemma4-tiny", seed=0, tie_word_embeddings=False).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3-tiny")
    random_model.build("qwen3-tiny", seed=0).save_pretrained(path)
    return str(path)


def make_spec(model_dir, variant="default"):
    return GenSpec(model_dir=model_dir, adapter_dir=None, variant=variant, batch_size=3, max_new_tokens=MAX_NEW,
                   sampling=Sampling(), ignore_eos=True, eos_token_id=1, pad_token_id=0,
                   max_prompt_tokens=max(map(len, PROMPTS)))


def test_hf_static_matches_hf_generate(gemma4_dir):
    ref = hf_generate.load(make_spec(gemma4_dir)).generate(PROMPTS, 2)
    assert [len(o) for o in ref] == [MAX_NEW] * 2 * len(PROMPTS) and len({tuple(o) for o in ref}) > 1
    assert hf_static.load(make_spec(gemma4_dir)).generate(PROMPTS, 2) == ref


@pytest.mark.parametrize("name, variant", [("transformers_cb", "paged_sdpa"), ("cb_sync", "eager")])
def test_paged_cache_backends_skip_gemma4_with_the_reason(name, variant, gemma4_dir, qwen3_dir):
    # the config alone decides: no weights load
    with mock.patch("transformers.AutoModelForCausalLM.from_pretrained", side_effect=AssertionError("loaded")):
        reason = backends.unavailable(name, variant, 0, gemma4_dir)
    assert "PagedAttentionCache" in reason and "transformers 5." in reason
    assert "head_dim 16" in reason and "head_dim 32" in reason  # gemma4-tiny's sliding / full-attention dims
    assert "sliding_attention" in reason and "full_attention" in reason
    assert backends.unavailable(name, variant, 0, qwen3_dir) is None
    assert backends.unavailable(name, variant, 0) is None  # no model: the host's answer only
    assert backends.unavailable("hf_generate", "default", 0, gemma4_dir) is None


def test_grpo_transformers_cb_skips_gemma4(gemma4_dir, qwen3_dir):
    reason = availability.unavailable("transformers_cb", 0, gemma4_dir)
    assert reason.startswith("GRPO backend transformers_cb: ") and "PagedAttentionCache" in reason
    assert availability.unavailable("transformers_cb", 0, qwen3_dir) is None
    assert availability.unavailable("hf_generate", 0, gemma4_dir) is None


def test_the_skip_is_true_transformers_cache_build_fails(gemma4_dir):
    """When transformers sizes the paged cache per layer this fails: drop the skip and check the outputs."""
    from transformers.integrations.heterogeneity.configuration_utils import (
        AmbiguousGlobalPerLayerAttributeError,
    )

    with pytest.raises(AmbiguousGlobalPerLayerAttributeError, match="head_dim"):
        cb_sync.load(make_spec(gemma4_dir, "eager"))
    gen = transformers_cb.load(make_spec(gemma4_dir, "paged_sdpa"))
    try:
        with pytest.raises(AmbiguousGlobalPerLayerAttributeError, match="head_dim"):
            gen.generate(PROMPTS[:1], 1)
    finally:
        gen.close()
