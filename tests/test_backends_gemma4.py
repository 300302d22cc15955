"""The HF-based backends on tiny random gemma4-tiny (CPU): hf_static matches hf_generate; transformers_cb and
cb_sync (and GRPO's transformers_cb) are skipped, with the paged cache's reason, before any weights load,
and the reason is true: the library's own cache build fails on this model. vllm (and GRPO's vllm) skip
Gemma-4 from its config alone, without vllm installed: the head_dim read that crashed vLLM 0.26's start."""
import sys
from unittest import mock

import pytest

from rollout_bench import backends
from rollout_bench.backends import cb_sync, hf_generate, hf_static, transformers_cb
from rollout_bench.backends import vllm as vllm_backend
from rollout_bench.core.workload import GenSpec, Sampling
from rollout_bench.diagnostics import random_model
from rollout_bench.grpo import availability

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


@pytest.fixture(scope="module")
def gemma4_e2b_config_dir(tmp_path_factory):
    """Gemma-4 E2B's config alone (no weights): the measured model's head dims, 256 and 512."""
    path = tmp_path_factory.mktemp("gemma-4-e2b-config")
    random_model.config("gemma-4-e2b").save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def gemma4_multimodal_config_dir(tmp_path_factory):
    """A `gemma4` (multimodal) config around gemma4-tiny's text config: vLLM reads its text config."""
    from transformers import Gemma4Config

    path = tmp_path_factory.mktemp("gemma4-mm-config")
    Gemma4Config(text_config=random_model.config("gemma4-tiny").to_dict()).save_pretrained(path)
    return str(path)


def test_vllm_skips_gemma4_from_the_config_alone(gemma4_dir, gemma4_e2b_config_dir, gemma4_multimodal_config_dir,
                                                 qwen3_dir):
    # no weights load and vllm is never imported (None in sys.modules: `import vllm` raises)
    with mock.patch("transformers.AutoModelForCausalLM.from_pretrained", side_effect=AssertionError("loaded")), \
            mock.patch.dict(sys.modules, {"vllm": None}), \
            mock.patch("rollout_bench.core.envinfo.version", return_value=None):  # no vllm: the measured release named
        e2b = vllm_backend.unsupported(gemma4_e2b_config_dir)
        tiny = vllm_backend.unsupported(gemma4_dir)
        mm = vllm_backend.unsupported(gemma4_multimodal_config_dir)
    assert e2b.startswith("vLLM 0.26 reads config.head_dim") and "transformers 5." in e2b
    assert "AmbiguousGlobalPerLayerAttributeError" in e2b and "gemma4_text config" in e2b
    assert "sliding_attention layers head_dim 256, full_attention layers head_dim 512" in e2b
    assert "sliding_attention layers head_dim 16, full_attention layers head_dim 32" in tiny
    assert mm and "head_dim 16" in mm and "head_dim 32" in mm
    assert vllm_backend.unsupported(qwen3_dir) is None
    with mock.patch("rollout_bench.core.envinfo.version", return_value="0.27.1"):  # the installed release, named
        assert vllm_backend.unsupported(gemma4_dir).startswith("vLLM 0.27.1 reads config.head_dim")


def test_vllm_skip_is_the_read_vllm_makes(gemma4_e2b_config_dir):
    """vLLM 0.26's get_head_size: getattr(hf_text_config, "head_dim", 0), and the error is no AttributeError."""
    from transformers import AutoConfig
    from transformers.integrations.heterogeneity.configuration_utils import (
        AmbiguousGlobalPerLayerAttributeError,
    )

    text = AutoConfig.from_pretrained(gemma4_e2b_config_dir).get_text_config()
    with pytest.raises(AmbiguousGlobalPerLayerAttributeError, match="'head_dim' is a per-layer attribute"):
        getattr(text, "head_dim", 0)


def test_vllm_backends_ask_the_hook(gemma4_dir, qwen3_dir):
    """Once vllm is installed, imports and a GPU is there (mocked: none of it is on this host)."""
    with mock.patch.object(vllm_backend, "unavailable", return_value=None), \
            mock.patch("rollout_bench.backends.host_reason", return_value=None):
        reason = backends.unavailable("vllm", "default", 1, gemma4_dir)
        assert "reads config.head_dim" in reason and "AmbiguousGlobalPerLayerAttributeError" in reason
        assert backends.unavailable("vllm", "dummy", 1, qwen3_dir) is None
        assert backends.unavailable("vllm", "default", 1) is None
    with mock.patch("rollout_bench.grpo.availability.host_reason", return_value=None):
        reason = availability.unavailable("vllm", 1, gemma4_dir)
        assert reason.startswith("GRPO backend vllm: vLLM ") and "reads config.head_dim" in reason
        assert availability.unavailable("vllm", 1, qwen3_dir) is None
        assert availability.unavailable("vllm", 1) is None
