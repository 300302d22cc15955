"""Pairwise diff of a backend's GRPO trajectory against a reference backend's, the equivalence gate, and the
verdict against the reference seeds' noise band (verdict.py).

Two backends sample different tokens, so their step-by-step rewards and losses differ for that reason
alone: the |diff| figures are reported, they are not the test. The gate is what must hold whatever
the sampling noise: both runs have a finite loss at every step, their KL stays non-negative and within
a bounded range of the reference's, both optimizers held the LoRA parameters and moved them, they ran
the identical reward code and hyper-parameters, they produced the same number of completions at every
step both ran, every completion ended with EOS or at the length limit, an importance-sampling
correction, where one ran, left the policy gradient about its size, and the rollout's own logprobs, where it
returns them, match the trainer's at every step within the trainer dtype's floor (mean and largest gap). A
candidate is equivalent when the gate passes and its windowed reward, accuracy, KL, loss, length and truncation
stay inside the band the reference's seeds span.
"""
import math
import statistics

from ..core import atomic
from ..core import stats as stats_contract
from . import timing, verdict

TRAJECTORY = ("loss", "reward", "kl", "grad_norm")
# Hyper-parameters that must match for the trajectories to be comparable; `options`, `device` and
# `dtype` are per-backend engine settings and may differ.
# `optim` is what the config asked for; the check reads the optimizer the trainer built (`optimizer`),
# which every stats file has (`optim` came later)
NOT_COMPARED = ("options", "device", "dtype", "optim")
KL_ABS_BOUND = 0.05  # a KL up to this is in range whatever the reference did
KL_REL_BOUND = 10.0  # ... and up to this many times the reference's largest KL
# The IS correction's weight per completion token (median over steps of its mean, importance.py) must stay
# within these: outside, it rescales the policy gradient against the KL term's (TRL's default sequence_mask
# on a bf16 rollout of 512 tokens reads ~1e-6, or 0)
IS_WEIGHT_BOUNDS = (0.5, 2.0)
# The rollout's logprobs of its own tokens against the trainer's forward on them (importance.py), at every step: the
# mean |gap| per token, and its largest, must stay within the trainer dtype's floor. float32: a sampler of the
# trainer's weights reads ~1e-6 mean and under 1e-4 at most (the CPU runs). bfloat16: flex and vLLM read a mean of at
# most 0.0037 on the H200 learn runs and flex 0.0083 on the smoke run's random tiny model; the largest per-token gap
# was not recorded before (is/logp_gap/max is new), so bfloat16 bounds the mean alone. Logprobs at another temperature,
# a stale adapter read far above the mean's bound; a 0.05-nat logit bias on a confident model moves the mean little
# and the largest gap by 0.05 (float32 sees it, bfloat16 cannot yet). Processed logprobs (vLLM's under TRL) of a
# sampler that truncates (top-k, top-p, min-p) exceed the trainer's by -log(kept mass) by design: vLLM reads 1.17 a
# token on the smoke run's equivalence sampling. The check does not apply there.
LOGP_GAP_BOUNDS = {"float32": (1e-3, 1e-2), "bfloat16": (0.02, None), "float16": (0.02, None)}  # (mean, max)


def _truncates(sampling: dict) -> bool:
    return ((sampling.get("top_k") or 0) > 0 or sampling.get("top_p", 1.0) < 1.0
            or (sampling.get("min_p") or 0.0) > 0.0)


def series(rec: dict, key: str) -> dict[int, float | None]:
    return {s["step"]: _finite(s.get(key)) for s in rec.get("steps", [])}


def _finite(v):
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def diff(ref: dict, cand: dict, key: str) -> dict | None:
    a, b = series(ref, key), series(cand, key)
    both = [(a[s], b[s]) for s in sorted(set(a) & set(b)) if a[s] is not None and b[s] is not None]
    if not both:
        return None
    d = [abs(x - y) for x, y in both]
    return {"n_compared": len(d), "max_abs": max(d), "mean_abs": statistics.fmean(d)}


def value_range(rec: dict, key: str) -> list[float] | None:
    vals = [v for v in series(rec, key).values() if v is not None]
    return [min(vals), max(vals)] if vals else None


def _check(ok: bool, detail: str) -> dict:
    return {"ok": bool(ok), "detail": detail}


def _is_weight(name: str, r: dict) -> tuple[bool, str]:
    if not r.get("is_correction"):
        return True, f"{name}: no IS correction (its sampler is the trainer's model)"
    w = [v for v in series(r, "is/weight/mean").values() if v is not None]
    if not w:
        return False, f"{name}: IS correction ({r.get('is_mode')}) ran but its weights were not recorded"
    med, lo, hi = statistics.median(w), *IS_WEIGHT_BOUNDS
    zeroed = [v for v in series(r, "is/zeroed/token_frac").values() if v is not None]
    z = f", {statistics.median(zeroed):.0%} of tokens zeroed" if zeroed else ""
    return lo <= med <= hi, (f"{name}: {r.get('is_mode')} weights the policy gradient by {med:.3g} per token "
                             f"(median over steps{z}; bounds [{lo}, {hi}])")


def _logprob_match(r: dict) -> tuple[bool, str]:
    wl = r.get("workload") or {}
    if not r.get("is_correction"):
        if r.get("backend") in ("flex", "vllm"):
            return True, "not measured: the IS correction is off, so the sampler's logprobs were not recorded"
        return True, "no sampler logprobs: the rollout samples from the trainer's model"
    if r.get("sampler_logprobs") == "processed" and _truncates(wl.get("sampling") or {}):
        return True, ("not comparable: processed logprobs of a truncating sampler (top-k/top-p/min-p) exceed the "
                      "trainer's by -log(kept mass) by design")
    dtype = wl.get("dtype")
    if dtype not in LOGP_GAP_BOUNDS:
        return False, f"no logprob-gap bound for dtype {dtype!r}; one of {sorted(LOGP_GAP_BOUNDS)}"
    gaps = {s: v for s, v in series(r, "is/logp_gap/mean").items() if v is not None}
    if not gaps:
        return False, "sampler-vs-trainer logprob gap not recorded"
    bound, max_bound = LOGP_GAP_BOUNDS[dtype]
    peaks = {s: v for s, v in series(r, "is/logp_gap/max").items() if v is not None}
    over = sorted(s for s, v in gaps.items() if v > bound)
    over_max = sorted(s for s, v in peaks.items() if max_bound is not None and v > max_bound)
    worst = max(gaps, key=gaps.get)
    kl = [v for v in series(r, "is/kl/mean").values() if v is not None]
    tail = f"; KL(sampler || trainer) up to {max(kl):.3g} a token" if kl else ""
    bounds = f"bound {bound}" + (f", largest {max_bound}" if max_bound is not None else "") + f", {dtype}"
    steps = sorted(set(over) | set(over_max))
    if steps:
        peak = f", largest {max(peaks[s] for s in over_max):.3g}" if over_max else ""
        return False, (f"|sampler - trainer logprob| above its bounds at steps {steps}: mean up to "
                       f"{max(gaps.get(s, 0.0) for s in steps):.3g} a token{peak} ({bounds}){tail}")
    peak = f", largest {max(peaks.values()):.3g}" if peaks else ""
    return True, f"mean |sampler - trainer logprob| at most {gaps[worst]:.3g} a token{peak} ({bounds}){tail}"


def gate(ref: dict, cand: dict, kl_abs: float = KL_ABS_BOUND, kl_rel: float = KL_REL_BOUND) -> dict:
    checks = {}
    bad = {name: [s for s, v in series(r, "loss").items() if v is None] for name, r in (("ref", ref), ("cand", cand))}
    checks["finite_loss"] = _check(not any(bad.values()) and ref.get("steps") and cand.get("steps"),
                                   "every step has a finite loss" if not any(bad.values())
                                   else f"loss missing or non-finite at steps {bad}")

    kl_ref, kl_cand = series(ref, "kl"), series(cand, "kl")
    ref_kl, cand_kl = [v for v in kl_ref.values() if v is not None], [v for v in kl_cand.values() if v is not None]
    if None in kl_ref.values() or None in kl_cand.values() or not ref_kl or not cand_kl:
        checks["kl_bounded"] = _check(False, "KL not logged at every step of both runs (beta = 0, or dropped)")
    else:
        bound = max(kl_abs, kl_rel * max(ref_kl))
        # the k3 estimator TRL logs is non-negative; a negative value means a broken logprob pass
        checks["kl_bounded"] = _check(min(ref_kl + cand_kl) >= -1e-6 and max(cand_kl) <= bound,
                                      f"candidate KL in [{min(cand_kl):.3g}, {max(cand_kl):.3g}], bound {bound:.3g} "
                                      f"(max of {kl_abs} and {kl_rel} x reference max {max(ref_kl):.3g})")

    # over the steps both ran: a run may be shorter by design (a slow backend within a device session),
    # which the comparison records as `steps` and the equivalence table states
    n_ref, n_cand = series(ref, "n_completions"), series(cand, "n_completions")
    common = sorted(set(n_ref) & set(n_cand))
    n_ref, n_cand = [n_ref[s] for s in common], [n_cand[s] for s in common]
    checks["completion_counts"] = _check(common and n_ref == n_cand and None not in n_ref,
                                         f"completions per step: reference {n_ref}, candidate {n_cand}")

    same_code = ref.get("reward_sha256") is not None and ref.get("reward_sha256") == cand.get("reward_sha256")
    checks["reward_code"] = _check(same_code, f"rewards.py sha256 {str(ref.get('reward_sha256'))[:12]} vs "
                                              f"{str(cand.get('reward_sha256'))[:12]}")

    moved = {name: (r.get("optimizer_params"), r.get("adapter_update_norm"))
             for name, r in (("ref", ref), ("cand", cand))}
    checks["adapter_trained"] = _check(all(n and u for n, u in moved.values()), "; ".join(
        f"{name}: optimizer over {n} parameters, LoRA moved by {u:.3g}" if n is not None and u is not None
        else f"{name}: optimizer parameters and LoRA update not recorded" for name, (n, u) in moved.items()))

    hp = lambda r: {**{k: v for k, v in (r.get("grpo") or {}).items() if k not in NOT_COMPARED},
                    "optimizer": r.get("optimizer")}
    differs = sorted(k for k in set(hp(ref)) | set(hp(cand)) if hp(ref).get(k) != hp(cand).get(k))
    checks["hyperparameters"] = _check(bool(ref.get("grpo")) and not differs,
                                       "identical" if not differs else f"differ in {differs}")

    # a completion ends with EOS or at max_completion_length; one that does neither lost its stop token
    cut = {name: {s: v for s, v in series(r, "completions/cut_short_frac").items() if v} for name, r in
           (("ref", ref), ("cand", cand))}
    checks["completion_ends"] = _check(not any(cut.values()), "; ".join(
        f"{name}: at steps {sorted(c)} up to {max(c.values()):.0%} of completions ended before "
        f"max_completion_length without EOS" for name, c in cut.items() if c) or
        "every completion ended with EOS or at max_completion_length")

    is_ok = [_is_weight(name, r) for name, r in (("ref", ref), ("cand", cand))]
    bad = [d for ok, d in is_ok if not ok]
    checks["is_weight"] = _check(not bad, "; ".join(bad or [d for _, d in is_ok]))
    # the rollout's own logprobs against the trainer's, step by step: a fault too small to move the learning band
    # (a temperature, a bias, one step's stale adapter) moves this
    ok, detail = _logprob_match(cand)
    checks["logprob_match"] = _check(ok, f"cand: {detail}")
    return {"passed": all(c["ok"] for c in checks.values()), "checks": checks,
            "kl_bound": {"abs": kl_abs, "rel": kl_rel}}


def compare(ref_path, cand_path, out, *, band_path=None, kl_abs: float = KL_ABS_BOUND,
            kl_rel: float = KL_REL_BOUND) -> dict:
    """`band_path`: the reference seeds' band (verdict.band); without it the verdict is the gate alone."""
    ref, cand = stats_contract.load(ref_path), stats_contract.load(cand_path)
    result = {
        "ref": str(ref_path), "candidate": str(cand_path), "band_path": str(band_path) if band_path else None,
        "model": cand["model"], "ref_backend": ref["backend"], "cand_backend": cand["backend"],
        "status": "ok", "reason": None,
    }
    not_ok = [(name, r) for name, r in (("reference", ref), ("candidate", cand)) if r["status"] != "ok"]
    if not_ok:
        name, r = not_ok[0]
        result.update(status="skipped", reason=f"{name} {r['backend']} is {r['status']}: {r['reason']}")
        atomic.write_json(out, result)
        return result

    result["common_steps"] = len(set(series(ref, "loss")) & set(series(cand, "loss")))
    result["steps"] = {"ref": len(ref.get("steps", [])), "cand": len(cand.get("steps", []))}
    result["diff"] = {k: diff(ref, cand, k) for k in TRAJECTORY}
    result["range"] = {k: {"ref": value_range(ref, k), "cand": value_range(cand, k)} for k in TRAJECTORY}
    result["median_step_s"] = {"ref": ref["median_step_s"], "cand": cand["median_step_s"]}
    # over the steps both ran (4..M): equal to the ratio of the runs' own medians when both ran every step
    ref_med, cand_med, span = timing.common_median_steps(ref["steps"], cand["steps"])
    result["step_time_window"] = span
    result["common_median_step_s"] = {"ref": ref_med, "cand": cand_med}
    result["step_time_ratio"] = cand_med / ref_med
    result["train_wall_s"] = {"ref": ref["train_wall_s"], "cand": cand["train_wall_s"]}
    result["peak_memory_gb"] = {"ref": ref["peak_memory_gb"], "cand": cand["peak_memory_gb"]}
    result["is_correction"] = {"ref": ref.get("is_correction"), "cand": cand.get("is_correction")}
    result["gate"] = gate(ref, cand, kl_abs, kl_rel)
    result["band"] = verdict.verdict(stats_contract.read_json(band_path), cand) if band_path else None
    # a band that could not be drawn (one seed) leaves the gate to decide; the table says there was none
    result["equivalent"] = result["gate"]["passed"] and (result["band"] or {}).get("status") != "outside"
    atomic.write_json(out, result)
    return result
