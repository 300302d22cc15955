"""Tables in the docs that are made from published stats, never typed: each block names its renderer and its
sources, and `python -m rollout_bench.report.blocks docs/results.md` rewrites its body from them (`--check`: exit 1
where a body is not what its sources give; tests/test_docs.py runs that check).

    <!-- generated: learn results/published/<folder>/.../band.json -->
    ...
    <!-- end generated -->

Renderers: `learn BAND_JSON` (train.learning_table), `decode_step DIR` (every decode_step.json under DIR,
render.decode_step_table), `decode_step_versus MODEL LABEL=DIR ...` (DIR/MODEL/decode_step.json of each, in order,
render.decode_step_versus), `generate SUMMARY_CSV REFERENCE [A,B]` (a run's summary as its pipeline rendered it:
render.generation_table, and with A,B render.head_to_head). Paths are relative to the repository root.
"""
import argparse
import re
import sys
from pathlib import Path

from .. import ROOT
from ..core import atomic, stats
from . import render, train

BLOCK = re.compile(r"(<!-- generated: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


class BlockError(ValueError):
    """A block whose renderer or sources are wrong: the message names the block and the fix."""


def _learn(root: Path, path: str) -> str:
    return train.learning_table(stats.read_json(root / path))


def _decode_step(root: Path, folder: str) -> str:
    paths = sorted((root / folder).rglob("decode_step.json"))
    if not paths:
        raise BlockError(f"no decode_step.json under {folder}")
    return render.decode_step_table([stats.read_json(p) for p in paths])


def _decode_step_versus(root: Path, model: str, *labelled: str) -> str:
    pairs = []
    for item in labelled:
        label, sep, folder = item.partition("=")
        if not sep:
            raise BlockError(f"decode_step_versus takes LABEL=DIR after the model, got {item!r}")
        pairs.append((label, stats.read_json(root / folder / model / "decode_step.json")))
    return render.decode_step_versus(pairs, model)


SUMMARY_COLUMNS = ("model", "case", "backend", "variant", "batch_size", "status", "ignore_eos", "decode_tps")


def _generate(root: Path, summary: str, reference: str, versus: str = "") -> str:
    """The run's generation table against `reference`, and with `versus` (A,B) its A / B head-to-head: what its
    pipeline rendered (`render --versus`) from the same summary."""
    import pandas as pd

    df = pd.read_csv(root / summary)
    missing = [c for c in SUMMARY_COLUMNS if c not in df.columns]
    if missing:
        raise BlockError(f"{summary} lacks the columns {missing}: name a summary `python -m rollout_bench aggregate` "
                         f"wrote (a run's summary/generate.csv)")
    ok = sorted(set(df[df.status == "ok"].backend.dropna().astype(str)))
    if reference not in ok:
        raise BlockError(f"{summary} has no 'ok' {reference!r} rows to take as the reference: name one of {ok}")
    table = render.generation_table(df, reference)
    if versus:
        a, sep, b = versus.partition(",")
        if not (sep and a and b):
            raise BlockError(f"generate takes its head-to-head as A,B after the reference, got {versus!r}")
        table += "\n" + render.head_to_head(df, a, b)
    return table


RENDERERS = {"learn": _learn, "decode_step": _decode_step, "decode_step_versus": _decode_step_versus,
             "generate": _generate}


def render_block(spec: str, root: Path) -> str:
    name, *args = spec.split()
    if name not in RENDERERS:
        raise BlockError(f"generated block {spec!r}: no renderer {name!r}; one of {sorted(RENDERERS)}")
    try:
        return RENDERERS[name](root, *args)
    except (OSError, TypeError, ValueError) as e:
        raise BlockError(f"generated block {spec!r}: {e}") from e


def update(doc: Path, root: Path = ROOT, check: bool = False) -> bool:
    """Rewrite every generated block of `doc` from its sources; -> whether the file was up to date. With `check`,
    nothing is written."""
    text = Path(doc).read_text()
    new = BLOCK.sub(lambda m: m.group(1) + render_block(m.group("spec"), root) + m.group(4), text)
    if new != text and not check:
        atomic.write_text(doc, new)
    return new == text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rollout_bench.report.blocks", description=__doc__.splitlines()[0])
    ap.add_argument("docs", nargs="+", help="markdown files with generated blocks")
    ap.add_argument("--check", action="store_true", help="exit 1 where a block is out of date; write nothing")
    a = ap.parse_args(argv)
    stale = [d for d in a.docs if not update(Path(d), ROOT, check=a.check)]
    for d in stale:
        print(f"{d}: {'out of date' if a.check else 'rewritten'}")
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
