"""`model.generate_batch`: transformers continuous batching over a paged KV cache.

One ContinuousBatchingManager lives for the whole job (`persistent_manager=True`): its paged cache and
batch processor are built on the first call and reused by every later round; only its worker thread
is restarted per call.
"""
import dataclasses
import math

import torch

from . import variant_reason
from .hf_model import generation_kwargs, load_model, strip
from .paged_cache import unsupported  # noqa: F401  (the backend hook: models the paged cache cannot hold)

REQUIRES = ("torch", "transformers", "peft")
NEEDS_GPU = False
ATTENTION = {  # variant id (path-safe) -> attn_implementation
    "paged_sdpa": "paged|sdpa",
    "paged_flash_attention_2": "paged|flash_attention_2",
    "paged_flash_attention_3": "paged|flash_attention_3",
    "paged_flash_attention_4": "paged|flash_attention_4",
}
VARIANTS = tuple(ATTENTION)
ONE_BUDGET_CALL = True  # generate(prompts, n, max_new_tokens=[m] * rows): the prefill probe's one-token call
# What each flash variant imports: (distribution, how to install it). Their versions decide the skip.
VARIANT_REQUIRES = {
    "paged_flash_attention_2": ("flash-attn", "pip install flash-attn --no-build-isolation (FA2 >= 2.3.3)"),
    "paged_flash_attention_3": ("flash-attn-3", "build flash-attention's hopper/ directory (FA3, Hopper GPUs only)"),
    "paged_flash_attention_4": ("flash-attn-4", "pip install flash-attn-4 (CuTeDSL; Hopper or Blackwell GPUs)"),
}
ENV_GROUPS = {"paged_flash_attention_4": "fa4"}  # envs/GROUP.yaml its jobs run in (backends.env_group)
# Sizing used on CPU when spec.options leaves it open: the library would otherwise size the cache
# from 90% of *host* RAM. On GPU the library's own auto-sizing is what a user of generate_batch gets.
CPU_BLOCK_SIZE = 32
CPU_MAX_BATCH_TOKENS = 512


def unavailable(variant, gpu_count):
    if variant not in VARIANT_REQUIRES:
        return None
    if gpu_count == 0:
        return (f"{variant} runs flash-attention kernels, which need a CUDA GPU; "
                f"run it on a GPU host with {VARIANT_REQUIRES[variant][0]} installed")
    return variant_reason(VARIANT_REQUIRES, variant)


def cb_generation_config(spec):
    """hf_generate's sampling settings, minus what continuous batching cannot honour itself."""
    from transformers import GenerationConfig

    kw = generation_kwargs(spec)
    # CB drops MinNewTokensLengthLogitsProcessor; ignore_eos is an empty EOS set instead (-1 = none).
    kw.pop("min_new_tokens", None)
    if spec.ignore_eos:
        kw["eos_token_id"] = -1
    return GenerationConfig(**kw)


def cb_config(spec, **overrides):
    """ContinuousBatchingConfig from spec.options (any of its field names) plus backend overrides."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    known = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    unknown = sorted(set(spec.options) - known)
    if unknown:
        raise ValueError(f"unknown continuous-batching option(s) {unknown}; known: {sorted(known)}")
    kw = dict(spec.options)
    # batch_size is "sequences in flight"; without it the first call's size (the warm-up) would stick.
    kw.setdefault("max_requests_per_batch", spec.batch_size)
    kw.setdefault("seed", spec.sampling.seed)
    if spec.device == "cpu":
        kw.setdefault("block_size", CPU_BLOCK_SIZE)
        blocks_per_seq = math.ceil(spec.max_seq_len / kw["block_size"])
        kw.setdefault("num_blocks", spec.batch_size * blocks_per_seq + 1)
        kw.setdefault("max_batch_tokens", CPU_MAX_BATCH_TOKENS)
    kw.update(overrides)
    return ContinuousBatchingConfig(**kw)


def cache_memory(cache) -> dict:
    """What the paged cache holds for its whole life: KV blocks (+2 padding blocks) and the SDPA mask."""
    kv = sum(t.numel() * t.element_size() for t in cache.key_cache + cache.value_cache)
    return {"reserved_cache_gb": round(kv / 1e9, 4), "num_blocks": cache.num_blocks,
            "block_size": cache.block_size, "max_batch_tokens": cache.max_batch_tokens}


def collect(results: dict, expected: int, spec) -> list[list[int]]:
    """generate_batch reports failures as outputs with .error set (and missing ids); make them loud."""
    outs = list(results.values())
    errors = [o.error for o in outs if o.error is not None]
    if errors or len(outs) != expected:
        raise RuntimeError(f"continuous batching returned {len(outs)}/{expected} results, "
                           f"{len(errors)} failed; first error: {errors[0] if errors else 'missing results'}")
    return [strip(list(o.generated_tokens), spec) for o in outs]


class Generator:
    def __init__(self, spec):
        self.spec = spec
        self.model = load_model(spec, attn_implementation=ATTENTION[spec.variant])
        self.gen_config = cb_generation_config(spec)
        self.cb_config = cb_config(spec)

    def generate(self, prompts, n, max_new_tokens=None):
        """max_new_tokens: one budget for every completion, as a list (the prefill probe's one-token call)."""
        budget = {}
        if max_new_tokens is not None:
            assert len(set(max_new_tokens)) == 1, "generate_batch takes one budget a call"
            budget = {"max_new_tokens": max_new_tokens[0]}
        seqs = [p for p in prompts for _ in range(n)]
        torch.manual_seed(self.spec.sampling.seed)  # the worker thread samples from the global generator
        # In 5.17 the manager's tensors are made in this thread and updated in place by the worker; under
        # inference_mode they become inference tensors and the worker dies ("Inplace update to inference
        # tensor outside InferenceMode"). Force it off in case a caller wrapped us in it.
        with torch.inference_mode(False):
            results = self.model.generate_batch(
                seqs, generation_config=self.gen_config, continuous_batching_config=self.cb_config,
                persistent_manager=True, progress_bar=False, **budget)
        return collect(results, len(seqs), self.spec)

    def prefill_kernel(self) -> dict:
        impl = ATTENTION[self.spec.variant]
        if self.spec.variant == "paged_flash_attention_4":
            return {"kernel": "fa4", "reason": None}
        return {"kernel": impl, "reason": f"variant {self.spec.variant} runs transformers' {impl} attention "
                                          f"(paged_flash_attention_4 runs FA4)"}

    def manager(self):
        return getattr(self.model, "_cached_continuous_batching_manager", None)

    def memory(self):
        mgr = self.manager()
        bp = mgr.batch_processor if mgr is not None else None
        if bp is None:
            return {}
        mem = cache_memory(bp.cache)
        return {"reserved_cache_gb": mem["reserved_cache_gb"]}

    def info(self):
        mgr = self.manager()
        if mgr is None or mgr.batch_processor is None:
            return {}
        cfg = mgr.continuous_batching_config
        return {**cache_memory(mgr.batch_processor.cache), "attn_implementation": ATTENTION[self.spec.variant],
                "use_cuda_graph": list(cfg.cuda_graph_booleans), "use_async_batching": cfg.use_async_batching,
                "max_requests_per_batch": cfg.max_requests_per_batch}

    def close(self):
        self.model.destroy_cached_continuous_batching_manager()


def load(spec):
    assert spec.variant in ATTENTION, spec.variant
    return Generator(spec)
