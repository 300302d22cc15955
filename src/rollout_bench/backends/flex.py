"""Our flex_attention engine (rollout_bench.engine) as a pipeline backend.

Variants: 'graphs' (CUDA graph per batch bucket, GPU only), 'eager' (no graphs; the CPU path),
'peft_unmerged' (the PEFT model with its adapter unmerged on the hot path: the slow reference the
merged double copy is measured against), 'fa4' ('graphs' with FlashAttention-4 running every prefill:
fa4_prefill 'on', so a host where FA4 cannot run fails the job instead of timing Triton; its jobs run
in the fa4 environment group). spec.options are EngineConfig overrides.

ignore_eos follows vLLM: EOS does not stop a completion but may be sampled (hf_generate instead
forbids it through min_new_tokens).
"""
import gc
import time
from dataclasses import replace

import torch

from ..core.workload import spread_rows
from . import hf_model, variant_reason

REQUIRES = ("torch", "transformers")
NEEDS_GPU = False
VARIANTS = ("graphs", "eager", "peft_unmerged", "fa4")
# what a variant imports beyond REQUIRES (its version is part of the skip re-check), and the environment group
# (envs/GROUP.yaml) its jobs run in: flash-attn-4 needs a newer nvidia-cutlass-dsl than vLLM pins
VARIANT_REQUIRES = {"fa4": ("flash-attn-4", "install the fa4 environment group (envs/fa4.yaml; pip install "
                                            "flash-attn-4[cu13]), Hopper or Blackwell GPUs")}
ENV_GROUPS = {"fa4": "fa4"}
RETARGET = True  # one generator serves a job's cells (retarget), built once
PER_REQUEST_LENGTHS = True
LOGPROBS = True  # row_logprobs: the sampled tokens' logprobs, for the mismatch job


def unavailable(variant, gpu_count):
    if variant in ("graphs", "fa4") and gpu_count == 0:
        return (f"flex variant {variant!r} captures CUDA graphs and needs a CUDA GPU; none is visible: run on a "
                f"GPU host with --resources gpu=1 (variant 'eager' runs on CPU)")
    if reason := variant_reason(VARIANT_REQUIRES, variant):
        return reason
    if variant == "peft_unmerged":
        from ..core import envinfo

        if envinfo.version("peft") is None:
            return "flex variant 'peft_unmerged' needs peft; install it (core environment) and rerun"
    return None


def engine_config(spec):
    from ..engine import EngineConfig

    graphs = spec.variant != "eager" and str(spec.device).startswith("cuda")
    options = dict(spec.options)
    if spec.variant == "fa4":  # FA4 or a failed job (fa4.Unavailable), never a silent fall back to Triton
        options["fa4_prefill"] = "on"
    # each cell captures the sampling path it runs (Generator.prepare): a job of greedy cells captures no top-k graphs
    return EngineConfig.from_options(options, max_batch=spec.batch_size, max_seq_len=spec.max_seq_len,
                                     cuda_graphs=graphs, capture_all=False)


def build_engine(spec):
    from ..engine import Engine

    cfg = engine_config(spec)
    if spec.variant == "peft_unmerged":
        return Engine(hf_model.load_model(spec), replace(cfg, lora_merge=False), owns_weights=True)
    return Engine.from_pretrained(spec.model_dir, cfg, adapter_dir=spec.adapter_dir, device=spec.device,
                                  dtype=getattr(torch, spec.dtype))


class Generator:
    def __init__(self, spec, engine=None):
        self.spec = spec
        self.engine = engine if engine is not None else build_engine(spec)

    def retarget(self, spec) -> bool:
        """The next cell of the job: the same engine while it fits the cell's batch and sequence length."""
        from . import same_engine

        cfg = self.engine.config
        if not (same_engine(self.spec, spec) and spec.fits(cfg.max_batch) and spec.max_seq_len <= cfg.max_seq_len):
            return False
        self.spec = spec
        return True

    def prepare(self, spec) -> None:
        """Capture this cell's sampling path in every bucket its batch can shrink to (rows finish at different
        steps under EOS or a trace), so that no graph is captured inside a timed round."""
        runner = self.engine.runner
        if not runner.graphs_on:
            return
        smp = spec.sampling
        how = runner.mode(smp.temperature, smp.top_k, smp.top_p, smp.min_p)
        top = runner.bucket(min(spec.batch_size, self.engine.config.max_batch))
        missing = [b for b in runner.buckets if b <= top and (b, how) not in runner.graphs]
        if missing:
            runner.capture(missing, how)

    def generate(self, prompts, n, max_new_tokens=None):
        s, e = self.spec, self.engine
        before, t0 = dict(e.timings), time.perf_counter()
        outs = e.generate(prompts, s.sampling, s.max_new_tokens if max_new_tokens is None else list(max_new_tokens),
                          n=n, ignore_eos=s.ignore_eos, eos_token_id=s.eos_token_id)
        self.last_call = split(time.perf_counter() - t0, {k: e.timings[k] - before[k] for k in before})
        self.last_outs = outs  # the round's own, for row_logprobs
        return [o.token_ids for o in outs]

    def row_logprobs(self, rows: list[int]) -> list[list[float]]:
        """The last call's logprobs of its own tokens, per row asked for: log_softmax(logits / T)[token] (T = 1 for
        greedy), the policy logprob TRL's loss compares."""
        return [list(self.last_outs[i].logprobs) for i in rows]

    def memory(self):
        return {"reserved": self.engine.memory()["reserved"]}

    def prefill_kernel(self) -> dict:
        """FA4 (flex_attention BACKEND='FLASH') or flex's Triton kernel, and the guard's reason (fa4.why_not)."""
        why = self.engine.runner.fa4_reason
        return {"kernel": "fa4" if why is None else "flex-triton", "reason": why}

    def info(self):
        """The engine's own memory split and the knobs that decide its speed."""
        mem, cfg, runner = self.engine.memory(), self.engine.config, self.engine.runner
        bucket = runner.bucket(min(self.spec.batch_size if self.spec else cfg.max_batch, cfg.max_batch))

        def splits(b):  # with options per batch size, each bucket was captured with its own
            opts = cfg.decode_options_for(b) if runner.per_bucket else None
            return max(runner.kv_splits(b, p.kv_heads, opts) for p in runner.plan)

        return {"memory_gb": {"kv_pool": mem["kv_pool_gb"], "weights_on_device": mem["weights_gb"],
                              "weights_on_host": mem.get("host_weights_gb", 0.0)},
                "num_pages": runner.pages.num_pages, "max_batch": cfg.max_batch, "max_seq_len": cfg.max_seq_len,
                "page_size": cfg.page_size, "buckets": list(runner.buckets),
                "cuda_graphs": runner.graphs_on,
                # graphs captured so far and the wall their capture took (compiles included): the build's share
                "graphs_captured": len(runner.graphs), "capture_s": round(runner.capture_s, 3),
                "fused_projections": runner.fused[0][0] is not None,
                # the options this cell's batch bucket runs (captured) with
                "decode_kernel_options": cfg.decode_options_for(bucket),
                # what ran the prefill attention: FA4, or flex's Triton kernel and why (fa4.why_not)
                "fa4_prefill": "FLASH" if (why := runner.fa4_reason) is None else f"triton ({why})",
                # per head dim, the Triton tiles that replaced the ones asked for, to fit shared memory (smem.fit)
                "kernel_tiles": runner.kernel_tiles(),
                # per bucket, the most KV splits a layer's decode kernel runs at; > 1: every page a partial block
                "decode_kv_splits": {str(b): splits(b) for b in runner.buckets},
                "last_round": getattr(self, "last_call", None),
                "bandwidth": self.bandwidth()}

    def bandwidth(self) -> dict:
        """The last round's decode bandwidth against this device's copy rate, measured after the timed rounds."""
        from ..host import copy_rate

        last = getattr(self, "last_call", None) or {}
        achieved, ceiling = last.get("decode_gb_per_s"), copy_rate.measure(self.engine.runner.device)
        return {"decode_gb_per_s": achieved, "weights_gb_per_step": round(self.engine.step_weight_bytes / 1e9, 3),
                "copy_gb_per_s": ceiling,
                "of_copy_rate": round(achieved / ceiling, 3) if achieved and ceiling else None}

    def check_round(self, spec, prompts: list[list[int]], outputs: list[list[int]], rows: int = 4) -> dict | None:
        """The timed configuration itself against HF: `rows` completions of the cell's last timed round (its bucket's
        own graphs, captured with the tile table they replay, over the whole generation length), spread over the
        batch (first, last and between), each judged token by token against HF float32 on the same tokens
        (correctness.judge), the tolerances widened by HF's own error in the job's dtype as the gate's is.

        Greedy cells: each token's argmax and logprob. Sampled cells: each token's logprob at the cell's temperature
        alone (a sampled token has no argmax to match), what a page table or tile that reads the wrong K/V moves.
        None where the engine's logprobs are not log_softmax(logits / T): option logprobs 'processed' under a
        truncating sampler renormalises over the kept tokens. The references are loaded for the check and freed
        after it, so that no cell's peak memory holds them."""
        from ..engine import correctness

        smp = spec.sampling
        truncates = smp.top_k > 0 or smp.top_p < 1 or smp.min_p > 0
        if not outputs or (not smp.greedy and truncates and self.engine.config.logprobs == "processed"):
            return None
        t0 = time.perf_counter()
        cuda = torch.cuda.is_available()
        if cuda:  # what the check itself holds on top of the engine (the prefill case's 8k-token rows: issue 50)
            torch.cuda.reset_peak_memory_stats()
            held_gb = torch.cuda.memory_allocated() / 1e9
        picked = spread_rows(len(outputs), rows)
        n = spec.num_generations
        ref, ref32 = references(spec)
        result = correctness.judge(ref, [prompts[i // n] for i in picked], [outputs[i] for i in picked],
                                   correctness.LOGIT_TOL[spec.dtype], fp32_reference=ref32,
                                   logprobs=self.row_logprobs(picked), logprob_tol=correctness.LOGPROB_TOL[spec.dtype],
                                   sampled_at=None if smp.greedy else smp.temperature)
        del ref, ref32
        memory = {"engine_gb": round(held_gb, 2), "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2)} \
            if cuda else {}
        free_cuda()
        bad = result["first_mismatch"]
        # a round of more completions than slots decoded its full steps in the largest bucket
        bucket = self.engine.runner.bucket(min(len(outputs), self.engine.config.max_batch))
        return {"passed": result["passed"], "rows": picked, "bucket": bucket,
                "judged_by": "argmax+logprob" if smp.greedy else f"logprob at T={smp.temperature:g}",
                "tokens": result["greedy_tokens"], "exact": result["greedy_exact"], "ties": len(result["greedy_ties"]),
                "mismatches": len(result["greedy_mismatches"]),
                "first_mismatch": None if bad is None else {**bad, "row": picked[bad["prompt"]]},
                "logit_tol": result["logit_tol"], "max_logprob_error": result.get("max_logprob_error"),
                "logprob_tol": result.get("logprob_tol"), "reference": result.get("reference", spec.dtype),
                "seconds": round(time.perf_counter() - t0, 3), **memory}

    def abort(self):
        """Drop what a failed call left queued or running (its pages and slots come back)."""
        self.engine.abort()

    def close(self):
        self.engine = None
        free_cuda()


def load(spec):
    return Generator(spec)


def references(spec) -> tuple[object, object | None]:
    """(HF in the job's dtype, HF in float32 or None for a float32 job) on the engine's weights: hf_generate's
    model, with a LoRA adapter merged by PEFT unless the variant runs it unmerged (merging rounds W + BA to the
    weight dtype once, which is part of the engine's configuration, not an error of its attention/KV/sampling
    path)."""
    def reference(dtype):
        model = hf_model.load_model(replace(spec, dtype=dtype))
        if spec.adapter_dir and spec.variant != "peft_unmerged":
            model = model.merge_and_unload()
        return model

    return reference(spec.dtype), reference("float32") if spec.dtype != "float32" else None


def split(wall: float, d: dict) -> dict:
    """Where one generate call's wall went: prefill passes, decode chunks (graph replays up to the
    chunk's host sync) and the rest (scheduling, page tables, per-token bookkeeping on the host)."""
    steps = d["decode_steps"]
    return {"wall_s": round(wall, 4), "prefill_s": round(d["prefill_s"], 4), "prefill_tokens": d["prefill_tokens"],
            "prefill_passes": d["prefill_passes"],
            "decode_s": round(d["decode_s"], 4), "decode_steps": steps, "decode_chunks": d["decode_chunks"],
            "step_ms": round(1e3 * d["decode_s"] / steps, 4) if steps else None,
            # rows in flight per decode step (rows past an EOS within a chunk included: they were decoded)
            "rows_per_step": round(d["decode_rows"] / steps, 3) if steps else None,
            # weights + K/V a decode must read (engine/traffic.py) over its wall: the achieved bandwidth
            "decode_gb": round(d["decode_bytes"] / 1e9, 3),
            "decode_gb_per_s": round(d["decode_bytes"] / 1e9 / d["decode_s"], 1) if d["decode_s"] else None,
            "host_other_s": round(wall - d["prefill_s"] - d["decode_s"], 4)}


def gate(spec, gen: Generator, new_tokens: int = 16) -> dict:
    """Correctness gate before any speed, on the engine the timed rounds then use (load(spec)'s),
    against HF on the same weights (`references`); each greedy cell's timed round is judged again after
    it (Generator.check_round).

    Below float32 the judge is HF in float32 on the same weights, with the tolerance widened by HF's
    own error in the job's dtype (correctness.check's fp32_reference): a deep random model (Gemma-4
    E2B's shape) amplifies bf16 roundings until HF's bf16 logits are as far from its fp32 logits as
    the engine's."""
    from ..engine import correctness

    engine = gen.engine
    ref, ref32 = references(spec)
    cfg = engine.config
    prompts = correctness.gate_prompts(engine.runner.vocab, cfg.page_size)
    prompts = [p for p in prompts if len(p) + new_tokens <= cfg.max_seq_len] or [prompts[-1][:4]]
    result = correctness.check(engine, ref, prompts, new_tokens, correctness.LOGIT_TOL[spec.dtype],
                               fp32_reference=ref32)
    del ref, ref32
    free_cuda()
    return result


def free_cuda() -> None:
    """Give back what dropped models held: collected first, since a model caught in a reference cycle keeps its
    CUDA tensors until the collector runs, where the next check's references would load on top of them."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
