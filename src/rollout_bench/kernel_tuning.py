"""The autotune-replay pass: measure flex's decode kernel options once per model and GPU, replay them in
every flex job of that model.

`run` writes results/autotune/{model}/decode_opts.json: for each batch size it tuned, every
candidate's decode-step time and the winner (diagnostics/decode_sweep.py). At batch sizes of at most
skinny_gemm.MAX_ROWS rows it then times the decode GEMMs' tiles per weight shape against cuBLAS
(diagnostics/gemm_bench.tune_tiles) and, where some shape's tiles win, the whole decode step with and without them
(the attention winner's options, plus GEMM_TILES): the tiles are kept only if the step is faster by MIN_GAIN.
`options_for` picks the entry a flex job of batch size B replays: the smallest tuned batch >= B, else the
largest; `replay` merges it into a job's engine options (generation jobs, and GRPO's flex rollout for the rows one
rollout decodes). Without CUDA there is nothing to tune (the CPU path ignores kernel options): the file then says so
and replays nothing.
"""
import time

from . import atomic, stats


def run(*, model: str, model_dir: str, batch_sizes: list[int], prompt_tokens: list[int], max_new_tokens: int,
        dtype: str, out: str, seed: int = 0) -> dict:
    import torch

    from .diagnostics import decode_sweep, gemm_bench, random_model
    from .engine import Engine, EngineConfig, skinny_gemm

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


def options_for(tuned: dict, batch_size: int) -> dict:
    """Decode kernel options a flex job of `batch_size` sequences replays from a `run` record."""
    if tuned.get("status") != "ok" or not tuned.get("by_batch"):
        return {}
    sizes = sorted(int(b) for b in tuned["by_batch"])
    pick = next((b for b in sizes if b >= batch_size), sizes[-1])
    return dict(tuned["by_batch"][str(pick)]["best"])


def load(path) -> dict:
    return stats.read_json(path)  # a corrupt record fails naming the file


def replay(path, batch_size: int, options: dict) -> tuple[dict, dict]:
    """A flex job's decode kernel options with the record at `path` replayed for `batch_size` rows, unless
    `options` (the job's own engine options) set decode_kernel_options themselves; and what the job's stats
    record of it (`autotune`: the file, its status, what was tuned for that size and what was replayed)."""
    tuned = load(path)
    picked = options_for(tuned, batch_size)
    own = "decode_kernel_options" in options
    info = {"file": str(path), "status": tuned["status"], "replayed": {} if own else picked, "tuned": picked}
    if picked and not own:
        options = {**options, "decode_kernel_options": picked}
    return options, info


def table(tuned: dict) -> dict:
    """{batch size: options} of every batch a `run` record tuned (none where it did not run)."""
    if tuned.get("status") != "ok":
        return {}
    return {int(b): dict(r["best"]) for b, r in (tuned.get("by_batch") or {}).items()}


def replay_by_batch(path, batch_sizes: list[int], options: dict) -> tuple[dict, dict]:
    """One engine serving several batch sizes (a generation job's cells): the record's whole table as the engine's
    decode_kernel_options_by_batch, so that each decode bucket is captured with the entry `options_for` gives it,
    unless `options` set decode_kernel_options themselves; and per batch size what its cell's stats record of it
    (as `replay` gives it)."""
    tuned = load(path)
    own = "decode_kernel_options" in options or "decode_kernel_options_by_batch" in options
    info = {}
    for b in batch_sizes:
        picked = options_for(tuned, b)
        info[b] = {"file": str(path), "status": tuned["status"], "replayed": {} if own else picked, "tuned": picked}
    by_batch = table(tuned)
    if by_batch and not own:
        options = {**options, "decode_kernel_options_by_batch": by_batch}
    return options, info
