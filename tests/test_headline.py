"""The README's answer: the newest whole headline run alone, its pairs' ratios flagged where a side's rounds spread."""
import copy
import json

import pytest

from rollout_bench.pipeline import invocation, publish
from rollout_bench.report import headline

from .conftest import ROOT

GEN = ROOT / "results/published/h200-2026-12-04-session16/runs/generate/qwen3-4b"
TRAIN = ROOT / "results/published/h200-2026-12-03-session12/learn/train/qwen3-small-warm"


def _cell(res, backend, case, bs, tps, walls, uuid="GPU-a", commit="c0ffee", lora=0, others=None, cpu=None):
    """cpu: the engine thread's CPU seconds and the collector's pause in each round (round_probe), if recorded."""
    rec = json.loads((GEN / {"flex": "flex/graphs", "vllm": "vllm/default"}[backend] / "sweep/bs8.json").read_text())
    rec = copy.deepcopy(rec)
    # under ignore_eos every round decodes the same tokens: tps at the median round
    decoded = round(tps * sorted(walls)[len(walls) // 2])
    rec.update(case=case, decode_tps=tps, decode_tps_best=decoded / min(walls),
               rounds=[{"wall_s": w, "decoded_tokens": decoded, "prompt_tokens": 10} for w in walls])
    for r, (thread_s, gc_s) in zip(rec["rounds"], cpu or []):
        r["process"] = {"cpu_s": thread_s, "thread_cpu_s": thread_s, "gc": {"passes": [9, 1, 1], "pause_s": gc_s}}
    rec["workload"].update(case=case, batch_size=bs, lora_rank=lora)
    rec["env"].update(gpu_uuids=[uuid], git_commit=commit, git_dirty=False)
    if others is not None:
        rec["isolation"]["host_load"] = {"busy": others + 0.05, "own": 0.05, "others": others}
    if backend == "flex":
        rec["round_gate"] = {"passed": True, "rows": [0, bs - 1], "bucket": bs, "tokens": 2 * 512,
                             "first_mismatch": None}
    out = res / "generate/qwen3-4b" / backend / rec["variant"] / case / f"bs{bs}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec))


def _train(res, backend, step):
    rec = json.loads(next(TRAIN.glob("flex/*.json")).read_text())
    rec.update(backend=backend, median_step_s=step, setup_s=30.0, wall_s=100.0, model="qwen3-4b")
    rec["workload"]["frozen"] = False
    out = res / "train/qwen3-4b" / backend / "steps12-seed3407.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec))


def _job(res, backend, setup, wall):
    out = res / "generate/qwen3-4b" / backend / "x" / "job-base.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"kind": "generate_job", "setup_s": setup, "wall_s": wall,
                               "cells": [{"setup_s": setup, "timed_s": wall - setup}]}))


def _run(tmp_path, name, profile="headline", flex_walls=(1.0, 1.01, 1.02), invocation=None):
    res = tmp_path / name / "results"
    _cell(res, "flex", "greedy", 8, 3000.0, flex_walls)
    _cell(res, "vllm", "greedy", 8, 2000.0, (1.0, 1.0, 1.03))
    _cell(res, "flex", "greedy", 64, 9000.0, (1.0, 1.2, 1.0), others=0.3,  # spread 20%: no ratio
          cpu=[(0.95, 0.01), (1.14, 0.19), (0.96, 0.01)])
    _cell(res, "vllm", "greedy", 64, 10000.0, (1.0, 1.0, 1.0))
    _cell(res, "flex", "lora", 64, 8000.0, (1.0, 1.0, 1.0), lora=32)
    _train(res, "flex", 2.0)
    _train(res, "vllm", 4.0)
    _job(res, "flex", 10.0, 50.0)
    _job(res, "vllm", 30.0, 70.0)
    cell = "results/generate/qwen3-4b/{}/greedy/bs8.json"
    (res / "mismatch").mkdir(parents=True)
    (res / "mismatch/qwen3-4b.json").write_text(json.dumps({"kind": "mismatch", "workload": {"rows": 4}, "cells": {
        cell.format("flex/graphs"): {"rows": 4, "tokens": 2048, "mean_abs": 0.0312, "max_abs": 0.214, "kl_k3": 7.7e-4},
        cell.format("vllm/default"): {"reason": "the cell is skipped"}}}))
    if invocation is not None:
        (res / "logs").mkdir(parents=True, exist_ok=True)
        (res / "logs/invocation.json").write_text(json.dumps(invocation))
    cfg = tmp_path / name / "config.yaml"
    cfg.write_text(f"profile: {profile}\ntrain_backends: [flex, vllm]\nworkload: {{max_round_spread: 0.05, cases: "
                   f"{{greedy: {{batch_sizes: [8, 64]}}, lora: {{batch_sizes: [8, 64]}}}}}}\n")
    return publish.publish(name, "snakemake --cores 16 --resources gpu=1 --config profile=headline", str(cfg),
                           results=str(res))


def test_the_answer_is_the_newest_headline_run_alone(tmp_path):
    root = tmp_path / "a" / "results" / "published"
    assert "No headline run is published yet" in headline.block(root)
    _run(tmp_path, "a")
    text = headline.block(root)
    assert "`snakemake --cores 16 --resources gpu=1 --config profile=headline`" in text and "c0ffee" in text
    rows = {line.split("|")[1].strip() + " " + line.split("|")[2].strip(): line for line in text.splitlines()
            if line.startswith("| greedy") or line.startswith("| lora")}
    assert list(rows) == ["greedy 8", "greedy 64"]  # the config's order
    assert "**1.50**" in rows["greedy 8"]  # 3000 / 2000
    # beside speed, each side's logprobs against the trainer's (mismatch job), '—' where a side was not scored
    assert rows["greedy 8"].endswith("| 0.031 (0.21); 7.7e-04 · — |") and rows["greedy 64"].endswith("| — · — |")
    assert "on up to 4 rows of the cell's last timed round" in text
    # flex's rounds spread 20% > 5%: the ratio is flagged, with its range over the rounds: flex's slowest round
    # (9,000 tokens in 1.2 s) against vLLM's fastest (10,000 tok/s), and flex's fastest against vLLM's slowest
    assert "| 0.90 ⚑ (0.75–0.90) |" in rows["greedy 64"] and "**" not in rows["greedy 64"].split("|")[5]
    # ... with the host's load elsewhere during those rounds, where the stats record it
    assert "greedy, B = 64: flagged, rounds spread flex 20% with 30% of the host's CPUs busy elsewhere" in text
    # ... and where its slowest round's time went against its fastest's (first of the equal fastest)
    assert ("20% with 30% of the host's CPUs busy elsewhere; its slowest round 1.20 s (0.19 s collecting garbage, "
            "the engine's thread on a CPU 95% of it), its fastest 1.00 s (95%) (over 5%); flex / vllm 0.75–0.90 over "
            "the rounds") in text
    assert "| 20.0% (30%), 0.0% |" in rows["greedy 64"]
    assert "lora (LoRA r32), B = 64: flex ok, vllm not run" in text  # one side only: named, not compared
    assert "not run by either: lora B = 8" in text and "This run did not finish" in text
    assert "**0.50**" in text  # GRPO: 2.0 s a step against 4.0
    # start-up: the generation jobs' and GRPO runs' set-up over their walls: (10 + 30 + 30 + 30) / (50 + 70 + 200)
    assert "100 s of 320 s setting up (31%" in text
    assert "in each of its 3 greedy cells, completions of the last timed round (rows spread over the batch, 3,072" in text
    assert "wall time is not recorded in this folder" in text
    _run(tmp_path, "b", invocation={"command": "snakemake", "wall_s": 871.3, "ok": True})
    assert "The invocation took 871 s (14.5 min) from start to end." in headline.block(tmp_path / "b/results/published")
    # an invocation stopped before its end: how long after its start its last recorded job ended
    folder = _run(tmp_path, "c", invocation={"command": "snakemake", "t0": 0.0, "wall_s": None, "ok": None})
    t0 = headline.last_end(headline._read(folder)) - 250.0
    (folder / "logs/invocation.json").write_text(json.dumps({"command": "snakemake", "t0": t0, "wall_s": None}))
    assert ("did not record its end (stopped before its last jobs finished); its last job with a record ended 250 s "
            "(4.2 min) after its start") in headline.block(tmp_path / "c/results/published")


def test_other_profiles_never_make_the_answer(tmp_path):
    root = tmp_path / "pub"
    root.mkdir()
    gpu = _run(tmp_path, "b", profile="gpu")
    gpu.rename(root / gpu.name)
    assert headline.folders(root) == [] and "No headline run" in headline.block(root)


def test_a_run_cut_short_is_not_the_answer_while_a_finished_one_exists(tmp_path):
    root = tmp_path / "pub"
    root.mkdir()
    done = _run(tmp_path, "done", invocation={"command": "snakemake", "wall_s": 700.0, "ok": True})
    done.rename(root / done.name)
    cut = _run(tmp_path, "cut", invocation={"command": "snakemake", "t0": 0.0, "wall_s": None, "ok": None})
    cut.rename(root / cut.name)
    for name, at in (("done", "2026-12-06T02:19:02+00:00"), ("cut", "2026-12-07T00:07:10+00:00")):
        man = json.loads((root / name / "MANIFEST.json").read_text())
        (root / name / "MANIFEST.json").write_text(json.dumps({**man, "published_at": at}))
    assert [f.name for f in headline.folders(root)] == ["done", "cut"]  # "cut" published last
    text = headline.block(root)
    assert text.startswith("From [`done`]") and "The invocation took 700 s" in text
    assert "A newer headline run was cut short before its end, or ran part of the profile, and is not the answer: " \
           "`cut`" in text
    # a finished run of named targets only (part of the profile) is not the answer either
    (root / "cut" / "logs/invocation.json").write_text(json.dumps(
        {"command": "snakemake results/generate/qwen3-4b/vllm/default/job-base.json --cores 16 --config "
                    "profile=headline", "wall_s": 300.0, "ok": True}))
    assert invocation.targets(root / "cut") == ["results/generate/qwen3-4b/vllm/default/job-base.json"]
    assert invocation.targets(root / "done") == [] and headline.block(root).startswith("From [`done`]")
    # a plugin's option the local parser does not know is left over; a command that cannot be read says where it is
    inv = root / "cut" / "logs/invocation.json"
    inv.write_text(json.dumps({"command": "snakemake x.json --slurm-foo 1 --cores 2", "wall_s": 1.0, "ok": True}))
    assert invocation.targets(root / "cut") == ["x.json"]
    inv.write_text(json.dumps({"command": "snakemake 'x.json --cores 2", "wall_s": 1.0, "ok": True}))
    with pytest.raises(ValueError, match="invocation.json: its command cannot be read"):
        invocation.targets(root / "cut")
    (root / "cut" / "logs/invocation.json").write_text(json.dumps({"command": "snakemake", "t0": 0.0, "wall_s": None}))
    # with no finished run, the newest is the answer, and says it did not end
    (root / "done").rename(tmp_path / "aside")
    assert headline.block(root).startswith("From [`cut`]") and "cut short" not in headline.block(root)


def test_the_block_says_which_jobs_compiled_what_their_caches_lacked():
    def job(backend, case, compiled, status="ok"):
        return {"kind": "generate_job", "backend": backend, "cells": [{"case": case, "status": status}],
                "compile_cache": {"compiled": {"TRITON_CACHE_DIR": False, "VLLM_CACHE_ROOT": compiled}}}

    train = {"kind": "train", "backend": "vllm", "status": "ok",
             "compile_cache": {"compiled": {"VLLM_CACHE_ROOT": False}}}
    recs = [(None, job("flex", "greedy", False)), (None, job("vllm", "lora", True)), (None, train),
            (None, job("vllm", "greedy", False, status="skipped"))]  # ran nothing: not counted
    assert headline.cache_note(recs) == (" Compile caches: 2 of 3 generation jobs and GRPO runs added no files to "
                                         "them; vllm's lora job added its own compiled kernels.")
    recs.append((None, {**train, "backend": "flex", "compile_cache": {"compiled": {"TRITON_CACHE_DIR": True}}}))
    assert headline.cache_note(recs).endswith("vllm's lora job, flex's GRPO run added their own compiled kernels.")
    assert headline.cache_note([(None, {"kind": "generate_job", "compile_cache": {"state": "warm"}})]) == ""


def test_the_block_says_where_the_set_up_went():
    def cell(before, build, gate, prepare, warmup):
        phases = {"before_s": before, "build_s": build, "gate_s": gate, "prepare_s": prepare, "warmup_s": warmup}
        return {"setup_s": sum(phases.values()), "setup_phases": phases}

    flex = [cell(8.0, 3.0, 9.5, 1.0, 2.0), cell(0.0, 0.0, 0.0, 9.0, 6.0)]  # the first cell pays the build and gate
    vllm = [cell(9.0, 24.0, 0.0, 0.0, 2.0), {"setup_s": 1.0, "setup_phases": None}]  # a failed cell records none
    recs = [(None, {"kind": "generate_job", "cells": c, "setup_s": sum(x["setup_s"] for x in c), "wall_s": 100.0})
            for c in (flex, vllm)]
    recs.append((None, {"kind": "train", "status": "ok", "setup_s": 21.0, "wall_s": 42.0}))
    share = headline.startup(recs)
    assert share["setup_s"] == 38.5 + 35.0 + 1.0 + 21.0 and share["wall_s"] == 242.0
    assert headline.startup_note(share) == (": process starts 17 s, engine builds 27 s, flex's gates against HF 10 s, "
                                            "cells' captures 10 s, warm-up rounds 10 s, the GRPO runs' set-up 21 s")
    # a run whose cells record no phases: what set-up covers
    old = [(None, {"kind": "generate_job", "cells": [{"setup_s": 5.0}], "setup_s": 5.0, "wall_s": 9.0})]
    assert headline.startup_note(headline.startup(old)) == ": imports, loads, compiles, graph capture, gates and warm-ups"
