"""Charts a reader can use: full legend labels, a shape per case, a log step-time axis, and HTML that
draws offline (the GPU hosts have no network), with a PNG beside every SVG."""

import pandas as pd

from rollout_bench.report import render
from rollout_bench.report import train as report

from .conftest import ROOT
from .helpers import REMOTE_SCRIPT

HEADLINE = ROOT / "results/published/h200-2026-11-29-vllm-unsloth/charts"


def summary():
    rows = [("transformers_cb", "paged_sdpa", "greedy", 64, 500.0), ("flex", "graphs", "greedy", 64, 11000.0),
            ("flex", "graphs", "sweep", 8, 2000.0), ("flex", "graphs", "sweep", 16, 3800.0)]
    return pd.DataFrame([{"model": "m", "backend": b, "variant": v, "case": c, "batch_size": bs, "decode_tps": t,
                          "status": "ok", "peak_alloc_gb": 10.0, "peak_reserved_gb": float("nan")} for b, v, c, bs, t in rows])


def encoding(chart) -> dict:
    spec = chart.to_dict()
    return spec["spec"]["encoding"] if "spec" in spec else spec["encoding"]


def test_generation_charts_show_whole_labels_and_a_shape_per_case():
    for chart in (render.tps_vs_batch(summary()), render.tps_vs_memory(summary())):
        enc = encoding(chart)
        assert enc["color"]["legend"]["labelLimit"] == 0
        assert enc["shape"]["field"] == "case" and enc["shape"]["legend"]["labelLimit"] == 0
        # one case legend: the line's dash draws no second legend of identical symbols
        assert enc.get("strokeDash", {}).get("legend", None) is None
    # a log-2 batch axis ticks the batch sizes run, not 4.5 or 7.5
    assert encoding(render.tps_vs_batch(summary()))["x"]["axis"]["values"] == [8, 16, 64]


def test_step_time_panel_is_log_scaled():
    df = pd.DataFrame([{"model": "m", "backend": b, "step": s, "metric": "step_wall_s", "value": v}
                       for b, v in (("flex", 3.3), ("hf_generate", 52.0)) for s in (1, 2)])
    assert report.trajectory_chart(df, "step_wall_s").to_dict()["encoding"]["y"]["scale"] == {"type": "log"}
    assert "scale" not in report.trajectory_chart(df.assign(metric="kl"), "kl").to_dict()["encoding"]["y"]


def test_save_chart_writes_html_that_loads_no_remote_script_svg_and_png(tmp_path):
    render.save_chart(render.tps_vs_batch(summary()), tmp_path / "c.html", tmp_path / "c.svg")
    html = (tmp_path / "c.html").read_text()
    assert not REMOTE_SCRIPT.search(html) and "cdn.jsdelivr" not in html
    assert "vegaEmbed" in html and "transformers_cb/paged_sdpa" in html
    assert (tmp_path / "c.svg").read_text().lstrip().startswith("<svg")
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.html", "c.png", "c.svg"]  # no temp file left


def test_headline_charts_are_self_contained_with_a_png_each():
    """The published results' charts (docs/results.md): every HTML draws offline and every SVG has its PNG."""
    htmls = sorted(HEADLINE.glob("*.html"))
    assert [p.stem for p in htmls] == ["tps_vs_batch", "tps_vs_memory", "train_steps"]
    for p in htmls:
        assert not REMOTE_SCRIPT.search(p.read_text()), p
    for svg in HEADLINE.glob("*.svg"):
        assert svg.with_suffix(".png").read_bytes().startswith(b"\x89PNG"), svg
    results = (ROOT / "docs/results.md").read_text()
    for p in htmls:
        assert f"](../{p.with_suffix('.png').relative_to(ROOT)})" in results, p.name
