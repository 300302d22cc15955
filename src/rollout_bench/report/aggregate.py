"""Stats JSONs -> one tidy CSV per kind (results/summary/*.csv)."""
import pandas as pd

from ..core import atomic, stats

GEN_COLUMNS = ["model", "backend", "variant", "case", "batch_size", "num_generations", "lora_rank",
               "sampling", "status", "reason", "decode_tps", "decode_tps_best", "prompt_tps",
               "median_wall_s", "n_decoded_tokens", "ignore_eos", "len_p50", "len_p90", "eos_rate",
               "time_to_last_s", "decode_occupancy", "decode_gb_per_s", "of_copy_rate", "peak_alloc_gb",
               "peak_reserved_gb", "setup_s", "rounds", "round_spread", "spread_ok", "fresh_prompts", "gpu_name",
               "gpu_ids", "gpu_uuids", "neighbours", "others_cpu", "slow_round_s", "fast_round_s", "decode_tps_worst",
               "slow_round_gc_s", "slow_round_cpu", "fast_round_cpu", "torch", "transformers", "started_at", "wall_s",
               "trace", "n_prompts", "temperature", "attempts", "long_prompts", "prefill_rate", "prompt_tokens_mean",
               "prefill_tps", "prefill_engine_tps", "prefill_reason", "prefill_kernel", "prefill_kernel_reason",
               "git_commit", "path"]


def generation_row(rec: dict, path: str) -> dict:
    wl, env = rec["workload"], rec["env"]
    peak = rec.get("peak_memory_gb") or {}
    reserved = [v for k, v in peak.items() if k != "allocated" and isinstance(v, (int, float))]
    done = rec.get("completions") or {}
    lengths = done.get("completion_tokens") or {}
    bandwidth = (rec.get("engine") or {}).get("bandwidth") or {}  # engines that count their bytes (flex)
    rounds = rec.get("rounds") or []
    walls = [r["wall_s"] for r in rounds]
    prefill, kernel = rec.get("prefill") or {}, rec.get("prefill_kernel") or {}
    return {
        "model": rec["model"], "backend": rec["backend"], "variant": rec["variant"],
        "case": rec.get("case", ""), "batch_size": wl.get("batch_size"),
        "num_generations": wl["num_generations"], "lora_rank": wl["lora_rank"],
        "sampling": wl.get("sampling_preset") or "custom",
        "status": rec["status"], "reason": rec["reason"],
        "decode_tps": rec.get("decode_tps"), "decode_tps_best": rec.get("decode_tps_best"),
        "prompt_tps": rec.get("prompt_tps"), "median_wall_s": rec.get("median_wall_s"),
        "n_decoded_tokens": rec.get("n_decoded_tokens"), "ignore_eos": wl["ignore_eos"],
        "len_p50": lengths.get("p50"), "len_p90": lengths.get("p90"), "eos_rate": done.get("eos_rate"),
        "time_to_last_s": done.get("time_to_last_s"), "decode_occupancy": done.get("decode_occupancy"),
        "decode_gb_per_s": bandwidth.get("decode_gb_per_s"), "of_copy_rate": bandwidth.get("of_copy_rate"),
        "peak_alloc_gb": peak.get("allocated"),
        "peak_reserved_gb": max(reserved) if reserved else None,
        "setup_s": rec.get("setup_s"), "rounds": len(rounds),
        "round_spread": max(walls) / min(walls) - 1 if walls and min(walls) > 0 else None,
        # within the job's workload.max_round_spread (None: a record before 2026-12-05, or a cell that did not time)
        "spread_ok": rec.get("spread_ok"),
        # each timed round sent prompts of its own (rounds record their prompt tokens since 2026-12-03); before,
        # every round re-sent the same prompts, which vLLM's prefix cache then skipped
        "fresh_prompts": bool(rounds) and all("prompt_tokens" in r for r in rounds),
        "gpu_name": env.get("gpu_name") or "cpu", "gpu_ids": ",".join(map(str, rec["gpu_ids"])),
        "gpu_uuids": ",".join(env.get("gpu_uuids") or []),
        "neighbours": neighbours(rec.get("isolation")),
        # the CPU time of everything but the job during its timed rounds, of all the host's CPUs' (None: not recorded)
        "others_cpu": ((rec.get("isolation") or {}).get("host_load") or {}).get("others"),
        **round_bounds(rounds),
        "torch": env.get("torch"), "transformers": env.get("transformers"),
        "started_at": rec["started_at"], "wall_s": rec["wall_s"],
        "trace": (wl.get("trace") or {}).get("name"), "n_prompts": rec.get("n_prompts", wl.get("n_prompts")),
        "temperature": wl["sampling"].get("temperature"), "attempts": len(rec.get("attempts") or [None]),
        "long_prompts": bool(wl.get("long_prompts")), "prefill_rate": bool(wl.get("prefill_rate")),
        # a round's prompt tokens / its prompts x n: the mean prompt length the prefill figures are at
        "prompt_tokens_mean": (rec["n_prompt_tokens"] / (rec["n_prompts"] * wl["num_generations"])
                               if rec.get("n_prompt_tokens") and rec.get("n_prompts") else None),
        "prefill_tps": prefill.get("tps"), "prefill_engine_tps": prefill.get("engine_tps"),
        "prefill_reason": prefill.get("reason"),
        "prefill_kernel": kernel.get("kernel"), "prefill_kernel_reason": kernel.get("reason"),
        "git_commit": env.get("git_commit"), "path": path,
    }


def round_bounds(rounds: list[dict]) -> dict:
    """The reported attempt's slowest and fastest timed round's walls, its lowest round decode rate (the highest is
    the record's decode_tps_best), and, where recorded (generation/round_probe.py, since 2026-12-07), the slowest
    round's collector pauses and the share of the slowest and the fastest round the engine's calling thread spent on
    a CPU."""
    if not rounds:
        return dict.fromkeys(("slow_round_s", "fast_round_s", "decode_tps_worst", "slow_round_gc_s",
                              "slow_round_cpu", "fast_round_cpu"))
    slow, fast = (f(rounds, key=lambda r: r["wall_s"]) for f in (max, min))
    probed = "process" in slow and "process" in fast
    return {"slow_round_s": slow["wall_s"], "fast_round_s": fast["wall_s"],
            "decode_tps_worst": min(r["decoded_tokens"] / r["wall_s"] for r in rounds),
            "slow_round_gc_s": slow["process"]["gc"]["pause_s"] if probed else None,
            "slow_round_cpu": slow["process"]["thread_cpu_s"] / slow["wall_s"] if probed else None,
            "fast_round_cpu": fast["process"]["thread_cpu_s"] / fast["wall_s"] if probed else None}


def neighbours(isolation: dict | None) -> int | None:
    """How many other leases overlapped a job's timed rounds; None where its stats do not say (no isolation record
    before 2026-11-30, or a job run without a lease)."""
    if not isolation or not isolation.get("lease"):
        return None
    return len(isolation.get("neighbours") or [])


def generation_frame(paths: list[str]) -> pd.DataFrame:
    rows = [generation_row(stats.load(p), p) for p in paths]
    return pd.DataFrame(rows, columns=GEN_COLUMNS)


def write_csv(df: pd.DataFrame, out) -> None:
    atomic.write_text(out, df.to_csv(index=False))
