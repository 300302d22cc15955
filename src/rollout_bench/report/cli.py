"""`python -m rollout_bench aggregate|render|render-decode-profile|render-train`: the tables and charts.

`rollout_bench.__main__` wires them with `cli.add_commands(sub)`; each handler imports only what its command runs
(a rule's code inputs are the import closure of its handler, pipeline/sources.py).
"""


def _render_decode_profile(a):
    from ..core import atomic, stats
    from . import render
    atomic.write_text(a.table, render.decode_step_table([stats.read_json(p) for p in a.records]))


def _aggregate(a):
    from . import aggregate
    aggregate.write_csv(aggregate.generation_frame(a.stats), a.out)


def _render(a):
    import pandas as pd

    from ..core import atomic
    from . import render
    df = pd.read_csv(a.summary)
    table = render.generation_table(df, a.reference)
    if a.versus:
        table += "\n" + render.head_to_head(df, *a.versus.split(","))
    atomic.write_text(a.table, table)
    render.save_chart(render.tps_vs_batch(df), a.chart_batch_html, a.chart_batch_svg)
    render.save_chart(render.tps_vs_memory(df), a.chart_memory_html, a.chart_memory_svg)


def _render_train(a):
    from ..core import atomic
    from . import train

    atomic.write_text(a.train_table, train.training_table(a.stats))
    atomic.write_text(a.equivalence_table, train.equivalence_table(a.comparisons or [], a.bands or []))
    train.save_chart(train.trajectory_charts(train.trajectory_frame(a.stats), train.band_frame(a.bands or [])),
                     a.chart_html, a.chart_svg)


def add_commands(sub) -> None:
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

    p = sub.add_parser("render-train", help="train stats + compare JSONs -> tables and per-step charts")
    for k in ("train-table", "equivalence-table", "chart-html", "chart-svg"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--stats", nargs="+", required=True)
    p.add_argument("--comparisons", nargs="*", default=[])
    p.add_argument("--bands", nargs="*", default=[])
    p.set_defaults(fn=_render_train)
