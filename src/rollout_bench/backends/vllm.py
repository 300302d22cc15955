"""vLLM offline engine: `LLM` on the model dir, the adapter as a `LoRARequest`, token-id prompts.

Variants: `default` (normal weight loading, gpu_memory_utilization from config, 0.9 unless set),
`dummy` (load_format="dummy": random weights, engine speed only) and `gmu_low` (0.3: how much of
the speed survives a small KV cache; with `engine_kwargs.kv_cache_memory_bytes` set, as in the smoke profile, that
fixes the KV size and the two differ only in how much free memory vLLM asks for at start-up; the stats record
both). vLLM reserves its KV cache up front, so memory is reported as
device memory in use (cudaMemGetInfo) next to the KV cache size, not torch's allocator peaks.
"""
import json
import os
from pathlib import Path

from ..core import envinfo

REQUIRES = ("torch", "vllm")
NEEDS_GPU = True
VARIANTS = ("default", "dummy", "gmu_low")
RETARGET = True  # one generator serves a job's cells (retarget), built once
PER_REQUEST_LENGTHS = True
LOGPROBS = True  # row_logprobs: the sampled tokens' logprobs, for the mismatch job
GMU_DEFAULT, GMU_LOW = 0.9, 0.3
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm.config.lora.MaxLoRARanks (0.26)
# Measured on the offline H200 host: without these the engine start hangs at model-runner init.
# They pin vLLM's own address to loopback and keep the V1 engine core in this process.
ENV = {"VLLM_HOST_IP": "127.0.0.1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
INSTALL = ("install the 'vllm' group: conda env envs/vllm.yaml, or offline "
           "`python -m rollout_bench.host.wheelhouse build vllm --constraints <host packages>` here, carry "
           "it, then `bash workflow/scripts/offline_gpu_host.sh` on the GPU host (README: Offline GPU hosts)")


def unavailable(variant, gpu_count):
    """None: vLLM imports. An installed vLLM that does not import is no skip but a failure (BrokenBackend)."""
    from . import BrokenBackend

    os.environ.update({k: os.environ.get(k, v) for k, v in ENV.items()})
    try:
        import vllm  # noqa: F401
    except Exception as e:  # a broken install fails in many ways (ABI, CUDA libs, pins)
        raise BrokenBackend(f"vllm {envinfo.version('vllm')} is installed but does not import "
                            f"({type(e).__name__}: {e}); {INSTALL}") from e
    return None


GEMMA4 = ("gemma4", "gemma4_text")  # model_type of the multimodal config and of its text config
MEASURED_VLLM = "0.26"  # the release that crashed on Gemma-4 (results/published/h200-2026-12-01-session4)


# vLLM 0.26's LoRA kernels (vllm/lora/ops/triton_ops: lora_shrink, lora_expand) assert these weight dtypes
LORA_DTYPES = ("float16", "bfloat16")


def unsupported_spec(spec) -> str | None:
    """Why vLLM cannot run this job (its dtype with an adapter), and what would; None when it can.

    Measured on an H200 (vLLM 0.26.0, the smoke run of results/published/h200-2026-12-01-session6): the
    smoke profile's float32 LoRA cases failed at their first forward, in lora_expand's `assert
    weight.dtype in [torch.float16, torch.bfloat16]`. GRPO's colocated vLLM is not asked: TRL merges the
    adapter into the weights it syncs and sends no LoRA request."""
    if spec.adapter_dir and spec.dtype not in LORA_DTYPES:
        return (f"vLLM's LoRA kernels take {' or '.join(LORA_DTYPES)} weights only (vLLM 0.26 asserts it in "
                f"lora_expand) and this job runs an adapter in {spec.dtype}: set workload.dtype to bfloat16 "
                f"(or auto on a bfloat16 model) to run vLLM's LoRA cases")
    return None


def unsupported(model_dir: str) -> str | None:
    """Why vLLM cannot start on `model_dir`'s model, and what would change that; None when it can.

    Measured on an H200 (vLLM 0.26.0, transformers 5.17.0; logs/vllm_gemma-4-e2b.log in the published
    session above): `LLM()` builds its ModelConfig, whose architecture convertor reads `head_dim` off the
    text config (`getattr(hf_text_config, "head_dim", 0)` in get_head_size). Gemma-4's text config is
    per-layer in transformers 5.17 (E2B: head_dim 256 on sliding layers, 512 on full-attention ones) and
    refuses that global read with AmbiguousGlobalPerLayerAttributeError, a RuntimeError that getattr's
    default does not catch. This makes the same read on the config alone (no vllm import, no weights), so
    the skip lifts once transformers lets the read through; it is limited to Gemma-4, the model it was
    measured on."""
    import transformers
    from transformers import AutoConfig

    try:
        from transformers.integrations.heterogeneity.configuration_utils import (
            AmbiguousGlobalPerLayerAttributeError,
        )
    except ImportError:  # a transformers without per-layer configs: the global read is a plain one
        return None
    cfg = AutoConfig.from_pretrained(model_dir)
    text = cfg.get_text_config()
    if cfg.model_type not in GEMMA4 and getattr(text, "model_type", None) not in GEMMA4:
        return None
    try:
        getattr(text, "head_dim", 0)  # what vLLM 0.26's ModelConfig reads
        return None
    except AmbiguousGlobalPerLayerAttributeError:
        pass
    types = getattr(text, "layer_types", None) or ["layer"] * text.num_hidden_layers
    dims: dict[str, list[int]] = {}  # layer type -> its head dims
    for layer_type, layer in zip(types, text.per_layer_config):
        if layer.head_dim not in dims.setdefault(layer_type, []):
            dims[layer_type].append(layer.head_dim)
    seen = ", ".join(f"{t} layers head_dim {'/'.join(map(str, sorted(d)))}"
                     for t, d in sorted(dims.items(), key=lambda item: min(item[1])))
    vllm = f"vLLM {envinfo.version('vllm') or MEASURED_VLLM}"
    return (f"{vllm} reads config.head_dim off the model's text config when it builds its ModelConfig, and "
            f"transformers {transformers.__version__}'s {text.model_type} config has per-layer head dims ({seen}): "
            f"the read raises AmbiguousGlobalPerLayerAttributeError ('head_dim' is a per-layer attribute and "
            f"may vary across layers) before any weights load. It runs once vLLM reads Gemma-4's per-layer head "
            f"dims or transformers lets the global read through; the job re-runs when the vLLM version changes")


def alone_on_gpu(options: dict) -> bool:
    """Whether this job's engine needs its GPU to itself: without a fixed KV size, vLLM sizes its KV cache from a
    memory profile at start-up and asserts that no one freed GPU memory meanwhile ("Error in memory
    profiling"): every vLLM job of the smoke run, 4 jobs a GPU, crashed so on the H200
    (results/published/h200x2-2026-12-01-session5). `engine_kwargs.kv_cache_memory_bytes` sizes the cache
    directly and skips that profile's check, so such a job can share."""
    return (options.get("engine_kwargs") or {}).get("kv_cache_memory_bytes") is None


def gpu_memory_utilization(spec) -> float:
    if spec.variant == "gmu_low":
        return float(spec.options.get("gpu_memory_utilization_low", GMU_LOW))
    return float(spec.options.get("gpu_memory_utilization", GMU_DEFAULT))


def adapter_rank(adapter_dir) -> int:
    return int(json.loads((Path(adapter_dir) / "adapter_config.json").read_text())["r"])


def engine_kwargs(spec) -> dict:
    kw = dict(model=spec.model_dir, dtype=spec.dtype, seed=spec.sampling.seed,
              gpu_memory_utilization=gpu_memory_utilization(spec), max_model_len=spec.max_seq_len,
              max_num_seqs=spec.batch_size, enforce_eager=bool(spec.options.get("enforce_eager", False)))
    if returns_logprobs(spec):
        # as TRL's colocated engine: the logprobs it returns are the distribution drawn from (after temperature and
        # top-k/top-p), which its importance-sampling correction compares with the trainer's. Set only with the
        # option on: the mode changes vLLM's top-k/top-p sampling path whether or not a request asks for logprobs
        kw["logprobs_mode"] = "processed_logprobs"
    if spec.variant == "dummy":
        kw["load_format"] = "dummy"
    if spec.adapter_dir:
        r = adapter_rank(spec.adapter_dir)
        kw.update(enable_lora=True, max_loras=1, max_lora_rank=min(x for x in LORA_RANKS if x >= r))
    kw.update(spec.options.get("engine_kwargs", {}))
    return kw


def returns_logprobs(spec) -> bool:
    """Option logprobs (default on, as TRL's GRPO asks of vLLM): each sampled token's logprob comes back."""
    return bool(spec.options.get("logprobs", True))


def sampling_kwargs(spec, n: int) -> dict:
    """SamplingParams for one request. vLLM 0.26: top_k 0 = off (-1 still accepted, 0 preferred);
    temperature 0 = greedy, which vLLM refuses with n > 1 (see `requests`).

    In vLLM 0.26, run in-process as TRL colocates it, returning those logprobs cost up to a third of its tok/s at
    B = 256 (results/published/h100-2026-12-06-headline-b against -headline).

    The seed goes to the engine (`LLM(seed=)`); a per-request seed (option request_seed: true)
    makes vLLM 0.26 leave FlashInfer sampling and draw each seeded row in a Python loop."""
    s = spec.sampling
    kw = dict(n=n, max_tokens=spec.max_new_tokens, ignore_eos=spec.ignore_eos)
    # logprobs=0: the sampled token's own logprob, which TRL's GRPO asks of vLLM at every step (and flex returns
    # always); option logprobs: false measures the engine without them (no mismatch for its cells)
    if returns_logprobs(spec):
        kw["logprobs"] = 0
    if spec.options.get("request_seed", False):
        kw["seed"] = s.seed
    if not spec.options.get("detokenize", True):  # TRL keeps vLLM's detokenizer on; so do we by default
        kw["detokenize"] = False
    if s.greedy:
        kw.update(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)
    else:
        kw.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, min_p=s.min_p)
    if not spec.ignore_eos:
        kw["stop_token_ids"] = [spec.eos_token_id]  # the tokenizer's EOS, as the HF backends stop on
    return kw


def requests(prompts: list[list[int]], n: int, greedy: bool) -> tuple[list[list[int]], int]:
    """(prompts to submit, n per request). Greedy with n > 1 raises in vLLM ("n must be 1 when using
    greedy sampling"): submit each prompt n times instead; the output order stays prompt-major."""
    if greedy and n > 1:
        return [p for p in prompts for _ in range(n)], 1
    return list(prompts), n


class Generator:
    def __init__(self, spec):
        os.environ.update({k: os.environ.get(k, v) for k, v in ENV.items()})
        from vllm import LLM

        self.spec = self.built = spec
        self.llm = LLM(**engine_kwargs(spec))
        self.lora = None
        if spec.adapter_dir:
            from vllm.lora.request import LoRARequest

            self.lora = LoRARequest("adapter", 1, str(Path(spec.adapter_dir).resolve()))

    def retarget(self, spec) -> bool:
        """The next cell of the job on the same LLM (one engine per model and adapter, sized for the job's largest
        batch, each round submitting the cell's prompts): while the cell fits its max_num_seqs and max_model_len
        and samples with the seed the engine was given."""
        from . import same_engine

        kw = engine_kwargs(self.built)
        if not (same_engine(self.built, spec) and spec.fits(kw["max_num_seqs"])
                and spec.max_seq_len <= kw["max_model_len"] and spec.sampling.seed == self.built.sampling.seed):
            return False
        self.spec = spec
        return True

    def generate(self, prompts, n, max_new_tokens=None):
        from vllm import SamplingParams, TokensPrompt

        if max_new_tokens is not None:  # each completion its own request and budget, as TRL's colocated rollout
            inputs = [p for p in prompts for _ in range(n)]  # submits a prompt once per completion
            base = sampling_kwargs(self.spec, 1)
            params = [SamplingParams(**{**base, "max_tokens": int(m)}) for m in max_new_tokens]
        else:
            inputs, per_request = requests(prompts, n, self.spec.sampling.greedy)
            params = SamplingParams(**sampling_kwargs(self.spec, per_request))
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in inputs], params,
                                 use_tqdm=False, lora_request=self.lora)
        self.last_outs = [c for o in outs for c in sorted(o.outputs, key=lambda c: c.index)]
        return [list(c.token_ids) for c in self.last_outs]

    def row_logprobs(self, rows: list[int]) -> list[list[float]] | None:
        """The last call's logprobs of its own tokens, per row asked for (read after the round, not inside it); None
        where option logprobs is off."""
        if not returns_logprobs(self.spec):
            return None
        picked = [self.last_outs[i] for i in rows]
        if any(c.logprobs is None for c in picked):
            raise RuntimeError("vLLM returned no logprobs though the request asked for logprobs=0")
        return [[c.logprobs[t][tok].logprob for t, tok in enumerate(c.token_ids)] for c in picked]

    def prefill_kernel(self) -> dict:
        """Without a call into the engine (every cell): vLLM's own attention, its backend unnamed."""
        return {"kernel": "vllm", "reason": "vLLM runs the attention backend it picks itself (named only in cells "
                                            "of a prefill_rate case)"}

    def prefill_kernel_from_engine(self) -> dict:
        """Cells of a prefill_rate case only (generation/prefill.kernel): vLLM's attention backend, its layers'
        `attn_backend` asked of the in-process worker through LLM.collective_rpc, else 'vllm' and why."""
        try:
            names = sorted({n for ns in self.llm.collective_rpc(attention_backends) for n in ns})
        except Exception as e:  # internals move between releases: the kernel is then unnamed, and why
            return {"kernel": "vllm", "reason": f"vLLM runs its own attention; its backend's name was not readable "
                                                f"({type(e).__name__}: {e})"[:300]}
        return {"kernel": "+".join(names) or "vllm", "reason": "vLLM runs the attention backend it picks itself"}

    def memory(self) -> dict:
        return engine_memory(self.llm, gpu_memory_utilization(self.spec),
                             self.spec.options.get("engine_kwargs", {}).get("kv_cache_memory_bytes"))

    def close(self):
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        try:
            if core is not None:
                core.shutdown()
        except Exception:
            pass
        self.llm = None


def attention_backends(worker) -> list[str]:
    """On a vLLM worker (LLM.collective_rpc): the names of its attention layers' backends."""
    model = worker.model_runner.model
    return sorted({m.attn_backend.get_name() for m in model.modules() if hasattr(m, "attn_backend")})


def engine_memory(llm, gmu: float, kv_fixed: int | None = None) -> dict:
    """Device memory in use (cudaMemGetInfo: vLLM reserves KV cache, graphs and workspaces outside
    torch's peak stats) and the KV cache vLLM carved out (None where this release hides it)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    out = {"reserved_gb": round((total - free) / 1e9, 3), "gpu_memory_utilization": gmu,
           "kv_cache_memory_bytes": kv_fixed, "kv_cache_tokens": None, "kv_cache_gb": None}
    try:
        cfg = llm.llm_engine.vllm_config
        tokens = cfg.cache_config.num_gpu_blocks * cfg.cache_config.block_size
        out["kv_cache_tokens"] = tokens
        mc, pc, cache_dtype = cfg.model_config, cfg.parallel_config, cfg.cache_config.cache_dtype
        itemsize = mc.dtype.itemsize if cache_dtype == "auto" else (1 if "fp8" in cache_dtype else None)
        # K and V, every layer, every KV head
        out["kv_cache_gb"] = round(tokens * 2 * mc.get_num_layers(pc) * mc.get_num_kv_heads(pc)
                                   * mc.get_head_size() * itemsize / 1e9, 3)
    except Exception:  # internals move between releases; the in-use figure stands alone
        pass
    return out


def load(spec):
    return Generator(spec)
