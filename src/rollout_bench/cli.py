"""`python -m rollout_bench generate|autotune|decode-profile|gemm-bench|aggregate|render|render-decode-profile|
publish|check-config`: the generation benchmark's command lines and the pipeline's own.

`rollout_bench.__main__` wires them with `cli.add_commands(sub)`; each handler imports only what its
command runs (a rule's code inputs are the import closure of its handler, sources.py).
"""
import json


def _generate(a):
    from . import generation
    rec = generation.run_job(backend=a.backend, variant=a.variant, model=a.model, case=a.case,
                             workload=json.loads(a.workload), model_dir=a.model_dir,
                             adapter_dir=a.adapter or None, dataset_dir=a.dataset, out=a.out,
                             autotune=a.autotune or None)
    print(json.dumps({k: rec.get(k) for k in ("status", "reason", "decode_tps", "setup_s")}))


def _autotune(a):
    from . import kernel_tuning
    wl = json.loads(a.workload)
    rec = kernel_tuning.run(model=a.model, model_dir=a.model_dir, batch_sizes=[int(b) for b in a.batch_sizes.split(",")],
                            prompt_tokens=wl["prompt_tokens"], max_new_tokens=wl["max_new_tokens"], dtype=wl["dtype"],
                            out=a.out)
    print(json.dumps({"status": rec["status"], "best": {b: r["best"] for b, r in rec["by_batch"].items()}}))


def _decode_profile(a):
    from . import decode_profile
    wl = json.loads(a.workload)
    rec = decode_profile.run(model=a.model, model_dir=a.model_dir,
                             batch_sizes=[int(b) for b in a.batch_sizes.split(",")],
                             prompt_tokens=wl["prompt_tokens"], max_new_tokens=wl["max_new_tokens"],
                             dtype=wl["dtype"], out=a.out, autotune=a.autotune or None)
    print(json.dumps({b: p["class_ms"] for b, p in rec["by_batch"].items()}))


def _gemm_bench(a):
    from .diagnostics import gemm_bench
    rec = gemm_bench.run(model=a.model, config=gemm_bench.load_config(a.model), ms=[int(m) for m in a.ms.split(",")],
                         out=a.out, table_out=a.table or None, repeats=a.repeats)
    print(json.dumps({m: [s["step_cublas_ms"], s["step_best_ms"]] for m, s in rec["summary"].items()}))


def _render_decode_profile(a):
    from . import atomic, render, stats
    atomic.write_text(a.table, render.decode_step_table([stats.read_json(p) for p in a.records]))


def _aggregate(a):
    from . import aggregate
    aggregate.write_csv(aggregate.generation_frame(a.stats), a.out)


def _render(a):
    import pandas as pd

    from . import atomic, render
    df = pd.read_csv(a.summary)
    table = render.generation_table(df, a.reference)
    if a.versus:
        table += "\n" + render.head_to_head(df, *a.versus.split(","))
    atomic.write_text(a.table, table)
    render.save_chart(render.tps_vs_batch(df), a.chart_batch_html, a.chart_batch_svg)
    render.save_chart(render.tps_vs_memory(df), a.chart_memory_html, a.chart_memory_svg)


def _publish(a):
    from .publish import publish
    print(publish(a.name, a.command, a.config))


def _check_config(a):
    from . import config
    cfg = config.load(a.config)
    print(json.dumps({"profile": cfg["profile"], "models": cfg["models"],
                      "generate_jobs": len(config.gen_jobs(cfg))}))


def add_commands(sub) -> None:
    p = sub.add_parser("generate", help="one generation benchmark job -> stats JSON")
    for k in ("backend", "variant", "model", "case", "workload", "model-dir", "dataset", "out"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--adapter", default="")
    p.add_argument("--autotune", default="", help="kernel_tuning record to replay (flex)")
    p.set_defaults(fn=_generate)

    p = sub.add_parser("autotune", help="measure flex's decode kernel options for a model -> JSON")
    for k in ("model", "model-dir", "workload", "out"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--batch-sizes", required=True, help="comma-separated")
    p.set_defaults(fn=_autotune)

    p = sub.add_parser("decode-profile", help="where a flex decode step's time goes, per batch size -> JSON")
    for k in ("model", "model-dir", "workload", "out"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--batch-sizes", required=True, help="comma-separated")
    p.add_argument("--autotune", default="", help="kernel_tuning record whose options the profile replays")
    p.set_defaults(fn=_decode_profile)

    p = sub.add_parser("gemm-bench", help="a decode step's GEMMs per shape and implementation, on CUDA -> JSON")
    p.add_argument("--model", required=True, help="a config of config/models (qwen3 or llama)")
    p.add_argument("--out", required=True)
    p.add_argument("--ms", default="4,8,16", help="rows (batch sizes), comma-separated")
    p.add_argument("--table", default="", help="also write a markdown table here")
    p.add_argument("--repeats", type=int, default=20)
    p.set_defaults(fn=_gemm_bench)

    p = sub.add_parser("render-decode-profile", help="decode-profile JSONs -> markdown table")
    p.add_argument("--table", required=True)
    p.add_argument("records", nargs="+")
    p.set_defaults(fn=_render_decode_profile)

    p = sub.add_parser("aggregate", help="stats JSONs -> summary CSV")
    p.add_argument("--out", required=True)
    p.add_argument("stats", nargs="+")
    p.set_defaults(fn=_aggregate)

    p = sub.add_parser("render", help="summary CSV -> tables and charts")
    for k in ("summary", "reference", "table", "chart-batch-html", "chart-batch-svg",
              "chart-memory-html", "chart-memory-svg"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--versus", default="", help="A,B: a head-to-head section, A / B on every case and batch")
    p.set_defaults(fn=_render)

    p = sub.add_parser("publish", help="copy this run's stats, tables and charts to results/published/NAME")
    p.add_argument("name")
    p.add_argument("--command", required=True, help="the exact command that produced the results")
    p.add_argument("--config", default="config/config.yaml")
    p.set_defaults(fn=_publish)

    p = sub.add_parser("check-config", help="validate and resolve a config file")
    p.add_argument("config", nargs="?", default="config/config.yaml")
    p.set_defaults(fn=_check_config)
