"""Trace replay: completion lengths drawn from a recorded rollout's length distribution, the same for every engine.

A GRPO step waits for its longest completion, and an engine's scheduler decides how fast a batch of ragged lengths
drains. A trace case gives every engine the same work: each completion's own token budget, drawn from a trace file
(config/traces/<name>.json), with EOS ignored, so every engine decodes exactly those lengths.

A trace file holds the quantiles of a published run's completion lengths (`from_stats` writes one from a stats
file: `python -m rollout_bench trace STATS --out config/traces/NAME.json`) and where they came from. Lengths are
drawn by inverse transform through the quantiles, linear between them and flat below the lowest (a run's stats do
not record its shortest completion), from a generator seeded by (seed, draw): a pure function of its arguments.
"""
import hashlib
import json
from pathlib import Path

import numpy as np

from .. import ROOT
from ..core import atomic

TRACES = ROOT / "config" / "traces"
QUANTILES = (("p10", 0.1), ("p50", 0.5), ("p90", 0.9), ("max", 1.0))  # what a stats file's completions record


class TraceError(ValueError):
    pass


def path(name: str) -> Path:
    return TRACES / f"{name}.json"


def names() -> list[str]:
    return sorted(p.stem for p in TRACES.glob("*.json"))


def load(name: str) -> dict:
    """A shipped trace, checked: quantiles rising from a positive length, the last at 1.0."""
    p = path(name)
    if not p.is_file():
        raise TraceError(f"no trace {name!r} under {TRACES} (known: {', '.join(names()) or 'none'}); write one with "
                         f"`python -m rollout_bench trace STATS --out config/traces/{name}.json`")
    trace = json.loads(p.read_text())
    qs = sorted((float(q), float(v)) for q, v in trace["quantiles"].items())
    if not qs or qs[-1][0] != 1.0 or qs[0][1] < 1 or any(b[1] < a[1] for a, b in zip(qs, qs[1:])):
        raise TraceError(f"{p}: quantiles must rise from a length >= 1 to the quantile 1.0 (the longest), got {qs}")
    return trace


def points(trace: dict) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, lengths) of the inverse CDF: flat from 0 up to the lowest recorded quantile."""
    qs = sorted((float(q), float(v)) for q, v in trace["quantiles"].items())
    probs = np.array([0.0] + [q for q, _ in qs])  # [Q + 1]
    lengths = np.array([qs[0][1]] + [v for _, v in qs])  # [Q + 1]
    return probs, lengths


def longest(trace: dict) -> int:
    return int(np.ceil(points(trace)[1][-1]))


def lengths(trace: dict, count: int, seed: int, draw: int) -> list[int]:
    """`count` completion budgets for draw `draw` (a round, the warm-up) of a cell seeded with `seed`."""
    assert count >= 1 and seed >= 0 and draw >= 0, (count, seed, draw)
    probs, lens = points(trace)
    u = np.random.default_rng([seed, draw]).random(count)  # [count] in [0, 1)
    return [max(1, int(round(x))) for x in np.interp(u, probs, lens)]


def digest(budgets: list[int]) -> str:
    """A short fingerprint of a draw's budgets, recorded in the stats: equal across engines given the same work."""
    return hashlib.sha256(json.dumps(budgets).encode()).hexdigest()[:16]


def from_stats(stats_path: str, name: str) -> dict:
    """A trace from one stats file's completion lengths (completions.completion_tokens), naming its source."""
    rec = json.loads(Path(stats_path).read_text())
    tokens = (rec.get("completions") or {}).get("completion_tokens")
    if rec.get("kind") != "generate" or rec.get("status") != "ok" or not tokens:
        raise TraceError(f"{stats_path}: not an ok generation stats file with completions.completion_tokens")
    return {
        "name": name,
        "description": "completion lengths of one published rollout (EOS on): quantiles of the last timed round's "
                       "completions; lengths are drawn linear between them, flat below the lowest",
        "source": {"stats": _rel(stats_path), "model": rec["model"], "backend": rec["backend"], "case": rec["case"],
                   "batch_size": rec.get("batch_size"), "started_at": rec["started_at"],
                   "mean": tokens.get("mean")},
        "quantiles": {str(q): float(tokens[k]) for k, q in QUANTILES},
    }


def _rel(p) -> str:
    """A path under the checkout as the checkout names it (the trace file is committed)."""
    p = Path(p).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def write(trace: dict, out) -> None:
    atomic.write_text(out, json.dumps(trace, indent=2) + "\n")
