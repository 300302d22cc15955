"""GPU self-check and benchmark of the flex engine on the Qwen3-4B shape with random bf16 weights.

    python -m rollout_bench.diagnostics.gpu_check --out gpu_check.json

Phases (each recorded in the JSON, a failing one does not stop the rest): greedy gate vs HF,
decode timing for B in (8, 64, 256) greedy, a per-step breakdown at B=64 (torch.profiler),
LoRA r32 drift cycles (sha256), B=64 + LoRA, 64 prompts x n=4 + LoRA with equivalence sampling,
and the merged-LoRA gate vs PEFT unmerged. Workload: prompts of 128-256 random tokens, 512 new
tokens, ignore_eos. bf16 greedy disagreements are judged against HF's logits on the engine's own
continuation; a disagreement whose logit gap is within the tolerance is reported as a tie.
"""
import argparse
import json
import os
import time
import traceback
from dataclasses import replace

import torch

from ..core.workload import LORA_TARGETS, SAMPLING_PRESETS, Sampling
from ..engine import Engine, EngineConfig, correctness, sampler
from ..engine.lora import sha256
from . import random_model
from .decode_sweep import device_ms, step_sweep

T0 = time.perf_counter()


def log(msg):
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


def gb(x):
    return round(x / 1e9, 3)


CUDA = torch.cuda.is_available()  # False only for a CPU dry run of this script (--model qwen3-tiny)


def sync():
    if CUDA:
        torch.cuda.synchronize()


def peak_memory():
    if not CUDA:
        return {}
    return {"peak_allocated_gb": gb(torch.cuda.max_memory_allocated()),
            "peak_reserved_gb": gb(torch.cuda.max_memory_reserved())}


def timed(engine, prompts, sampling, new_tokens, n=1):
    """One warm-up pass (4 tokens: same buckets, so lazy graph capture happens here) then one timed pass."""
    engine.generate(prompts, sampling, 4, n=n, ignore_eos=True)
    sync()
    before_gb = gb(torch.cuda.memory_allocated()) if CUDA else None
    if CUDA:
        torch.cuda.reset_peak_memory_stats()
    before = dict(engine.timings)
    t = time.perf_counter()
    outs = engine.generate(prompts, sampling, new_tokens, n=n, ignore_eos=True)
    sync()
    wall = time.perf_counter() - t
    d = {k: engine.timings[k] - before[k] for k in before}
    tokens = sum(len(o.token_ids) for o in outs)
    assert tokens == len(prompts) * n * new_tokens
    return {
        "sequences": len(prompts) * n, "new_tokens": new_tokens, "wall_s": round(wall, 3), "decoded_tokens": tokens,
        "decode_tps": round(tokens / wall, 1),
        "decode_only_tps": round(d["decode_rows"] / d["decode_s"], 1),
        "step_ms": round(1e3 * d["decode_s"] / d["decode_steps"], 3),
        "prefill_s": round(d["prefill_s"], 3), "prefill_tokens": d["prefill_tokens"],
        "allocated_before_gb": before_gb, **peak_memory(), "engine": engine.memory(),
        "sample": outs[0].token_ids[:8], "sample_logprobs": [round(x, 3) for x in outs[0].logprobs[:4]],
    }


GEMM_NAMES = ("gemm", "gemv", "cutlass", "nvjet", "xmma", "cublas", "sm90_", "splitk", "matmul")


def kernel_times(fn) -> dict[str, float]:
    """{kernel name: microseconds} of one call of fn, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])) as prof:
        fn()
        sync()
    out = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out[e.name] = out.get(e.name, 0.0) + e.time_range.elapsed_us()
    return out


def breakdown(engine, prompts, new_tokens) -> dict:
    """Where one decode step's time goes at len(prompts) rows, mid-generation (~160 tokens in)."""
    runner = engine.runner
    engine.submit(prompts, Sampling(), new_tokens, ignore_eos=True)
    for _ in range(min(20, new_tokens // runner.cfg.decode_chunk - 1)):
        engine.step()
    running = list(engine.scheduler.running)
    b = len(running)
    bucket = next(x for x in runner.buckets if x >= b)
    runner.set_rows(running, bucket)
    graph = runner.graphs.get((bucket, "greedy"))
    res = {"rows": b}
    if graph is not None:
        res["graph_step_ms"] = round(device_ms(graph.replay, runner.cfg.decode_chunk), 3)
    runner.set_rows(running, bucket)
    res["eager_step_ms"] = round(device_ms(lambda: runner.decode_step(bucket, "greedy"), 1), 3)
    runner.set_rows(running, bucket)
    step = kernel_times(lambda: runner.decode_step(bucket, "greedy"))
    runner.set_rows(running, bucket)
    mask, _ = runner.decode_inputs(bucket, runner.plan[0].window, runner.q_rows[0])
    q = torch.randn(bucket, runner.lm.config.num_attention_heads, 1, runner.layers[0].self_attn.head_dim,
                    device=runner.device, dtype=runner.dtype)
    k_cache, v_cache = runner.kv.layers[0]
    # layer 0's call as the step makes it (a GQA group folded where decode folds it)
    attn_names = set(kernel_times(lambda: runner.attend(q, k_cache, v_cache, mask, 0)))
    logits = torch.randn(bucket, runner.vocab, device=runner.device)
    params = sampler.Params(runner.temp[:bucket], runner.top_k[:bucket], runner.top_p[:bucket],
                            runner.min_p[:bucket], runner.seed[:bucket])
    pos = runner.pos[:bucket]
    sample_names = set(kernel_times(lambda: sampler.sample(logits, params, pos, "greedy", 64)))
    res["attention_kernels"] = sorted(attn_names)
    cats = {"attention": 0.0, "gemm": 0.0, "sampling": 0.0, "other": 0.0}
    for name, us in step.items():
        low = name.lower()
        if name in attn_names:
            cats["attention"] += us
        elif any(g in low for g in GEMM_NAMES):
            cats["gemm"] += us
        elif name in sample_names:
            cats["sampling"] += us
        else:
            cats["other"] += us
    res["kernel_ms"] = {k: round(v / 1e3, 3) for k, v in cats.items()}
    total = sum(cats.values()) / 1e3
    res["kernel_total_ms"] = round(total, 3)
    if "graph_step_ms" in res:
        res["host_and_gaps_ms"] = round(res["graph_step_ms"] - total, 3)
    res["top_kernels"] = [(n[:90], round(us / 1e3, 3)) for n, us in sorted(step.items(), key=lambda kv: -kv[1])[:12]]
    for kind in ("greedy", "temperature", "topk", "full"):
        ms = device_ms(lambda kind=kind: sampler.sample(logits, params, pos, kind, 64), 10)
        res[f"sampler_{kind}_ms"] = round(ms, 3)
    engine.abort()
    return res


class Check:
    """The run's shared state: arguments, report (saved after every phase), model and settings."""

    def __init__(self, args):
        self.args, self.new = args, args.new_tokens
        self.report = {"env": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if CUDA else None,
                               "capability": torch.cuda.get_device_capability(0) if CUDA else None},
                       "args": vars(args), "phases": {}}
        t = time.perf_counter()
        self.device = "cuda" if CUDA else "cpu"
        self.model = random_model.build(args.model, seed=0, dtype=torch.bfloat16 if CUDA else torch.float32,
                                        device=self.device)
        self.vocab = self.model.config.vocab_size
        self.report["model_init_s"] = round(time.perf_counter() - t, 1)
        log(f"model built: {sum(p.numel() for p in self.model.parameters()) / 1e9:.2f}B params")
        self.batches = [int(x) for x in args.batches.split(",")]
        self.max_seq = 256 + self.new
        # fuse: the model is ours here (the HF reference of the gates reads the same values through views)
        self.cfg = EngineConfig(**{"max_batch": max(self.batches), "max_seq_len": self.max_seq,
                                   "capture_all": False, "fuse_projections": True, **json.loads(args.options)})
        self.tol = correctness.LOGIT_TOL["bfloat16" if CUDA else "float32"]
        self.engine = None

    def save(self):
        tmp = self.args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.report, f, indent=1, default=str)
        os.replace(tmp, self.args.out)

    def phase(self, name, fn):
        log(f"{name} ...")
        t = time.perf_counter()
        try:
            self.report["phases"][name] = fn()
        except Exception as e:  # noqa: BLE001 -- keep going: later phases still say something
            self.report["phases"][name] = {"error": repr(e), "traceback": traceback.format_exc()[-3000:]}
        self.report["phases"][name + "_s"] = round(time.perf_counter() - t, 1)
        log(f"{name}: {json.dumps(self.report['phases'][name], default=str)[:1500]}")
        self.save()

    def build(self, cfg, adapter=None):
        self.engine = None
        if CUDA:
            torch.cuda.empty_cache()
        t = time.perf_counter()
        self.engine = Engine(self.model, cfg)
        res = {"setup_s": round(time.perf_counter() - t, 1)}
        if adapter is not None:
            t = time.perf_counter()
            self.engine.refresh_lora(adapter, 2.0)
            sync()
            res["refresh_ms"] = round(1e3 * (time.perf_counter() - t), 1)
        res.update(memory=self.engine.memory(), num_pages=self.engine.runner.pages.num_pages,
                   allocated_gb=gb(torch.cuda.memory_allocated()) if CUDA else None)
        return res

    def gate_prompts(self):
        return [p for p in correctness.gate_prompts(self.vocab, self.cfg.page_size)
                if len(p) + 16 <= self.max_seq]  # a short --new-tokens dry run drops the longest

    def gate(self):
        return correctness.check(self.engine, self.model, self.gate_prompts(), 16, self.tol)

    def prompts(self, n, seed):
        return random_model.prompts(n, self.vocab, seed=seed)


def base_phases(c: Check):
    """No LoRA: gate, the batch sweep, the per-step breakdown."""
    c.phase("setup", lambda: c.build(c.cfg))
    if c.engine is None:
        return
    c.phase("gate_greedy", c.gate)
    first, *rest = c.batches
    c.phase(f"greedy_B{first}", lambda: timed(c.engine, c.prompts(first, first), Sampling(), c.new))
    c.phase("breakdown_B64", lambda: breakdown(c.engine, c.prompts(64, 99), c.new))
    for b in rest:
        c.phase(f"greedy_B{b}", lambda b=b: timed(c.engine, c.prompts(b, b), Sampling(), c.new))


def lora_phases(c: Check):
    """LoRA r32 merged into the double copy: speed, GRPO group, drift, gates."""
    adapter = random_model.lora_state(c.model, 32)
    group = c.prompts(64, 7)
    P = c.cfg.page_size
    # the GRPO group's own need (its full prompt pages once, then 4 private tails each) plus slack,
    # rather than room for 256 unshared sequences of max_seq_len
    need = sum(len(p) // P + 4 * (-(-(len(p) + c.new) // P) - len(p) // P) for p in group)
    cfg = replace(c.cfg, lora_targets=LORA_TARGETS, num_pages=1 + max(need, 64 * -(-c.max_seq // P)) + 16)
    c.phase("setup_lora", lambda: c.build(cfg, adapter))
    engine = c.engine
    if engine is None:
        return
    if c.args.sweep:
        c.phase("step_sweep_B64", lambda: step_sweep(engine, c.prompts(64, 99), c.new))
        best = c.report["phases"]["step_sweep_B64"].get("best")
        if best:  # graphs captured so far used the old options
            engine.runner.decode_opts = {**(engine.runner.decode_opts or {}), **best}
            engine.runner.graphs.clear()
    c.report["decode_kernel_options"] = engine.runner.decode_opts
    c.phase("lora_greedy_B64", lambda: timed(engine, c.prompts(64, 64), Sampling(), c.new))
    eq = Sampling(**SAMPLING_PRESETS["equivalence"], seed=3407)
    c.phase("lora_group_64x4_equivalence", lambda: timed(engine, group, eq, c.new, n=4))

    def drift():
        dc = engine.lora
        base0, merged0 = sha256(dc.pristine.items()), sha256(dc.live.items())
        g = torch.Generator(device=c.device).manual_seed(1)
        for _ in range(c.args.drift_cycles):  # a training step's worth of change each time
            engine.refresh_lora({k: v + (0.01 * torch.randn(v.shape, device=c.device, generator=g)).to(v.dtype)
                                 for k, v in adapter.items()}, 2.0)
        engine.refresh_lora(adapter, 2.0)
        return {"cycles": c.args.drift_cycles, "pristine_unchanged": sha256(dc.pristine.items()) == base0,
                "merged_bit_identical": sha256(dc.live.items()) == merged0, "pristine_sha256": base0[:16]}

    if c.args.drift_cycles:
        c.phase("lora_drift", drift)

    def gate_same_weights():
        """HF on the engine's merged weights (swapped into the base model, then restored)."""
        saved = {}
        for name, w in engine.lora.live.items():
            mod = c.model.get_submodule(name)
            saved[name] = mod.weight
            mod.weight = torch.nn.Parameter(w, requires_grad=False)  # shares the engine's storage
        try:
            return c.gate()
        finally:
            for name, w in saved.items():
                c.model.get_submodule(name).weight = w

    def vs_unmerged():
        """Informational: merged bf16 weights vs PEFT's unmerged adapter (adds the merge rounding)."""
        from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

        ref = get_peft_model(c.model, LoraConfig(r=32, lora_alpha=64, target_modules=list(LORA_TARGETS)))
        set_peft_model_state_dict(ref, adapter)
        return correctness.check(engine, ref, c.gate_prompts(), 16, c.tol)

    c.phase("gate_lora_merged_weights", gate_same_weights)
    if not c.args.skip_unmerged:
        c.phase("lora_vs_peft_unmerged", vs_unmerged)


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="qwen3-4b")
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--batches", default="64,256,8")
    ap.add_argument("--drift-cycles", type=int, default=3, help="0 skips the drift check")
    ap.add_argument("--skip-unmerged", action="store_true", help="skip the merged-vs-PEFT-unmerged comparison")
    ap.add_argument("--options", default="{}", help="EngineConfig overrides, JSON")
    ap.add_argument("--skip-base", action="store_true", help="only the LoRA engine's phases")
    ap.add_argument("--sweep", action="store_true", help="sweep decode attention options on the LoRA engine first")
    c = Check(ap.parse_args())
    if not c.args.skip_base:
        base_phases(c)
    lora_phases(c)
    from torch._dynamo.utils import counters

    c.report["dynamo"] = {k: dict(v) for k, v in counters.items() if k in ("stats", "recompiles", "graph_break")}
    c.report["total_s"] = round(time.perf_counter() - T0, 1)
    c.save()
    log("done")


if __name__ == "__main__":
    main()
