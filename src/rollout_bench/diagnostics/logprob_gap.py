"""Where the sampler-vs-trainer logprob gap comes from.

TRL's importance-sampling correction reads any difference between the engine's sampled-token logprobs
and the trainer's as off-policy. In bf16 two forward passes that are both correct still differ, so the
gap alone cannot say whether the engine is wrong. This measures, on the same weights and the same
sampled completions, every forward against an fp32 one and the trainer's forward against itself with
another attention kernel (the bf16 noise floor):

    python -m rollout_bench.diagnostics.logprob_gap --model qwen3-4b --out gap.json

Forwards: `engine` (the logprobs the sampler returned), `hf_sdpa` (HF in the model's dtype with SDPA
attention, as the trainer runs it, projected like TRL's loss head: fp32 output), `hf_eager` (the same
with eager attention) and `fp32` (HF on an fp32 copy of the weights). Each is scored at the sampling
temperature and at T = 1. With `--lora-rank R` the model is a PeftModel with a random adapter, as in
GRPO: the engine samples from its merged bf16 copy, the HF forwards run PEFT's unmerged adapter.
"""
import argparse
import copy
import json
import time

import torch

from ..core import atomic
from ..core.workload import LORA_TARGETS, SAMPLING_PRESETS, Sampling
from ..engine import Engine, EngineConfig
from ..engine.correctness import reference_logits
from . import random_model

PAIRS = (("engine", "hf_sdpa"), ("hf_eager", "hf_sdpa"), ("engine", "fp32"), ("hf_sdpa", "fp32"),
         ("hf_eager", "fp32"))


def completion_logits(model, prompt: list[int], completion: list[int], attn: str) -> torch.Tensor:
    """Logits z [T_c, V] float32 that predict each completion token, from one forward of prompt +
    completion with attention kernel `attn` (for this call only)."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    before = lm.config._attn_implementation
    lm.set_attn_implementation(attn)
    try:
        ids = torch.tensor([prompt + completion], device=lm.device)  # [1, P + T_c]
        return reference_logits(model, ids, start=len(prompt) - 1)[:-1]
    finally:
        lm.set_attn_implementation(before)


def summarize(d: torch.Tensor) -> dict:
    """Per-token differences a - b [N] -> the figures the report keeps."""
    a = d.abs().double()
    q = torch.quantile(a, torch.tensor([0.5, 0.99], dtype=a.dtype))
    return {"mean_abs": a.mean().item(), "median_abs": q[0].item(), "p99_abs": q[1].item(),
            "max_abs": a.max().item(), "mean_signed": d.double().mean().item()}


def measure(engine, model, prompts: list[list[int]], sampling: Sampling, new_tokens: int,
            fp32_model=None) -> dict:
    """Sample with the engine, then score its tokens with every forward; model: the HF model the engine
    was built from (the trainer's view of the weights); fp32_model: an fp32 copy, or None to skip it."""
    assert sampling.temperature > 0, "the gap is about sampled tokens: give a temperature"
    outs = engine.generate(prompts, sampling, new_tokens, ignore_eos=True)
    temps = sorted({sampling.temperature, 1.0})
    forwards = {"hf_sdpa": (model, "sdpa"), "hf_eager": (model, "eager")}
    if fp32_model is not None:
        forwards["fp32"] = (fp32_model, "sdpa")
    lp = {t: {k: [] for k in ("engine", *forwards)} for t in temps}
    for p, out in zip(prompts, outs):
        lp[sampling.temperature]["engine"].append(torch.tensor(out.logprobs, dtype=torch.float32))
        for name, (m, attn) in forwards.items():
            z = completion_logits(m, p, out.token_ids, attn)  # [T_c, V], one forward for every temperature
            tok = torch.tensor(out.token_ids, device=z.device)[:, None]  # [T_c, 1]
            for t in temps:  # log_softmax(z / T)[token], as TRL's loss head
                lp[t][name].append(torch.log_softmax(z / t, -1).gather(1, tok)[:, 0].cpu())
    result = {"n_sequences": len(outs), "n_tokens": sum(len(o.token_ids) for o in outs), "temperatures": {}}
    for t in temps:
        got = {k: torch.cat(v) for k, v in lp[t].items() if v}
        result["temperatures"][str(t)] = {f"{a}~{b}": summarize(got[a] - got[b])
                                          for a, b in PAIRS if a in got and b in got}
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3-4b", help="a config under config/models (random weights)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--sampling", default="equivalence",
                    choices=[k for k, v in sorted(SAMPLING_PRESETS.items()) if v["temperature"] > 0])
    ap.add_argument("--lora-rank", type=int, default=0, help="0: no adapter")
    ap.add_argument("--no-fp32", action="store_true", help="skip the fp32 copy (it needs 4 bytes a weight)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    dtype, device = (torch.bfloat16, "cuda") if cuda else (torch.float32, "cpu")
    t0 = time.perf_counter()
    model = random_model.build(a.model, seed=0, dtype=dtype, device=device)
    if a.lora_rank:
        from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

        state = random_model.lora_state(model, a.lora_rank)
        model = get_peft_model(model, LoraConfig(r=a.lora_rank, lora_alpha=2 * a.lora_rank, lora_dropout=0.0,
                                                 target_modules=list(LORA_TARGETS))).eval()
        set_peft_model_state_dict(model, state)
    fp32_model = None if a.no_fp32 else copy.deepcopy(model).float()
    vocab = model.config.vocab_size  # a PeftModel forwards config to its base
    prompts = random_model.prompts(a.prompts, vocab, 128, 256, seed=0)
    # shared, not owned: the engine reads the weights the HF forwards read, as in GRPO
    engine = Engine(model, EngineConfig(max_batch=a.prompts, max_seq_len=256 + a.new_tokens, capture_all=False))
    sampling = Sampling.from_config(a.sampling, 3407)
    report = {"env": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if cuda else None,
                      "dtype": str(dtype).removeprefix("torch.")},
              "args": vars(a), "sampling": sampling.to_dict(),
              **measure(engine, model, prompts, sampling, a.new_tokens, fp32_model),
              "wall_s": round(time.perf_counter() - t0, 1)}
    atomic.write_text(a.out, json.dumps(report, indent=1, default=str))
    for t, pairs in report["temperatures"].items():
        for k, v in pairs.items():
            print(f"T={t:<4} {k:18s} mean {v['mean_abs']:.4g}  p99 {v['p99_abs']:.4g}  max {v['max_abs']:.4g}  "
                  f"signed {v['mean_signed']:+.3g}")


if __name__ == "__main__":
    main()
