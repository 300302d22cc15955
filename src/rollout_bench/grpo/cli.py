"""`python -m rollout_bench train|band|compare`: the GRPO jobs' command lines.

`rollout_bench.__main__` wires them with `grpo.cli.add_commands(sub)`; each handler is one call.
"""
import json


def _train(a):
    from ..host import compile_cache
    cache = compile_cache.use(a.cache_dir or None)  # before anything compiles
    from . import job

    rec = job.run_job(backend=a.backend, model=a.model, workload=json.loads(a.workload), model_dir=a.model_dir,
                      adapter_dir=a.adapter or None, dataset_dir=a.dataset, steps=a.steps, out=a.out,
                      max_wall_s=a.max_wall_s, autotune=a.autotune or None, compile_cache=cache)
    print(json.dumps({k: rec.get(k) for k in ("status", "reason", "median_step_s", "train_wall_s")}))


def _band(a):
    from ..core import atomic
    from ..core import stats as stats_contract
    from . import verdict

    if len(a.control) > 1:  # nargs="*" so that a profile without a control passes none
        raise SystemExit(f"--control takes the one frozen control's stats, got {len(a.control)}: {a.control}")
    b = verdict.band([stats_contract.load(p) for p in a.refs], window=a.window, alpha=a.alpha,
                     control=stats_contract.load(a.control[0]) if a.control else None)
    atomic.write_json(a.out, b)
    print(json.dumps({"status": b["status"], "reason": b["reason"], "learning": b["learning"]}))


def _compare(a):
    from . import compare

    res = compare.compare(a.ref, a.candidate, a.out, band_path=a.band, kl_abs=a.kl_abs, kl_rel=a.kl_rel)
    print(json.dumps({"status": res["status"], "passed": (res.get("gate") or {}).get("passed"),
                      "equivalent": res.get("equivalent"), "step_time_ratio": res.get("step_time_ratio")}))


def add_commands(sub) -> None:
    from .compare import KL_ABS_BOUND, KL_REL_BOUND

    p = sub.add_parser("train", help="one GRPO training job -> stats JSON (kind train)")
    for k in ("backend", "model", "workload", "model-dir", "dataset", "out"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--adapter", default="", help="PEFT adapter dir every backend starts from")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--max-wall-s", type=float, default=None,
                   help="stop between steps before the training wall time passes this (the stats say so)")
    p.add_argument("--autotune", default="", help="kernel_tuning record the flex rollout engine replays")
    p.add_argument("--cache-dir", default="", help="compile caches shared across jobs (config cache_dir)")
    p.set_defaults(fn=_train)

    p = sub.add_parser("band", help="the reference seeds' GRPO runs -> their noise band per window (band JSON)")
    p.add_argument("--refs", nargs="+", required=True)
    p.add_argument("--control", nargs="*", default=[],
                   help="the reference's frozen run (learning rate 0, same prompts): learning is measured against it")
    p.add_argument("--window", type=int, required=True)
    p.add_argument("--alpha", type=float, required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=_band)

    p = sub.add_parser("compare", help="a backend's GRPO trajectory vs the reference's and its band -> compare JSON")
    p.add_argument("--ref", required=True)
    p.add_argument("--band", default=None, help="the reference seeds' band JSON (`band`); none: no band verdict")
    p.add_argument("--candidate", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--kl-abs", type=float, default=KL_ABS_BOUND)
    p.add_argument("--kl-rel", type=float, default=KL_REL_BOUND)
    p.set_defaults(fn=_compare)
