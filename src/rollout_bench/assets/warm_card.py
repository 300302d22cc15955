"""The warm model's card: its training knobs, its held-out figures, and the gates those must pass.

A warm start that does not end its completions, or whose GRPO groups all score alike, would put the
benchmark back where it was on random weights (reward constant, advantages zero); the rule fails then,
with the numbers, rather than hand GRPO such a model.
"""
import json
from dataclasses import asdict, dataclass
from pathlib import Path

CARD = "card.json"


class GateError(RuntimeError):
    pass


@dataclass(frozen=True)
class Gates:
    eos_rate: float = 0.95  # greedy completions ending with eos before max_new_tokens
    format_rate: float = 0.8  # greedy completions rewards.match_format_exactly accepts
    group_std_rate: float = 0.5  # temperature-1.0 groups whose summed reward is not constant
    # greedy answer accuracy within [lo, hi]; None records it ungated (tiny CPU models cannot do sums)
    accuracy_band: tuple[float, float] | None = None

    def __post_init__(self):
        assert self.accuracy_band is None or self.accuracy_band[0] <= self.accuracy_band[1], self.accuracy_band


def check(figures: dict, gates: Gates) -> dict:
    """Gate name -> {value, threshold, ok}."""
    out = {name: {"value": figures[name], "threshold": f">= {getattr(gates, name)}",
                  "ok": figures[name] >= getattr(gates, name)}
           for name in ("eos_rate", "format_rate", "group_std_rate")}
    if gates.accuracy_band is not None:
        lo, hi = gates.accuracy_band
        out["accuracy"] = {"value": figures["accuracy"], "threshold": f"in [{lo}, {hi}]",
                           "ok": lo <= figures["accuracy"] <= hi}
    return out


def card(figures: dict, gates: Gates, training: dict) -> dict:
    checked = check(figures, gates)
    return {"passed": all(g["ok"] for g in checked.values()), "gates": checked, "figures": figures,
            "thresholds": asdict(gates), "training": training}


def failures(c: dict) -> list[str]:
    return [f"{name} = {g['value']:.3f}, needs {g['threshold']}" for name, g in c["gates"].items() if not g["ok"]]


def enforce(c: dict, where: str = "warmstart") -> None:
    """Raise GateError naming every failed gate with its number and the config knobs to turn."""
    bad = failures(c)
    if bad:
        f = c["figures"]
        raise GateError(f"{where}: warm model failed its gates: {'; '.join(bad)} (greedy length p10/p50/p90 "
                        f"{f['length_p10']:.0f}/{f['length_p50']:.0f}/{f['length_p90']:.0f} tokens, accuracy "
                        f"{f['accuracy']:.3f}). Train longer or harder (warmstart.steps, warmstart.learning_rate) "
                        f"or relax warmstart.gates")


def write(c: dict, model_dir) -> Path:
    p = Path(model_dir) / CARD
    p.write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
    return p


def read(model_dir) -> dict:
    return json.loads((Path(model_dir) / CARD).read_text())
