"""The design lives in the repo: docs/design.md exists and is what the code points to, and the README's
layout reaches every folder, module, rule, backend and engine concept in one hop."""
import re
import subprocess

from rollout_bench import backends
from rollout_bench.grpo import availability

from .conftest import ROOT

PKG = ROOT / "src/rollout_bench"
OLD_BRIEF = "DESIGN" + ".md"  # the original brief, outside the repo (spelt apart so this file is no hit)


def layout() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("## Layout\n"):].split("\n## ", 1)[0]


def test_references_point_to_the_repos_own_design_doc():
    assert (ROOT / "docs/design.md").is_file()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    stale = [f for f in tracked if not f.startswith("results/published/") and (ROOT / f).is_file()
             and OLD_BRIEF in (ROOT / f).read_text(errors="replace")]
    assert stale == []
    design = (ROOT / "docs/design.md").read_text()
    cited = {int(n) for f in tracked if f.endswith((".py", ".smk", ".json", ".md")) and (ROOT / f).is_file()
             for n in re.findall(r"docs/design\.md §(\d+)", (ROOT / f).read_text(errors="replace"))}
    assert cited and all(f"\n## {n}. " in design for n in cited)


def test_readme_layout_reaches_every_folder_module_rule_and_backend():
    text = layout()
    assert "docs/design.md" in text
    for d in ("rules", "workflow/schemas", "workflow/report", "workflow/scripts", "config", "profiles", "envs",
              "docs", "results", "tests"):
        assert f"`{d}/" in text, d
    for p in sorted(PKG.iterdir()):
        if p.name.startswith("__") and p.name != "__main__.py" or p.name == "__pycache__":
            continue
        assert f"`{p.name}/`" in text if p.is_dir() else f"`{p.name}`" in text, p.name
    for sub in (d.name for d in PKG.iterdir() if d.is_dir() and d.name != "__pycache__"):
        for m in (PKG / sub).glob("*.py"):
            if m.stem != "__init__":
                assert f"`{m.stem}`" in text or f"`{sub}/{m.name}`" in text, f"{sub}/{m.name}"
    assert "`models/`" in text  # engine/models: the per-architecture attention pieces
    rules = re.findall(r"^rule (\w+):", "".join(p.read_text() for p in [ROOT / "Snakefile", *ROOT.glob("rules/*.smk")]),
                       re.M)
    for rule in set(rules) - {"all"}:
        assert f"`{rule}`" in text, rule
    for name in set(backends.NAMES) | set(availability.NAMES):
        assert f"`{name}`" in text, name


def test_every_relative_link_in_the_readme_and_docs_resolves_and_the_readme_fits_a_few_screens():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "results/README.md",
            ROOT / "workflow/scripts/device/README.md"]
    broken = []
    for doc in docs:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"(https?:|mailto:|#)", target):
                continue
            if not (doc.parent / target.split("#")[0]).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_the_docs_tables_made_from_published_stats_are_up_to_date():
    """docs/results.md's learn, decode-profile and generation tables are generated blocks: `python -m
    rollout_bench.report.blocks docs/results.md` rewrites them, and a typed edit to one is out of date here."""
    from rollout_bench.report import blocks

    doc = ROOT / "docs/results.md"
    specs = [m.group("spec").split()[0] for m in blocks.BLOCK.finditer(doc.read_text())]
    assert specs == ["learn", "decode_step", "decode_step_versus", "generate"], specs
    assert blocks.update(doc, ROOT, check=True), "run: python -m rollout_bench.report.blocks docs/results.md"


def test_a_generated_block_is_rewritten_from_its_sources_and_a_bad_one_named(tmp_path):
    import pytest

    from rollout_bench.report import blocks

    band = "results/published/h200-2026-12-03-session12/learn/band/qwen3-small-warm/hf_generate.json"
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n<!-- generated: learn {band} -->\n| typed | 9.99 |\n<!-- end generated -->\nafter\n")
    assert not blocks.update(doc, ROOT, check=True) and "9.99" in doc.read_text()  # --check writes nothing
    assert not blocks.update(doc, ROOT)
    text = doc.read_text()
    assert "9.99" not in text and "| frozen control, reward | 4.39 |" in text and text.endswith("after\n")
    assert blocks.update(doc, ROOT, check=True)
    doc.write_text("<!-- generated: learnt x.json -->\n<!-- end generated -->\n")
    with pytest.raises(blocks.BlockError, match="no renderer 'learnt'"):
        blocks.update(doc, ROOT)
    doc.write_text("<!-- generated: learn results/published/nope.json -->\n<!-- end generated -->\n")
    with pytest.raises(blocks.BlockError, match="nope.json"):
        blocks.update(doc, ROOT)


def test_a_generate_block_is_the_table_its_runs_pipeline_rendered(tmp_path):
    """`generate SUMMARY REFERENCE [A,B]` renders a published run's summary as `render --versus A,B` does; a summary
    without the aggregate's columns, a reference with no ok rows, or a head-to-head not A,B is named with the fix."""
    import pandas as pd
    import pytest

    from rollout_bench.report import blocks, render

    run = "results/published/h200-2026-12-07-prefill"
    df = pd.read_csv(ROOT / run / "summary/generate.csv")
    doc = tmp_path / "doc.md"
    doc.write_text(f"<!-- generated: generate {run}/summary/generate.csv vllm flex,vllm -->\n<!-- end generated -->\n")
    assert not blocks.update(doc, ROOT)
    body = doc.read_text().split("-->\n", 1)[1].rsplit("<!-- end generated -->", 1)[0]
    assert body == render.generation_table(df, "vllm") + "\n" + render.head_to_head(df, "flex", "vllm")
    assert "| flex | fa4 | 64 |" in body and "flex-triton" in body and "### flex / vllm" in body
    bad = tmp_path / "bad.csv"
    for frame, spec, match in ((df.drop(columns=["status"]), "vllm", r"lacks the columns \['status'\]"),
                               (df, "sglang", r"no 'ok' 'sglang' rows.*'flex', 'transformers_cb', 'vllm'"),
                               (df.assign(status="failed"), "vllm", r"no 'ok' 'vllm' rows.*\[\]"),
                               (df, "vllm flex", "as A,B")):
        frame.to_csv(bad, index=False)
        doc.write_text(f"<!-- generated: generate {bad} {spec} -->\n<!-- end generated -->\n")  # root / bad: bad
        with pytest.raises(blocks.BlockError, match=match):
            blocks.update(doc, ROOT)
