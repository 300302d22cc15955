"""Mismatch beside speed: an engine's logprobs of its own sampled tokens against the trainer's on those tokens.

TRL's importance-sampling correction reads any gap between the rollout engine's logprobs and the trainer's
forward as off-policy. A generation cell keeps, of its last timed round, a few rows spread over the batch with
the logprobs the engine returned for them (generation/logprob_sample.py: engines that return logprobs,
`row_logprobs`); the model's mismatch job (`run`, one per model) then scores every cell's sample with the trainer:
the HF model in the cells' dtype (bf16 on the GPU), the LoRA adapter unmerged through PEFT as GRPO trains it, its
logits projected in float32 (as TRL's cast_lm_head_to_fp32 does; TRL's default bf16 head would add its own
rounding), then log_softmax(logits / T). Per cell:

    mean_abs, p99_abs, max_abs    |logprob_engine - logprob_trainer| per completion token (nats)
    kl_k3                         KL(engine || trainer) per token, the k3 estimate on the engine's tokens:
                                  exp(d) - 1 - d, d = trainer - engine (>= 0), as grpo/importance.py logs it
    mean_signed                   trainer - engine per token

The engine's logprob is the one it hands to TRL: flex's policy logprob log_softmax(z / T); vLLM's processed one
(TRL's logprobs_mode), which under top-k/top-p is renormalised over the kept tokens, a gap TRL sees as well.
"""
import time

import torch

from ..core import atomic, stats
from .logprob_sample import ROWS


@torch.no_grad()
def trainer_logprobs(model, prompts: list[list[int]], tokens: list[list[int]], temperature: float) -> list[torch.Tensor]:
    """The trainer's log_softmax(logits / T)[token] of each completion token, per row [T_c] float32, from one
    forward of prompt + completion."""
    from ..engine.correctness import reference_logits

    dev = next(model.parameters()).device
    out = []
    for p, c in zip(prompts, tokens):
        ids = torch.tensor([list(p) + list(c)], device=dev)  # [1, P + T_c]
        z = reference_logits(model, ids, start=len(p) - 1)[:-1]  # [T_c, V] float32
        tok = torch.tensor(c, device=dev)[:, None]  # [T_c, 1]
        out.append(torch.log_softmax(z / temperature, -1).gather(1, tok)[:, 0].cpu())
    return out


def summarize(engine: list[list[float]], trainer: list[torch.Tensor]) -> dict:
    """Per-token engine and trainer logprobs of the same rows -> the cell's mismatch figures."""
    d = torch.cat([t.double() - torch.tensor(e, dtype=torch.float64) for e, t in zip(engine, trainer)])  # [N]
    if not d.numel():
        return {"rows": len(engine), "tokens": 0}
    a = d.abs()
    return {"rows": len(engine), "tokens": int(d.numel()), "mean_abs": a.mean().item(),
            "p99_abs": torch.quantile(a, 0.99).item(), "max_abs": a.max().item(),
            "kl_k3": (torch.expm1(d) - d).mean().item(), "mean_signed": d.mean().item()}


def score_cells(records: dict[str, dict], load_trainer) -> dict[str, dict]:
    """{stats path: record} -> {stats path: figures or {"reason": ...}}. load_trainer(workload) -> the trainer model
    for a cell's workload (dtype, device, LoRA or not); built once per distinct one, freed before the next."""
    out, groups = {}, {}
    for path, rec in records.items():
        smp = rec.get("logprob_sample") if rec.get("status") == "ok" else None
        if smp is None:
            why = rec.get("logprob_sample_error") or f"{rec.get('backend')} returned no logprobs"
            out[path] = {"reason": why if rec.get("status") == "ok" else f"the cell is {rec.get('status')}"}
            if rec.get("status") == "ok" and rec.get("logprob_sample_error"):
                out[path]["error"] = True  # the engine's logprob path broke: the job says so (run)
            continue
        wl = rec["workload"]
        groups.setdefault((wl["dtype"], wl["device"], wl["lora_rank"] > 0), []).append(path)
    for key, paths in groups.items():
        model = load_trainer(records[paths[0]]["workload"])
        for path in paths:
            smp, t0 = records[path]["logprob_sample"], time.perf_counter()
            got = trainer_logprobs(model, smp["prompts"], smp["tokens"], smp["temperature"])
            out[path] = {**summarize(smp["logprobs"], got), "temperature": smp["temperature"],
                         "seconds": round(time.perf_counter() - t0, 3)}
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return out


def run(*, model: str, model_dir: str, adapter_dir: str | None, stats_paths: list[str], out: str) -> dict:
    """The mismatch job of one model: every cell's sample scored with the trainer -> one JSON (`cells` by path)."""
    from dataclasses import replace

    from ..backends import hf_model
    from ..core.workload import GenSpec, Sampling

    record = stats.base("mismatch", backend="trainer", variant="hf", model=model,
                        workload={"rows": ROWS, "trainer": "HF in the cells' dtype, sdpa, PEFT adapter unmerged",
                                  "cells": len(stats_paths)})
    t0 = record.pop("_t0")
    records = {p: stats.read_json(p) for p in stats_paths}
    base = GenSpec(model_dir=model_dir, adapter_dir=None, variant="hf", batch_size=1, max_new_tokens=1,
                   sampling=Sampling(), ignore_eos=True, eos_token_id=0, pad_token_id=0, max_prompt_tokens=1,
                   num_generations=1)

    def load_trainer(wl: dict):
        if wl["lora_rank"] > 0 and not adapter_dir:
            raise ValueError(f"a LoRA cell of {model} has a logprob sample but the job was given no --adapter")
        return hf_model.load_model(replace(base, dtype=wl["dtype"], device=wl["device"],
                                           adapter_dir=adapter_dir if wl["lora_rank"] > 0 else None))

    record["cells"] = score_cells(records, load_trainer)
    broken = [p for p, c in record["cells"].items() if c.get("error")]
    if broken:  # a smoke run must not read this as ok: the figures the table shows would be missing silently
        record = stats.failed(record, "engines that return logprobs kept no sample of these cells: "
                                      + "; ".join(f"{p}: {record['cells'][p]['reason']}" for p in broken))
    record["wall_s"] = round(time.perf_counter() - t0, 3)
    atomic.write_json(out, record)
    return record
