"""Every published flex / vLLM pair (results/published/STANDINGS.md): only pairs measured side by side, regenerated
from the published stats; the README's answer beside it (test_headline.py)."""
import copy
import json
import re
from functools import cache

import pandas as pd
import pytest

from rollout_bench.report import standings

from .conftest import ROOT

PUBLISHED = ROOT / "results/published"
GEN = PUBLISHED / "h200-2026-12-04-session16/runs/generate/qwen3-4b"  # flex and vLLM at B = 8, both alone on GPU 0
TRAIN = PUBLISHED / "h200-2026-12-03-session12/learn/train/qwen3-small-warm"
MODELS = ["qwen3-4b", "qwen3-small-warm"]


def test_the_readmes_block_is_what_the_published_stats_give():
    """A publication lands with its README answer and its STANDINGS.md rows: `python -m rollout_bench.report.standings`
    rewrites both."""
    models = standings.gpu_models(ROOT / "config/config.yaml")
    assert {"qwen3-4b", "llama-3.2-3b", "gemma-4-e2b", "qwen3-4b-warm", "qwen3-small-warm"} <= set(models)
    assert standings.update(ROOT / "README.md", PUBLISHED, models, check=True)


@cache
def _template(backend: str) -> dict:
    return json.loads((GEN / {"flex": "flex/graphs", "vllm": "vllm/default"}[backend] / "sweep/bs8.json").read_text())


def _gen(root, folder, backend, tps, *, uuid, minute, bs=8, neighbours=0, status="ok", reason=None, case="sweep",
         variant=None, fresh=True, isolation=True):
    """A stats file from a real one, started at `minute` past 10:00 (each job's wall is under 90 s)."""
    rec = copy.deepcopy(_template(backend))
    rec.update(status=status, reason=reason, started_at=f"2026-12-01T{10 + minute // 60:02d}:{minute % 60:02d}:00+00:00",
               case=case, variant=variant or rec["variant"], decode_tps=tps)
    rec["workload"].update(batch_size=bs, case=case)
    rec["env"]["gpu_uuids"] = [uuid]
    rec["isolation"]["neighbours"] = [{"job": "other", "gpus": [0], "cpus": [0], "overlap_s": 1.0}] * neighbours
    if status != "ok":  # a skipped job's stats hold the common fields only
        rec = {k: rec[k] for k in ("schema_version", "kind", "status", "reason", "backend", "variant", "case", "model",
                                    "workload", "env", "gpu_ids", "started_at", "wall_s", "isolation")}
    if status == "ok":
        _consistent(rec)
    if not fresh:
        for r in rec["rounds"]:
            r.pop("prompt_tokens")
    if not isolation:
        del rec["isolation"]
    out = root / folder / "runs/generate/qwen3-4b" / backend / rec["variant"] / case / f"bs{bs}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec))
    return out


def _table(root) -> str:
    return standings.generation_table(standings.generation_frame(root))


def _rows(md: str, gpu: str = "H200") -> list[list[str]]:
    """The table's rows of `gpu`, without that column."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| qwen3")]
    return [r[:1] + r[2:] for r in rows if r[1] == gpu]


def test_a_pair_is_one_folder_one_gpu_each_job_alone(tmp_path):
    _gen(tmp_path, "h200-2026-12-01-a", "flex", 2000.0, uuid="u1", minute=0)
    _gen(tmp_path, "h200-2026-12-01-a", "vllm", 1000.0, uuid="u1", minute=10)
    # newer, but on two GPUs; then on one GPU in two folders (sessions)
    _gen(tmp_path, "h200-2026-12-02-b", "flex", 3000.0, uuid="u2", minute=20)
    _gen(tmp_path, "h200-2026-12-02-b", "vllm", 1000.0, uuid="u3", minute=30)
    _gen(tmp_path, "h200-2026-12-02-c", "flex", 3100.0, uuid="u9", minute=40)
    _gen(tmp_path, "h200-2026-12-02-d", "vllm", 1000.0, uuid="u9", minute=50)
    # newer, one GPU, but flex's lease saw another job during its rounds
    _gen(tmp_path, "h200-2026-12-03-e", "flex", 4000.0, uuid="u4", minute=60, neighbours=1)
    _gen(tmp_path, "h200-2026-12-03-e", "vllm", 1000.0, uuid="u4", minute=70)
    # newer, one GPU, each lease alone, but the two ran at once (leases in two lock directories see no neighbour)
    _gen(tmp_path, "h200-2026-12-03-f", "flex", 5000.0, uuid="u5", minute=80)
    _gen(tmp_path, "h200-2026-12-03-f", "vllm", 1000.0, uuid="u5", minute=80)
    # newer, one GPU, one after another, but a smoke run's job was on that GPU during vLLM's (its pair left out too)
    _gen(tmp_path, "h200-2026-12-04-g", "flex", 6000.0, uuid="u6", minute=100)
    _gen(tmp_path, "h200-2026-12-04-g", "vllm", 1000.0, uuid="u6", minute=110)
    _gen(tmp_path, "h200-2026-12-04-g/smoke", "flex", 9000.0, uuid="u6", minute=111)
    _gen(tmp_path, "h200-2026-12-04-g/smoke", "vllm", 1000.0, uuid="u6", minute=130)
    # folder a's vLLM file copied into a later folder
    (tmp_path / "h200-2026-12-05-h/x.json").parent.mkdir(parents=True)
    (tmp_path / "h200-2026-12-05-h/x.json").write_text(_gen(tmp_path, "h200-2026-12-01-a", "vllm", 1000.0, uuid="u1",
                                                             minute=10).read_text())

    df = standings.generation_frame(tmp_path)
    assert "h200-2026-12-05-h" not in set(df.folder) and not df.folder.str.contains("smoke").any()
    both = standings.pairs(df, "flex", "vllm", standings.GEN_KEY, "decode_tps")
    assert both.folder.tolist() == ["h200-2026-12-01-a"] and both.ratio.tolist() == [2.0]
    (row,) = _rows(_table(tmp_path))
    assert row[:9] == ["qwen3-4b", "sweep", "0", "greedy", "1", "8", "2,000", "1,000", "**2.00**"]
    # each side's other runs alone: flex in b, c and g; vLLM in b, d and e (not e's flex, f's runs, g's vLLM)
    assert row[9:12] == ["3,000–6,000 (3)", "1,000 (3)", "2,358 (56%)"]
    assert row[-2] == "own" and row[-1] == "2026-12-01 [`h200-2026-12-01-a`](results/published/h200-2026-12-01-a/)"


def _job(root, folder, backend, cells, *, uuid, minute, wall_s):
    """The record of one generation job (one process) that ran `cells` [(case, bs)], written beside them."""
    variant = _template(backend)["variant"]
    rec = {"kind": "generate_job", "backend": backend, "variant": variant, "model": "qwen3-4b",
           "started_at": f"2026-12-01T10:{minute:02d}:00+00:00", "wall_s": wall_s, "env": {"gpu_uuids": [uuid]},
           "cells": [{"out": f"results/generate/qwen3-4b/{backend}/{variant}/{case}/bs{bs}.json"} for case, bs in cells]}
    out = root / folder / "runs/generate/qwen3-4b" / backend / variant / "job-base.json"
    out.write_text(json.dumps(rec))


def test_a_jobs_own_record_and_its_other_cells_are_not_beside_it(tmp_path):
    """One process serves a job's cells one after the other: its record's window spans them, and one cell's window
    (started_at to the second) can reach into the next's. Neither makes a cell 'beside other jobs'; another job's
    record on the GPU during a cell still does."""
    _gen(tmp_path, "h200-a", "flex", 2000.0, uuid="u1", minute=0)  # each wall 57 s: B = 64 starts 50 s into B = 8's
    _gen(tmp_path, "h200-a", "flex", 9000.0, uuid="u1", minute=1, bs=64)
    _job(tmp_path, "h200-a", "flex", [("sweep", 8), ("sweep", 64)], uuid="u1", minute=0, wall_s=200.0)
    _gen(tmp_path, "h200-a", "vllm", 1000.0, uuid="u1", minute=10)
    _gen(tmp_path, "h200-a", "vllm", 3000.0, uuid="u1", minute=12, bs=64)
    _job(tmp_path, "h200-a", "vllm", [("sweep", 8)], uuid="u1", minute=10, wall_s=200.0)  # B = 64 is not its cell
    df = standings.generation_frame(tmp_path).set_index(["backend", "batch_size"])
    assert df.overlaps.to_dict() == {("flex", 8): 0, ("flex", 64): 0, ("vllm", 8): 0, ("vllm", 64): 1}
    assert [r[5:9] for r in _rows(_table(tmp_path))] == [["8", "2,000", "1,000", "**2.00**"]]


def test_a_cell_is_per_gpu_model_so_a_newer_pair_on_another_gpu_hides_no_older_one(tmp_path):
    """A ratio on an H200 and one on an H100 are two findings: a row each, each side's other runs per GPU model."""
    _gen(tmp_path, "h200-a", "flex", 2000.0, uuid="u1", minute=0)
    _gen(tmp_path, "h200-a", "vllm", 1000.0, uuid="u1", minute=10)
    for backend, tps, minute in (("flex", 1500.0, 20), ("vllm", 1500.0, 30)):
        path = _gen(tmp_path, "h100-b", backend, tps, uuid="u2", minute=minute)
        rec = json.loads(path.read_text())
        rec["env"]["gpu_name"] = "NVIDIA H100 80GB HBM3"
        path.write_text(json.dumps(rec))
    md = _table(tmp_path)
    assert [r[5:9] for r in _rows(md)] == [["8", "2,000", "1,000", "**2.00**"]]
    assert [r[5:11] for r in _rows(md, "H100 80GB HBM3")] == [["8", "1,500", "1,500", "**1.00**", "—", "—"]]


def test_stats_that_do_not_say_who_was_beside_them_still_pair(tmp_path):
    """Stats before 2026-11-30 have no isolation record; a pair of them counts (the window check still holds)."""
    _gen(tmp_path, "h200-a", "flex", 2000.0, uuid="u1", minute=0, isolation=False)
    _gen(tmp_path, "h200-a", "vllm", 1000.0, uuid="u1", minute=10, isolation=False)
    assert _rows(_table(tmp_path))[0][8] == "**2.00**"


def test_the_newest_pair_wins_its_backends_fastest_variant_and_re_sent_prompts_are_named(tmp_path):
    _gen(tmp_path, "h200-a", "flex", 2000.0, uuid="u1", minute=0)
    _gen(tmp_path, "h200-a", "vllm", 1000.0, uuid="u1", minute=10)
    _gen(tmp_path, "h200-b", "flex", 1500.0, uuid="u2", minute=20, fresh=False)
    _gen(tmp_path, "h200-b", "flex", 1000.0, uuid="u2", minute=25, variant="eager")
    _gen(tmp_path, "h200-b", "vllm", 2000.0, uuid="u2", minute=30)
    (row,) = _rows(_table(tmp_path))
    assert row[6:9] == ["1,500", "2,000", "**0.75**"] and row[-2] == "re-sent" and "h200-b" in row[-1]
    assert row[9:11] == ["2,000 (1)", "1,000 (1)"]


def _consistent(rec):
    """Every round decodes the same tokens (ignore_eos), at decode_tps in the median round; the fastest's rate."""
    walls = sorted(r["wall_s"] for r in rec["rounds"])
    decoded = round(rec["decode_tps"] * walls[len(walls) // 2])
    for r in rec["rounds"]:
        r["decoded_tokens"] = decoded
    rec["decode_tps_best"] = decoded / walls[0]


def _spread(path, walls):
    rec = json.loads(path.read_text())
    rec["rounds"] = [{**rec["rounds"][0], "wall_s": w} for w in walls]
    _consistent(rec)
    path.write_text(json.dumps(rec))


def test_a_newer_pair_whose_rounds_spread_hides_no_steady_one(tmp_path):
    _gen(tmp_path, "h200-a", "flex", 2000.0, uuid="u1", minute=0)
    _gen(tmp_path, "h200-a", "vllm", 1000.0, uuid="u1", minute=10)
    _gen(tmp_path, "h200-b", "flex", 3000.0, uuid="u2", minute=20)
    _spread(_gen(tmp_path, "h200-b", "vllm", 1000.0, uuid="u2", minute=30), [1.0, 1.28, 1.1])  # 28%
    (row,) = _rows(_table(tmp_path))
    assert row[6:9] == ["2,000", "1,000", "**2.00**"] and "h200-a" in row[-1] and row[12] == "1.8%, 1.8%"
    assert row[9:11] == ["3,000 (1)", "1,000 (1)"]  # the unsteady pair's runs, beside it
    # with no steady pair the newest one stands, its ratio marked and not in bold
    (tmp_path / "only").mkdir()
    (tmp_path / "h200-b").rename(tmp_path / "only/h200-b")
    (row,) = _rows(_table(tmp_path / "only"))
    assert row[6:8] == ["3,000", "1,000"] and row[12] == "1.8%, 28.0%"
    # ... and flagged with its range over the rounds: flex's slowest against vLLM's fastest (1,100 tokens in 1.0 s),
    # flex's fastest against vLLM's slowest (in 1.28 s)
    ratio, lo, hi = re.fullmatch(r"(\S+) ⚑ \((\S+)–(\S+)\)", row[8]).groups()
    assert ratio == "3.00" and float(lo) < 3.00 * 1000 / 1100 < float(hi) and 3.00 * 1.28 * 1000 / 1100 < float(hi)


def test_cells_without_a_pair_are_named_under_the_table_and_never_compared(tmp_path):
    # B = 64: vLLM skipped, flex alone -> a row; B = 16: apart; B = 32: flex only; B = 128: vLLM skipped, flex not run
    _gen(tmp_path, "h200-a", "flex", 2000.0, uuid="u1", bs=64, case="greedy", minute=0)
    _gen(tmp_path, "h200-a", "vllm", None, uuid="u1", bs=64, case="greedy", status="skipped", reason="vLLM says no",
         minute=10)
    _gen(tmp_path, "h200-a", "flex", 3000.0, uuid="u1", bs=16, minute=20)
    _gen(tmp_path, "h200-b", "vllm", 1000.0, uuid="u2", bs=16, minute=30)
    _gen(tmp_path, "h200-a", "flex", 4000.0, uuid="u1", bs=32, minute=40)
    _gen(tmp_path, "h200-a", "vllm", None, uuid="u1", bs=128, status="skipped", reason="vLLM says no", minute=50)
    md = _table(tmp_path)
    (row,) = _rows(md)
    assert row[:9] == ["qwen3-4b", "greedy", "0", "greedy", "1", "64", "2,000", "skipped", "—"]
    assert row[-2] == "—"  # re-sent prompts favour vLLM's prefix cache: nothing to say without vLLM
    assert "qwen3-4b greedy B = 64 (H200): vllm skipped: vLLM says no." in md
    assert ("Measured, each alone on a GPU, but never side by side (tok/s; not comparable): qwen3-4b sweep B = 16 "
            "(H200): flex 3,000 (`h200-a`), vllm 1,000 (`h200-b`).") in md
    assert ("Measured alone with one of the two (tok/s): qwen3-4b sweep B = 32 (H200): flex 4,000 (`h200-a`), vllm not run."
            in md)
    assert "No figure of either alone on a GPU: qwen3-4b sweep B = 128 (H200): flex not run, vllm skipped." in md
    # one model's cells together, by batch: the table row (B = 64) and the lists keep that order
    cells = standings.cells(standings.generation_frame(tmp_path), "flex", "vllm", standings.GEN_KEY, "decode_tps")
    assert [c.key["batch_size"] for c in cells] == [16, 32, 64, 128]


def _train(root, folder, backend, step_s, *, uuid, minute, neighbours=0, frozen=False):
    rec = json.loads((TRAIN / backend / "steps100-seed3407.json").read_text())
    rec["median_step_s"] = step_s
    rec["started_at"] = f"2026-12-01T{10 + minute // 60:02d}:{minute % 60:02d}:00+00:00"
    rec["wall_s"] = 60.0
    rec["workload"]["frozen"] = frozen
    rec["env"]["gpu_uuids"] = [uuid]
    rec["isolation"]["neighbours"] = rec["isolation"]["neighbours"][:neighbours]
    out = root / folder / "learn/train/qwen3-small-warm" / backend / f"steps100-seed3407{'-frozen' if frozen else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec))


def test_grpo_pairs_are_side_by_side_too_and_a_frozen_control_is_no_rollout(tmp_path):
    _train(tmp_path, "h200-a", "flex", 2.0, uuid="u1", minute=0, neighbours=7)  # eight runs on one GPU
    _train(tmp_path, "h200-a", "vllm", 2.5, uuid="u1", minute=10, neighbours=7)
    md = standings.train_table(standings.train_frame(tmp_path))
    assert md.startswith("No GRPO run of flex and of vllm has been measured side by side")
    assert "No figure of either alone on a GPU: qwen3-small-warm, 8 × 8 × 512 (H200): flex ok beside other jobs" in md
    _train(tmp_path, "h200-a", "flex", 2.0, uuid="u1", minute=0)
    _train(tmp_path, "h200-a", "vllm", 2.5, uuid="u1", minute=10)
    _train(tmp_path, "h200-a", "flex", 9.0, uuid="u1", minute=20, frozen=True)
    df = standings.train_frame(tmp_path)
    assert len(df) == 2
    assert "| qwen3-small-warm | H200 | 32 | 8 × 8 × 512 | 2.000 | 2.500 | **0.80** |" in standings.train_table(df)


def test_a_backends_fastest_variant_is_its_shortest_step_where_lower_is_better():
    df = pd.DataFrame([
        {"k": 1, "backend": "a", "variant": "slow", "status": "ok", "s": 3.0},
        {"k": 1, "backend": "a", "variant": "fast", "status": "ok", "s": 2.0},
        {"k": 1, "backend": "b", "variant": "default", "status": "ok", "s": 4.0},
    ]).assign(folder="f", gpu_uuids="u", neighbours=0, overlaps=0, started_at="2026-12-01T10:00:00+00:00")
    (p,) = standings.pairs(df, "a", "b", ["k"], "s", ascending=True).itertuples()
    assert (p.variant_a, p.ratio) == ("fast", 0.5)


def test_a_copy_counts_in_the_earliest_folder_by_its_date():
    df = pd.DataFrame([{"folder": f, "k": 1, "backend": "flex", "variant": "graphs", "started_at": "t"}
                       for f in ("h200x2-2026-12-01-session5", "h200-2026-12-02-session9")])
    assert standings._once(df, ["k"]).folder.tolist() == ["h200x2-2026-12-01-session5"]


def test_the_block_keeps_the_gpu_profiles_models(tmp_path):
    _gen(tmp_path, "h200-a", "flex", 2000.0, uuid="u1", minute=0)
    _gen(tmp_path, "h200-a", "vllm", 1000.0, uuid="u1", minute=10)
    assert "**2.00**" in standings.block(tmp_path, ["qwen3-4b"])
    assert "**2.00**" not in standings.block(tmp_path, ["llama-3.2-3b"])


def test_the_command_rewrites_the_answer_and_the_history_and_check_fails_until_it_has(tmp_path, capsys):
    _gen(tmp_path / "pub", "h200-a", "flex", 2000.0, uuid="u1", minute=0)
    _gen(tmp_path / "pub", "h200-a", "vllm", 1000.0, uuid="u1", minute=10)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{standings.BEGIN}\nSTALE\n{standings.END}\n\n{standings.TARGETS_BEGIN}\nSTALE\n"
                      f"{standings.TARGETS_END}\nafter\n")
    args = ["--published", str(tmp_path / "pub"), "--readme", str(readme)]
    assert standings.main(args + ["--check"]) == 1 and "STALE" in readme.read_text()
    assert standings.main(args) == 0
    text, history = readme.read_text(), (tmp_path / "pub" / standings.HISTORY).read_text()
    # no headline run under pub: the answer says so; every published pair is in the history
    assert "STALE" not in text and "No headline run is published yet" in text
    assert text.endswith(f"{standings.END}\n\n{standings.TARGETS_BEGIN}\nNo headline run is published yet.\n"
                         f"{standings.TARGETS_END}\nafter\n") and "**2.00**" in history
    assert standings.main(args + ["--check"]) == 0
    (tmp_path / "pub" / standings.HISTORY).write_text("edited by hand\n")
    assert standings.main(args + ["--check"]) == 1
    readme.write_text("# no markers\n")
    assert standings.main(args) == 2
    assert "expected one '<!-- standings:begin -->' line" in capsys.readouterr().err
    assert standings.main(["--published", str(tmp_path / "nowhere"), "--readme", str(readme)]) == 2
    assert f"--published {tmp_path / 'nowhere'}: not found" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["no markers", f"{standings.END}\n{standings.BEGIN}",
                                  f"{standings.BEGIN}\n{standings.BEGIN}\n{standings.END}"])
def test_replace_block_refuses_a_readme_without_one_ordered_pair_of_markers(text):
    with pytest.raises(ValueError, match="put them where the table goes"):
        standings.replace_block(text, "new")
