"""The decode-profile job: where a flex decode step's time goes (diagnostics/step_profile.py), per batch size
of `decode_profile.batch_sizes`, on a model the flex jobs run, with the kernel options those jobs replay (the
autotune record's). On CUDA the timed steps are graph replays; without CUDA they are eager steps whose CPU ops
stand for kernels (the code path, not a speed).

A job of its own, not a field of the autotune record: every flex job reads that record, so an edit to the
diagnostic would re-run them all. Here it re-runs this job and the table alone.
"""
import time

from ..backends import kernel_tuning
from ..core import atomic, stats


def run(*, model: str, model_dir: str, batch_sizes: list[int], prompt_tokens: list[int], max_new_tokens: int,
        dtype: str, out: str, autotune: str | None = None, seed: int = 0) -> dict:
    import torch

    from ..engine import Engine, EngineConfig
    from . import random_model, step_profile

    cuda = torch.cuda.is_available()
    record = stats.base("decode_profile", backend="flex", variant="graphs" if cuda else "eager", model=model,
                        workload={"batch_sizes": sorted(batch_sizes), "prompt_tokens": prompt_tokens,
                                  "max_new_tokens": max_new_tokens, "dtype": dtype, "seed": seed})
    t0 = record.pop("_t0")
    tuned = kernel_tuning.load(autotune) if autotune else {}
    lo, hi = prompt_tokens
    record["by_batch"] = {}
    for b in sorted(batch_sizes):
        opts = kernel_tuning.options_for(tuned, b)
        cfg = EngineConfig(max_batch=b, max_seq_len=hi + max_new_tokens, capture_all=False,
                           decode_kernel_options=opts)
        engine = Engine.from_pretrained(model_dir, cfg, device="cuda" if cuda else "cpu", dtype=getattr(torch, dtype))
        # token ids only set the context lengths; values don't change kernel time
        prompts = random_model.prompts(b, engine.runner.vocab, lo, hi, seed=seed + b)
        record["by_batch"][str(b)] = {"decode_kernel_options": opts,
                                      **step_profile.profile(engine, prompts, max_new_tokens)}
        del engine
        if cuda:
            torch.cuda.empty_cache()
    record["wall_s"] = round(time.perf_counter() - t0, 3)
    atomic.write_json(out, record)
    return record
