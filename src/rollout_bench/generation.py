"""One generation job: build the backend, warm it up, time `rounds` rounds, write the stats."""
import json
import statistics
import time
from dataclasses import dataclass

from . import backends, completions, envinfo, isolation, kernel_tuning, stats
from .workload import GenSpec, Sampling


def spec_from_workload(wl: dict, model_dir: str, adapter_dir: str | None, variant: str,
                       eos_token_id: int, pad_token_id: int, max_prompt_tokens: int) -> GenSpec:
    return GenSpec(
        model_dir=model_dir,
        adapter_dir=adapter_dir if wl["lora_rank"] > 0 else None,
        variant=variant,
        batch_size=wl["batch_size"],
        max_new_tokens=wl["max_new_tokens"],
        sampling=Sampling(**wl["sampling"]),
        ignore_eos=wl["ignore_eos"],
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        max_prompt_tokens=max_prompt_tokens,
        num_generations=wl["num_generations"],
        device=wl["device"],
        dtype=wl["dtype"],
        options=wl.get("options", {}),
    )


@dataclass
class Built:
    """A generator built (and gated) before measure(): its build time and the peak memory of the
    build itself, so setup_s and peak_memory_gb still cover load + compile + capture."""
    gen: object
    build_s: float
    peak_allocated: float | None = None
    peak_reserved: float | None = None


def build(gen_factory, spec: GenSpec) -> Built:
    cuda = envinfo.cuda()
    if cuda:
        cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    gen = gen_factory(spec)
    if cuda:
        cuda.synchronize()
        return Built(gen, time.perf_counter() - t0, cuda.max_memory_allocated(), cuda.max_memory_reserved())
    return Built(gen, time.perf_counter() - t0)


def measure(gen_factory, spec: GenSpec, rounds: list[list[list[int]]], warmup: list[list[int]],
            built: Built | None = None) -> dict:
    """Time one generate call per round over that round's prompts (prompts.select: no round repeats another's
    prompts); setup_s covers load + compile + warm-up.
    With `built`, the generator comes from there and its build counts into setup_s and the peaks
    (whatever ran between build and measure, a correctness gate, counts into neither)."""
    cuda = envinfo.cuda()
    sync = cuda.synchronize if cuda else (lambda: None)
    n = spec.num_generations
    gen, setup_s = set_up(gen_factory, spec, warmup, built, cuda, sync)
    walls, outs, per_round, window = timed_rounds(gen, rounds, n, sync)
    peak, engine_info = memory(gen, cuda, built)
    getattr(gen, "close", lambda: None)()

    med = statistics.median(walls)
    best = min(walls)
    # Each round has its own prompts, and with EOS on its own completion lengths: a rate is each round's tokens
    # over its own wall, and the job's the median of those (under ignore_eos, decoded tokens / median wall)
    decoded = round(statistics.mean(r["decoded_tokens"] for r in per_round))
    n_prompt_tokens = round(statistics.mean(r["prompt_tokens"] for r in per_round))
    decode_rates = [r["decoded_tokens"] / w for r, w in zip(per_round, walls)]
    return {
        "outputs": outs,
        "fields": {
            "engine": engine_info,
            "batch_size": spec.batch_size,
            "n_prompts": len(rounds[0]),
            "n_prompt_tokens": n_prompt_tokens,
            "n_decoded_tokens": decoded,
            "rounds": per_round,
            "median_wall_s": round(med, 6),
            "best_wall_s": round(best, 6),
            "decode_tps": round(statistics.median(decode_rates), 2),
            "decode_tps_best": round(max(decode_rates), 2),
            "prompt_tps": round(statistics.median(r["prompt_tokens"] / w for r, w in zip(per_round, walls)), 2),
            "peak_memory_gb": peak,
            "setup_s": round(setup_s, 3),
            "isolation": isolation.record(window),
        },
    }


def set_up(gen_factory, spec: GenSpec, warmup: list[list[int]], built: Built | None, cuda, sync):
    """-> (generator, setup s): built (or taken from `built`) and warmed up; peak counters reset first."""
    if cuda:
        cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    gen = built.gen if built else gen_factory(spec)
    if warmup:
        gen.generate(warmup, spec.num_generations)
    sync()
    return gen, time.perf_counter() - t0 + (built.build_s if built else 0.0)


def timed_rounds(gen, rounds: list[list[list[int]]], n: int, sync):
    """-> (walls, last round's outputs, per-round records, isolation window): one generate call per round."""
    walls, outs = [], None
    per_round = []
    with isolation.window() as window:  # the other leases that overlap the rounds are named in the stats
        for prompts in rounds:
            sync()
            t = time.perf_counter()
            outs = gen.generate(prompts, n)
            sync()
            wall = time.perf_counter() - t
            assert len(outs) == len(prompts) * n, (len(outs), len(prompts), n)
            tokens = sum(map(len, outs))
            walls.append(wall)
            per_round.append({"wall_s": round(wall, 6), "decoded_tokens": tokens,
                              "prompt_tokens": sum(map(len, prompts)) * n})
    return walls, outs, per_round, window


def memory(gen, cuda, built: Built | None) -> tuple[dict, dict]:
    """-> (peak GB, the engine's info): torch's peaks over build and rounds, beside the engine's own pool."""
    peak = {"allocated": None, "reserved": None}
    if cuda:
        b = built or Built(None, 0.0)
        peak = {"allocated": round(max(cuda.max_memory_allocated(), b.peak_allocated or 0) / 1e9, 3),
                "reserved": round(max(cuda.max_memory_reserved(), b.peak_reserved or 0) / 1e9, 3)}
    engine_info = {**getattr(gen, "info", lambda: {})(), **getattr(gen, "memory", lambda: {})()}
    # the engine's own pool (KV blocks, vLLM's reservation) sits beside torch's peak counters
    for k, v in engine_info.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (k == "reserved" or k.endswith("_gb")):
            peak["engine_reserved_gb" if k == "reserved" else k] = v
    return peak, engine_info


def check_lengths(outs: list[list[int]], spec: GenSpec) -> str | None:
    """With ignore_eos every backend must decode exactly max_new_tokens per sequence."""
    if not spec.ignore_eos:
        return None
    bad = [i for i, o in enumerate(outs) if len(o) != spec.max_new_tokens]
    if bad:
        return (f"ignore_eos is set but {len(bad)} of {len(outs)} completions do not have "
                f"max_new_tokens={spec.max_new_tokens} tokens (first: #{bad[0]} has {len(outs[bad[0]])})")
    return None


def run_job(*, backend: str, variant: str, model: str, case: str, workload: dict, model_dir: str,
            adapter_dir: str | None, dataset_dir: str, out: str, autotune: str | None = None) -> dict:
    """autotune: a kernel_tuning record whose decode kernel options this job replays, unless the
    workload's options set decode_kernel_options themselves."""
    from .assets import prompts as prompt_assets

    record = stats.base("generate", backend=backend, variant=variant, model=model, workload=workload, case=case)
    reason = backends.unavailable(backend, variant, envinfo.gpu_info()["gpu_count"], model_dir)
    if reason:
        return stats.finish(stats.skipped(record, reason), out)
    if autotune:
        options, record["autotune"] = kernel_tuning.replay(autotune, workload["batch_size"], workload["options"])
        workload = {**workload, "options": options}

    tok = prompt_assets.load_tokenizer(model_dir, workload["chat_template"])
    rounds, warmup = prompt_assets.select(tok, workload, dataset_dir)
    spec = spec_from_workload(workload, model_dir, adapter_dir, variant, tok.eos_token_id,
                              tok.pad_token_id, max(len(p) for ps in [*rounds, warmup] for p in ps))
    mod = backends.module(backend)
    reason = getattr(mod, "unsupported_spec", lambda spec: None)(spec)
    if reason:
        return stats.finish(stats.skipped(record, reason), out)
    built = None
    if hasattr(mod, "gate"):  # engines we wrote prove equality with HF before any speed is reported
        built = build(mod.load, spec)  # the engine the gate checks is the one then timed
        t0 = time.perf_counter()
        record["gate"] = {**mod.gate(spec, built.gen), "seconds": round(time.perf_counter() - t0, 3)}
        if not record["gate"]["passed"]:
            getattr(built.gen, "close", lambda: None)()
            return stats.finish(stats.failed(record, f"correctness gate failed against HF on the same weights: "
                                                     f"{json.dumps(record['gate'])[:400]}"), out)
    result = measure(mod.load, spec, rounds, warmup, built)
    bad = check_lengths(result["outputs"], spec)
    if bad:
        return stats.finish(stats.failed(record, bad), out)
    record.update(result["fields"])
    record["completions"] = completions.summary(
        result["outputs"], eos_token_id=spec.eos_token_id, ignore_eos=spec.ignore_eos, batch_size=spec.batch_size,
        median_wall_s=record["median_wall_s"], engine_round=record["engine"].get("last_round"))
    record["sample_completions"] = [prompt_assets.decode(tok, o)[:300] for o in result["outputs"][:3]]
    return stats.finish(record, out)
