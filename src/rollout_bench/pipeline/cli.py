"""`python -m rollout_bench generate|autotune|decode-profile|mismatch|gemm-bench|publish|trace|check-config`: the
generation benchmark's command lines and the pipeline's own (the tables' are report/cli.py's).

`rollout_bench.__main__` wires them with `cli.add_commands(sub)`; each handler imports only what its
command runs (a rule's code inputs are the import closure of its handler, sources.py).
"""
import json
from pathlib import Path


def _generate(a):
    from ..host import compile_cache
    cache = compile_cache.use(a.cache_dir or None)  # before anything compiles
    from ..generation import job as generation_job
    cells = [generation_job.Cell(**c) for c in json.loads(a.cells)]
    job = generation_job.run_group(backend=a.backend, variant=a.variant, model=a.model, cells=cells,
                                   model_dir=a.model_dir, adapter_dir=a.adapter or None, out=a.job_out,
                                   autotune=a.autotune or None, compile_cache=cache)
    print(json.dumps({k: job[k] for k in ("wall_s", "setup_s", "timed_s")}))
    for c in job["cells"]:
        print(json.dumps(c))


def _autotune(a):
    from ..host import compile_cache
    compile_cache.use(a.cache_dir or None)
    from ..diagnostics import autotune
    wl = json.loads(a.workload)
    rec = autotune.run(model=a.model, model_dir=a.model_dir, batch_sizes=[int(b) for b in a.batch_sizes.split(",")],
                       prompt_tokens=wl["prompt_tokens"], max_new_tokens=wl["max_new_tokens"], dtype=wl["dtype"],
                       out=a.out)
    print(json.dumps({"status": rec["status"], "best": {b: r["best"] for b, r in rec["by_batch"].items()}}))


def _decode_profile(a):
    from ..host import compile_cache
    compile_cache.use(a.cache_dir or None)
    from ..diagnostics import decode_profile
    wl = json.loads(a.workload)
    rec = decode_profile.run(model=a.model, model_dir=a.model_dir,
                             batch_sizes=[int(b) for b in a.batch_sizes.split(",")],
                             prompt_tokens=wl["prompt_tokens"], max_new_tokens=wl["max_new_tokens"],
                             dtype=wl["dtype"], out=a.out, autotune=a.autotune or None)
    print(json.dumps({b: p["class_ms"] for b, p in rec["by_batch"].items()}))


def _mismatch(a):
    from ..generation import mismatch
    rec = mismatch.run(model=a.model, model_dir=a.model_dir, adapter_dir=a.adapter or None, stats_paths=a.stats,
                       out=a.out)
    print(json.dumps({p: {k: c.get(k) for k in ("mean_abs", "max_abs", "kl_k3")} for p, c in rec["cells"].items()}))


def _gemm_bench(a):
    from ..diagnostics import gemm_bench
    rec = gemm_bench.run(model=a.model, config=gemm_bench.load_config(a.model), ms=[int(m) for m in a.ms.split(",")],
                         out=a.out, table_out=a.table or None, repeats=a.repeats)
    print(json.dumps({m: [s["step_cublas_ms"], s["step_best_ms"]] for m, s in rec["summary"].items()}))


def _trace(a):
    from ..generation import trace
    t = trace.from_stats(a.stats, Path(a.out).stem)
    trace.write(t, a.out)
    print(json.dumps(t["quantiles"]))


def _publish(a):
    import tempfile

    import yaml

    from . import config
    from .publish import publish

    path = a.config
    if a.profile:  # the config the run resolved, not the file with its profiles
        with open(a.config) as f:
            cfg = config.resolve({**(yaml.safe_load(f) or {}), "profile": a.profile})
        path = str(Path(tempfile.mkdtemp()) / "config.yaml")
        Path(path).write_text(yaml.safe_dump(cfg, sort_keys=False))
    print(publish(a.name, a.command, path, results=a.results))


def _check_config(a):
    from . import config, jobs
    cfg = config.load(a.config)
    print(json.dumps({"profile": cfg["profile"], "models": cfg["models"],
                      "generate_jobs": len(jobs.gen_jobs(cfg))}))


def add_commands(sub) -> None:
    p = sub.add_parser("generate", help="one generation job: one engine serves its cells -> a stats JSON a cell")
    for k in ("backend", "variant", "model", "model-dir", "job-out"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--cells", required=True, help="JSON list of {case, workload, dataset, out}, in the order they run")
    p.add_argument("--adapter", default="")
    p.add_argument("--autotune", default="", help="kernel_tuning record to replay (flex)")
    p.add_argument("--cache-dir", default="", help="compile caches shared across jobs (config cache_dir)")
    p.set_defaults(fn=_generate)

    p = sub.add_parser("autotune", help="measure flex's decode kernel options for a model -> JSON")
    for k in ("model", "model-dir", "workload", "out"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--batch-sizes", required=True, help="comma-separated")
    p.add_argument("--cache-dir", default="", help="compile caches shared across jobs (config cache_dir)")
    p.set_defaults(fn=_autotune)

    p = sub.add_parser("decode-profile", help="where a flex decode step's time goes, per batch size -> JSON")
    for k in ("model", "model-dir", "workload", "out"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--batch-sizes", required=True, help="comma-separated")
    p.add_argument("--autotune", default="", help="kernel_tuning record whose options the profile replays")
    p.add_argument("--cache-dir", default="", help="compile caches shared across jobs (config cache_dir)")
    p.set_defaults(fn=_decode_profile)

    p = sub.add_parser("mismatch", help="a model's generation cells: engine logprobs against the trainer's -> JSON")
    for k in ("model", "model-dir", "out"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--adapter", default="", help="the LoRA adapter the LoRA cells ran")
    p.add_argument("--stats", nargs="+", required=True, help="the cells' stats files")
    p.set_defaults(fn=_mismatch)

    p = sub.add_parser("gemm-bench", help="a decode step's GEMMs per shape and implementation, on CUDA -> JSON")
    p.add_argument("--model", required=True, help="a config of config/models (qwen3 or llama)")
    p.add_argument("--out", required=True)
    p.add_argument("--ms", default="4,8,16", help="rows (batch sizes), comma-separated")
    p.add_argument("--table", default="", help="also write a markdown table here")
    p.add_argument("--repeats", type=int, default=20)
    p.set_defaults(fn=_gemm_bench)

    p = sub.add_parser("publish", help="copy this run's stats, tables and charts to results/published/NAME")
    p.add_argument("name")
    p.add_argument("--command", required=True, help="the exact command that produced the results")
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--profile", default="", help="publish the config resolved for this profile (the run's own)")
    p.add_argument("--results", default="results", help="the run's results folder")
    p.set_defaults(fn=_publish)

    p = sub.add_parser("trace", help="a published run's completion lengths -> a trace file (config/traces/NAME.json)")
    p.add_argument("stats", help="an ok generation stats file with completions")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=_trace)

    p = sub.add_parser("check-config", help="validate and resolve a config file")
    p.add_argument("config", nargs="?", default="config/config.yaml")
    p.set_defaults(fn=_check_config)
