"""The autotune pass: measure flex's decode kernel options once per model and GPU (flex jobs replay them,
backends/kernel_tuning.py).

`run` writes results/autotune/{model}/decode_opts.json: for each batch size it tuned, every
candidate's decode-step time and the winner (decode_sweep.py). At batch sizes of at most
skinny_gemm.MAX_ROWS rows it then times the decode GEMMs' tiles per weight shape against cuBLAS
(gemm_bench.tune_tiles) and, where some shape's tiles win, the whole decode step with and without them
(the attention winner's options, plus GEMM_TILES): the tiles are kept only if the step is faster by MIN_GAIN.
Without CUDA there is nothing to tune (the CPU path ignores kernel options): the file then says so.
"""
import time

from ..core import atomic, stats


def run(*, model: str, model_dir: str, batch_sizes: list[int], prompt_tokens: list[int], max_new_tokens: int,
        dtype: str, out: str, seed: int = 0) -> dict:
    import torch

    from ..engine import Engine, EngineConfig, skinny_gemm
    from . import decode_sweep, gemm_bench, random_model

    # the stats contract's common fields (env, GPU ids, start time); not a stats file, so not validated
    record = stats.base("autotune", backend="flex", variant="graphs", model=model,
                        workload={"batch_sizes": sorted(batch_sizes), "prompt_tokens": prompt_tokens,
                                  "max_new_tokens": max_new_tokens, "dtype": dtype, "seed": seed})
    t0 = record.pop("_t0")
    record.update(candidates=[dict(c) for c in decode_sweep.CANDIDATES], min_gain=decode_sweep.MIN_GAIN, by_batch={},
                  gemm_candidates=[t.key() for t in skinny_gemm.TUNE_CANDIDATES])
    if not torch.cuda.is_available():
        record.update(status="skipped", reason="no CUDA device: flex's CPU path ignores kernel options, so flex "
                                               "jobs replay none; run on a GPU host to tune them")
    else:
        lo, hi = prompt_tokens
        cfg = EngineConfig(max_batch=max(batch_sizes), max_seq_len=hi + max_new_tokens, capture_all=False)
        engine = Engine.from_pretrained(model_dir, cfg, device="cuda", dtype=getattr(torch, dtype))
        record["setup_s"] = round(time.perf_counter() - t0, 3)
        for b in sorted(batch_sizes):
            # token ids only set the context lengths; values don't change kernel time
            prompts = random_model.prompts(b, engine.runner.vocab, lo, hi, seed=seed + b)
            rec = record["by_batch"][str(b)] = decode_sweep.step_sweep(engine, prompts, max_new_tokens)
            gemm = gemm_bench.tune_tiles(engine.runner, rec["bucket"])
            if gemm is not None:
                rec["gemm"] = gemm
            if gemm and gemm["tiles"]:
                with_tiles = {**rec["best"], "GEMM_TILES": gemm["tiles"]}
                step = decode_sweep.step_sweep(engine, prompts, max_new_tokens, candidates=(rec["best"], with_tiles))
                rec["gemm_step"] = {k: step[k] for k in ("step_ms", "rounds", "best")}
                rec["best"] = step["best"]
    record["wall_s"] = round(time.perf_counter() - t0, 3)
    atomic.write_json(out, record)
    return record
