"""One generation job, one process, one engine: its cells in order, a stats file each, and what it does when a cell
fails, when the process dies, and with a trace's per-completion budgets."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rollout_bench.core import stats
from rollout_bench.core.workload import Sampling
from rollout_bench.generation import job as generation_job
from rollout_bench.generation import trace
from rollout_bench.report import aggregate

from .conftest import ROOT

BASE = {"lora_rank": 0, "lora_alpha": 0, "num_generations": 1, "sampling": Sampling().to_dict(),
        "sampling_preset": "greedy", "ignore_eos": True, "max_new_tokens": 4, "n_prompts": 2, "prompt_tokens": [1, 4096],
        "prompt_offset": 0, "shuffle_seed": 3407, "chat_template": "grpo", "warmup_prompts": 1, "rounds": 2,
        "max_round_spread": None, "spread_retries": 0, "trace": None, "dataset": "synthetic", "device": "cpu",
        "dtype": "float32", "options": {}}


def cells(tmp_path, dataset, *specs) -> list[generation_job.Cell]:
    """specs: (case, batch size, workload overrides); each cell's prompts after the ones before it, as config's
    prompt_offset places them."""
    out, offset = [], 0
    for case, bs, over in specs:
        wl = {**BASE, "case": case, "batch_size": bs, "n_prompts": bs, "prompt_offset": offset, **over}
        offset += wl["n_prompts"] * wl["rounds"] * (1 + wl["spread_retries"]) + wl["warmup_prompts"]
        out.append(generation_job.Cell(case, wl, dataset, str(tmp_path / case / f"bs{bs}.json")))
    return out


def test_one_process_serves_several_cells_on_one_engine(tiny_assets, tmp_path, monkeypatch):
    from rollout_bench.backends import flex

    built = []
    real = flex.load
    monkeypatch.setattr(flex, "load", lambda spec: built.append(spec) or real(spec))
    cs = cells(tmp_path, tiny_assets["dataset"], ("greedy", 2, {}), ("greedy", 4, {}),
               ("longer", 2, {"max_new_tokens": 6}))
    job = generation_job.run_group(backend="flex", variant="eager", model="qwen3-tiny", cells=cs,
                                   model_dir=tiny_assets["model"], adapter_dir=None, out=str(tmp_path / "job.json"))
    assert len(built) == 1 and built[0].batch_size == 4 and built[0].max_new_tokens == 6  # sized for them all
    recs = [stats.load(c.out) for c in cs]
    assert [r["status"] for r in recs] == ["ok"] * 3 and [r["n_decoded_tokens"] for r in recs] == [8, 16, 12]
    assert all(r["gate"]["passed"] for r in recs)  # gated once, before the first cell
    # each cell's window starts where the one before ended: set-up then timed rounds, no gap, no overlap
    assert [r["job"]["index"] for r in recs] == [0, 1, 2] and job == json.loads((tmp_path / "job.json").read_text())
    assert job["setup_s"] == pytest.approx(sum(c["setup_s"] for c in job["cells"]), abs=1e-3)
    assert recs[0]["setup_s"] > recs[1]["setup_s"]  # the first pays for load, compile and the gate
    assert sum(c["wall_s"] for c in job["cells"]) <= job["wall_s"]
    # ... and says so: its set-up split into its phases, which add up to it
    phases = [r["setup_phases"] for r in recs]
    assert phases[0]["build_s"] > 0 and phases[0]["gate_s"] == recs[0]["gate"]["seconds"] > 0
    assert all(p["build_s"] == p["gate_s"] == 0 for p in phases[1:])
    for r, p in zip(recs, phases):
        assert sum(p.values()) == pytest.approx(r["setup_s"], abs=5e-3) and p["warmup_s"] > 0
    assert [c["setup_phases"] for c in job["cells"]] == phases


def test_a_failing_cell_is_recorded_and_the_next_one_runs(tiny_assets, tmp_path, monkeypatch):
    from rollout_bench.generation import measure

    real = measure.measure_cell

    def flaky(gen, spec, workload, attempts, warmup, cuda):
        if workload["case"] == "broken":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(gen, spec, workload, attempts, warmup, cuda)

    monkeypatch.setattr(measure, "measure_cell", flaky)
    cs = cells(tmp_path, tiny_assets["dataset"], ("broken", 2, {}), ("greedy", 2, {}))
    job = generation_job.run_group(backend="hf_generate", variant="default", model="qwen3-tiny", cells=cs,
                                   model_dir=tiny_assets["model"], adapter_dir=None, out=str(tmp_path / "job.json"))
    bad, good = stats.load(cs[0].out), stats.load(cs[1].out)
    assert bad["status"] == "failed" and "illegal memory access" in bad["reason"] and "decode_tps" not in bad
    assert good["status"] == "ok" and good["decode_tps"] > 0
    assert [c["status"] for c in job["cells"]] == ["failed", "ok"]


KILLED = """
import sys, time
from rollout_bench.generation import job as generation_job, measure
real = measure.measure_cell
def slow(gen, spec, workload, attempts, warmup, cuda):
    if workload["case"] == "second":
        print("SECOND", flush=True)
        time.sleep(120)
    return real(gen, spec, workload, attempts, warmup, cuda)
measure.measure_cell = slow
cells = [generation_job.Cell(**c) for c in {cells}]
generation_job.run_group(backend="hf_generate", variant="default", model="qwen3-tiny", cells=cells,
                         model_dir={model!r}, adapter_dir=None, out={job!r})
"""


def test_a_killed_job_leaves_no_file_for_the_cells_it_did_not_finish(tiny_assets, tmp_path):
    cs = cells(tmp_path, tiny_assets["dataset"], ("first", 2, {}), ("second", 2, {}))
    code = KILLED.format(cells=[c.__dict__ for c in cs], model=tiny_assets["model"], job=str(tmp_path / "job.json"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "SECOND"  # the first cell is written, the second is running
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert stats.load(cs[0].out)["status"] == "ok"
    assert not Path(cs[1].out).exists() and not (tmp_path / "job.json").exists()
    assert not list((tmp_path / "second").glob("*")) if (tmp_path / "second").exists() else True


def test_a_trace_gives_every_engine_the_same_budgets(tiny_assets, tmp_path, monkeypatch):
    """flex decodes each completion's own budget; vLLM (not installed here: a generator that records what it is
    asked for) is asked for the very same budgets, round by round."""
    from rollout_bench import backends
    from rollout_bench.backends import vllm

    shipped = trace.load("qwen3-4b-warm-t1")
    traced = {"trace": {"name": "qwen3-4b-warm-t1", "quantiles": shipped["quantiles"]}, "max_new_tokens": 400,
              "num_generations": 2, "sampling": Sampling(temperature=1.0, seed=11).to_dict(), "n_prompts": 2}
    asked = []

    class Recorder:
        def generate(self, prompts, n, max_new_tokens=None):
            asked.append(list(max_new_tokens))
            return [[5] * m for m in max_new_tokens]

    flex_cells = cells(tmp_path / "flex", tiny_assets["dataset"], ("rollout", 4, traced))
    vllm_cells = cells(tmp_path / "vllm", tiny_assets["dataset"], ("rollout", 4, traced))
    real_unavailable = backends.unavailable
    monkeypatch.setattr(backends, "unavailable",
                        lambda name, *a, **k: None if name == "vllm" else real_unavailable(name, *a, **k))
    monkeypatch.setattr(vllm, "load", lambda spec: Recorder())
    for backend, variant, cs in (("flex", "eager", flex_cells), ("vllm", "default", vllm_cells)):
        generation_job.run_group(backend=backend, variant=variant, model="qwen3-tiny", cells=cs,
                                 model_dir=tiny_assets["model"], adapter_dir=None)
    f, v = stats.load(flex_cells[0].out), stats.load(vllm_cells[0].out)
    assert f["status"] == v["status"] == "ok"
    assert [r["budgets"] for r in f["rounds"]] == [r["budgets"] for r in v["rounds"]]
    # the warm-up (one prompt x 2), then the two rounds (2 prompts x 2), each its own draw
    want = [trace.lengths(traced["trace"], k, 11, d) for k, d in ((2, 0), (4, 1), (4, 2))]
    assert asked == want and len(set(map(tuple, want))) == 3  # each round its own draw, and no prefill call
    assert f["n_decoded_tokens"] == round((sum(want[1]) + sum(want[2])) / 2)  # flex decoded exactly those
    assert f["completions"]["completion_tokens"]["max"] == max(want[2])


def test_a_backend_with_one_budget_a_call_skips_a_trace_case(tiny_assets, tmp_path):
    traced = {"trace": {"name": "t", "quantiles": {"0.5": 3, "1.0": 5}}, "max_new_tokens": 5}
    cs = cells(tmp_path, tiny_assets["dataset"], ("rollout", 2, traced), ("greedy", 2, {}))
    generation_job.run_group(backend="hf_generate", variant="default", model="qwen3-tiny", cells=cs,
                             model_dir=tiny_assets["model"], adapter_dir=None)
    skipped, ran = stats.load(cs[0].out), stats.load(cs[1].out)
    assert skipped["status"] == "skipped" and "budget of its own" in skipped["reason"]
    assert ran["status"] == "ok"


def test_a_cell_whose_rounds_spread_is_measured_again_with_fresh_prompts(tmp_path, tiny_assets, monkeypatch):
    from rollout_bench import backends
    from rollout_bench.backends import vllm

    walls = iter([0.01, 0.05, 0.02, 0.02, 0.02])  # warm-up, a 5x spread, then two even rounds
    sent = []

    class Uneven:
        def generate(self, prompts, n):
            sent.append([tuple(p) for p in prompts])
            time.sleep(next(walls))
            return [[7] * 4 for _ in prompts for _ in range(n)]

    monkeypatch.setattr(backends, "unavailable", lambda *a, **k: None)
    monkeypatch.setattr(vllm, "load", lambda spec: Uneven())
    cs = cells(tmp_path, tiny_assets["dataset"], ("greedy", 2, {"max_round_spread": 0.5, "spread_retries": 1}))
    generation_job.run_group(backend="vllm", variant="default", model="qwen3-tiny", cells=cs,
                             model_dir=tiny_assets["model"], adapter_dir=None)
    rec = stats.load(cs[0].out)
    assert rec["status"] == "ok" and len(rec["attempts"]) == 2 and rec["attempts"][0]["round_spread"] > 0.5
    assert rec["round_spread"] == rec["attempts"][1]["round_spread"] < 0.5 and rec["spread_ok"]
    row = aggregate.generation_row(rec, cs[0].out)  # the summary the head-to-head table reads keeps the verdict
    assert row["spread_ok"] is True and row["round_spread"] == pytest.approx(rec["round_spread"], abs=1e-3)
    assert rec["timed_s"] == pytest.approx(sum(r["wall_s"] for a in rec["attempts"] for r in a["rounds"]), abs=1e-3)
    flat = sum(sent, [])
    assert len(set(flat)) == len(flat) == 2 * 5 - 1  # the re-measure sent prompts of its own (warm-up: one)


def _flex_job(tmp_path, tiny_assets, *specs):
    cs = cells(tmp_path, tiny_assets["dataset"], *specs)
    generation_job.run_group(backend="flex", variant="eager", model="qwen3-tiny", cells=cs,
                             model_dir=tiny_assets["model"], adapter_dir=None, out=str(tmp_path / "job.json"))
    return [stats.load(c.out) for c in cs]


def test_a_greedy_cells_timed_round_is_judged_against_hf(tiny_assets, tmp_path):
    """Each greedy cell's last timed round: rows spread over its batch, every token against HF on the same tokens."""
    recs = _flex_job(tmp_path, tiny_assets, ("greedy", 2, {}), ("greedy", 8, {"max_new_tokens": 6}))
    assert [r["status"] for r in recs] == ["ok", "ok"]
    small, big = (r["round_gate"] for r in recs)
    assert small["passed"] and small["rows"] == [0, 1] and small["tokens"] == 2 * 4
    assert big["rows"] == [0, 2, 5, 7] and big["tokens"] == 4 * 6 and big["bucket"] == 8  # spread over the batch
    assert big["mismatches"] == 0 and big["first_mismatch"] is None and big["exact"] + big["ties"] == big["tokens"]
    assert big["max_logprob_error"] <= big["logprob_tol"] == 1e-3  # float32: the engine's logprobs are HF's


def test_a_round_of_more_completions_than_slots_is_judged_in_the_largest_bucket(tiny_assets, tmp_path):
    """2 prompts x 2 completions through 2 slots: the round queues, its steps decode in bucket 2."""
    (rec,) = _flex_job(tmp_path, tiny_assets, ("greedy", 2, {"n_prompts": 2, "num_generations": 2}))
    assert rec["status"] == "ok" and rec["round_gate"]["passed"] and rec["round_gate"]["bucket"] == 2
    assert rec["round_gate"]["rows"] == [0, 1, 2, 3]


def test_a_sampled_cells_timed_round_is_judged_by_its_logprobs_at_its_temperature(tiny_assets, tmp_path):
    hot = Sampling(temperature=0.9, top_p=1.0, top_k=0, min_p=0.0, seed=3).to_dict()
    (rec,) = _flex_job(tmp_path, tiny_assets, ("hot", 4, {"sampling": hot, "sampling_preset": None}))
    judged = rec["round_gate"]
    assert rec["status"] == "ok" and judged["passed"] and judged["judged_by"] == "logprob at T=0.9"
    assert judged["tokens"] == 4 * 4 and judged["exact"] is None and judged["ties"] == 0
    assert judged["max_logprob_error"] <= judged["logprob_tol"] == 1e-3  # float32: the engine's logprobs are HF's


def test_processed_logprobs_under_a_truncating_sampler_are_not_judged(tiny_assets, tmp_path):
    """Renormalised over the kept tokens, they are not log_softmax(logits / T): no reference to hold them to."""
    top = Sampling(temperature=1.0, top_p=0.9, top_k=0, min_p=0.0, seed=3).to_dict()
    (rec,) = _flex_job(tmp_path, tiny_assets, ("top", 2, {"sampling": top, "sampling_preset": None,
                                                          "options": {"logprobs": "processed"}}))
    assert rec["status"] == "ok" and "round_gate" not in rec


def test_logprobs_at_the_wrong_temperature_fail_a_sampled_cell(tiny_assets, tmp_path, monkeypatch):
    """An engine that hands back log_softmax(logits) (T = 1) for tokens it sampled at T = 0.9: issue 47's wrong-
    temperature fault, caught on the timed round itself."""
    from rollout_bench.engine import sampler

    real = sampler.sample

    def logprobs_at_t1(logits, p, positions, how, cap, processed=False):  # logits [B, V]
        tokens, _ = real(logits, p, positions, how, cap, processed)
        return tokens, logits.gather(1, tokens[:, None])[:, 0] - torch.logsumexp(logits, -1)

    monkeypatch.setattr(sampler, "sample", logprobs_at_t1)
    hot = Sampling(temperature=0.9, top_p=1.0, top_k=0, min_p=0.0, seed=3).to_dict()
    (rec,) = _flex_job(tmp_path, tiny_assets, ("hot", 2, {"sampling": hot, "sampling_preset": None}))
    assert rec["status"] == "failed" and not rec["round_gate"]["passed"]
    assert "has a logprob" in rec["reason"] and rec["round_gate"]["first_mismatch"]["step"] == 0


def test_a_fault_in_one_buckets_decode_fails_that_cell_with_its_first_diverging_token(tiny_assets, tmp_path,
                                                                                        monkeypatch):
    """A deliberately wrong kernel where 8 rows decode (a bias that flips the argmax from the third generated token
    on): the job's gate (4 prompts, bucket 4) passes, the B = 8 cell fails naming the token, and the B = 2 cell
    beside it stays ok."""
    from rollout_bench.engine import model_runner

    real = model_runner.lm_logits

    def wrong_at_bucket_8(lm, h):
        logits = real(lm, h)
        if logits.shape[0] == 8 and lm.__dict__.get("_rb_steps", 0) >= 2:
            logits = logits.clone()
            logits[:, 7] += 1e3  # every row now picks token 7
        if logits.shape[0] == 8:
            lm.__dict__["_rb_steps"] = lm.__dict__.get("_rb_steps", 0) + 1
        return logits

    monkeypatch.setattr(model_runner, "lm_logits", wrong_at_bucket_8)
    recs = _flex_job(tmp_path, tiny_assets, ("greedy", 2, {}), ("greedy", 8, {"max_new_tokens": 6, "rounds": 1,
                                                                              "warmup_prompts": 0}))
    assert recs[0]["status"] == "ok" and recs[0]["round_gate"]["passed"]
    bad = recs[1]
    assert bad["status"] == "failed" and not bad["round_gate"]["passed"]
    first = bad["round_gate"]["first_mismatch"]
    # the prefill's logits (8 rows too) chose token 0 and the first decode step token 1: token 2 is the first wrong
    assert first["step"] == 2 and first["row"] == 0
    assert "bucket 8's decode graphs: row 0's token at step 2 is not HF float32's argmax" in bad["reason"]


def test_a_stale_page_table_in_one_bucket_fails_that_cell(tiny_assets, tmp_path, monkeypatch):
    """Rows that read and write another row's pages (a table that no longer matches the rows, as a graph captured
    with a stale table would replay) where 8 rows decode, and nowhere else."""
    from rollout_bench.engine import model_runner

    real = model_runner.ModelRunner.decode_step

    def stale(self, b, how):
        if b != 8:
            return real(self, b, how)
        rows = self.slot[:b].clone()
        self.slot[:b] = rows.roll(1, 0)  # each row's slot, so its pages, is the next row's
        try:
            return real(self, b, how)
        finally:
            self.slot[:b] = rows

    monkeypatch.setattr(model_runner.ModelRunner, "decode_step", stale)
    recs = _flex_job(tmp_path, tiny_assets, ("greedy", 2, {}), ("greedy", 8, {"max_new_tokens": 6}))
    assert recs[0]["status"] == "ok"
    bad = recs[1]
    assert bad["status"] == "failed" and bad["round_gate"]["mismatches"] > 0
    # random weights keep their argmax over the wrong K/V here; the logprobs do not
    assert "logprob_error" in bad["round_gate"]["first_mismatch"] and "has a logprob" in bad["reason"]


def test_a_stale_page_table_fails_a_sampled_bfloat16_cell(tiny_assets, tmp_path, monkeypatch):
    """The gate on a sampled round in the dtype the headline runs: bf16's own error widens the tolerance, and rows
    that read another row's pages still fall outside it."""
    from rollout_bench.engine import model_runner

    real = model_runner.ModelRunner.decode_step

    def stale(self, b, how):
        rows = self.slot[:b].clone()
        self.slot[:b] = rows.roll(1, 0)
        try:
            return real(self, b, how)
        finally:
            self.slot[:b] = rows

    hot = Sampling(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, seed=3).to_dict()
    spec = ("hot", 4, {"sampling": hot, "sampling_preset": None, "dtype": "bfloat16", "max_new_tokens": 8})
    (good,) = _flex_job(tmp_path / "good", tiny_assets, spec)
    assert good["status"] == "ok" and good["round_gate"]["passed"]
    monkeypatch.setattr(model_runner.ModelRunner, "decode_step", stale)
    (bad,) = _flex_job(tmp_path / "bad", tiny_assets, spec)
    assert bad["status"] == "failed" and "has a logprob" in bad["reason"]
    assert bad["round_gate"]["max_logprob_error"] > bad["round_gate"]["logprob_tol"] > good["round_gate"]["max_logprob_error"]


def test_fa4_prefill_on_that_cannot_run_fails_the_job_with_the_guards_reason(tiny_assets, tmp_path):
    """A flex job asked for FA4 (option fa4_prefill 'on') where it cannot run (here: no CUDA device) times no Triton
    prefill under FA4's name: every cell ends `failed`, the guard's reason in its stats."""
    cs = cells(tmp_path, tiny_assets["dataset"], ("prefill", 2, {"options": {"fa4_prefill": "on"}}),
               ("prefill", 4, {"options": {"fa4_prefill": "on"}}))
    generation_job.run_group(backend="flex", variant="eager", model="qwen3-tiny", cells=cs,
                             model_dir=tiny_assets["model"], adapter_dir=None, out=str(tmp_path / "job.json"))
    for c in cs:
        rec = stats.load(c.out)
        assert rec["status"] == "failed" and "decode_tps" not in rec
        assert "fa4_prefill='on'" in rec["reason"] and "no CUDA device" in rec["reason"]
        assert rec["prefill_kernel"] == {"kernel": None, "reason": "no CUDA device"}


@pytest.mark.parametrize("backend, variant, kernel, engine_tps", [
    ("flex", "eager", "flex-triton", True), ("hf_generate", "default", "sdpa", False),
    ("transformers_cb", "paged_sdpa", "paged|sdpa", False)])
def test_a_prefill_rate_cell_says_what_ran_its_prefill_and_how_fast(tiny_assets, tmp_path, backend, variant, kernel,
                                                                     engine_tps):
    """prefill_kernel: FA4, flex's Triton kernel or the backend's own, and why not FA4; prefill (a prefill_rate
    case's cells): prompt tokens a second of a one-token call on the last round's prompts (flex: also its own
    prefill passes' rate)."""
    (c,) = cells(tmp_path, tiny_assets["dataset"], ("prefill", 2, {"prefill_rate": True}))
    generation_job.run_group(backend=backend, variant=variant, model="qwen3-tiny", cells=[c],
                             model_dir=tiny_assets["model"], adapter_dir=None, out=str(tmp_path / "job.json"))
    rec = stats.load(c.out)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["prefill_kernel"]["kernel"] == kernel and rec["prefill_kernel"]["reason"]
    if backend == "flex":
        assert rec["prefill_kernel"]["reason"] == "no CUDA device"
    p = rec["prefill"]
    assert p["reason"] is None and p["tps"] > 0 and p["prompts"] == 2
    assert p["tokens"] == rec["rounds"][-1]["prompt_tokens"]  # the last round's prompts, at their lengths
    assert ("engine_tps" in p) == engine_tps
    assert rec["round_gate" if backend == "flex" else "status"]  # the probe ran after the round gate read its round
    if backend == "flex":
        assert rec["round_gate"]["passed"] and rec["engine"]["last_round"]["decode_steps"] > 0


def test_a_backend_without_a_one_token_call_records_no_prefill_figure_and_why():
    from rollout_bench.backends import hf_static
    from rollout_bench.generation import prefill

    got = prefill.probe(None, hf_static, "hf_static", None, [[1, 2]], [], lambda: None)
    assert got["tps"] is None and "one-token budget" in got["reason"]
    assert prefill.uncached([[5, 6, 7], [0, 9]], (0, 1)) == [[0, 6, 7], [1, 9]]


def test_only_a_prefill_rate_cell_makes_the_prefill_call_or_asks_the_engine(tiny_assets, tmp_path, monkeypatch):
    """The GPU runs of every other case do what they did before the prefill case: no max_new_tokens=1 call, no
    `prefill` field, and vLLM (a stub that counts its calls) is not asked for its attention backend
    (collective_rpc); its prefill_kernel is 'vllm', unnamed. A prefill_rate cell on the same engine makes both."""
    from rollout_bench import backends
    from rollout_bench.backends import vllm

    calls = {"generate": [], "rpc": 0}

    class Stub:
        def generate(self, prompts, n, max_new_tokens=None):
            calls["generate"].append(None if max_new_tokens is None else list(max_new_tokens))
            budgets = max_new_tokens or [4] * (len(prompts) * n)
            return [[5] * m for m in budgets]

        class llm:  # noqa: N801 -- LLM's one method the prefill cell uses
            @staticmethod
            def collective_rpc(fn):
                calls["rpc"] += 1
                return [["FLASH_ATTN"]]

        prefill_kernel = vllm.Generator.prefill_kernel
        prefill_kernel_from_engine = vllm.Generator.prefill_kernel_from_engine

    real_unavailable = backends.unavailable
    monkeypatch.setattr(backends, "unavailable",
                        lambda name, *a, **k: None if name == "vllm" else real_unavailable(name, *a, **k))
    monkeypatch.setattr(vllm, "load", lambda spec: Stub())
    plain, rate = cells(tmp_path, tiny_assets["dataset"], ("greedy", 2, {}), ("prefill", 2, {"prefill_rate": True}))
    generation_job.run_group(backend="vllm", variant="default", model="qwen3-tiny", cells=[plain],
                             model_dir=tiny_assets["model"], adapter_dir=None)
    rec = stats.load(plain.out)
    assert rec["status"] == "ok", rec["reason"]
    assert calls == {"generate": [None] * 3, "rpc": 0}  # the warm-up and two rounds, nothing more
    assert "prefill" not in rec and rec["prefill_kernel"]["kernel"] == "vllm" and rec["prefill_kernel"]["reason"]
    generation_job.run_group(backend="vllm", variant="default", model="qwen3-tiny", cells=[rate],
                             model_dir=tiny_assets["model"], adapter_dir=None)
    rec = stats.load(rate.out)
    assert rec["status"] == "ok", rec["reason"]
    assert calls["generate"][3:] == [None] * 3 + [[1], [1] * 2] and calls["rpc"] == 1  # then the probe's two
    assert rec["prefill"]["tps"] > 0 and rec["prefill_kernel"]["kernel"] == "FLASH_ATTN"


@pytest.mark.parametrize("backend, variant", [("flex", "eager"), ("hf_generate", "default"),
                                              ("transformers_cb", "paged_sdpa")])
def test_a_cell_without_prefill_rate_makes_no_one_token_call(tiny_assets, tmp_path, monkeypatch, backend, variant):
    """The real generators of the backends the prefill case runs on CPU: a cell of any other case calls generate
    for its warm-up and rounds only, never with a budget of its own, and records no `prefill` field."""
    from rollout_bench import backends

    asked = []
    mod = backends.module(backend)
    real_load = mod.load

    def counted(spec):
        gen = real_load(spec)
        real = gen.generate

        def generate(prompts, n, *a, **k):
            asked.append(k.get("max_new_tokens", a[0] if a else None))
            return real(prompts, n, *a, **k)

        gen.generate = generate
        return gen

    monkeypatch.setattr(mod, "load", counted)
    (c,) = cells(tmp_path, tiny_assets["dataset"], ("greedy", 2, {}))
    generation_job.run_group(backend=backend, variant=variant, model="qwen3-tiny", cells=[c],
                             model_dir=tiny_assets["model"], adapter_dir=None)
    rec = stats.load(c.out)
    assert rec["status"] == "ok", rec["reason"]
    assert len(asked) == 3 and all(m is None for m in asked), asked  # the warm-up and two rounds, no budget
    assert "prefill" not in rec and rec["prefill_kernel"]["kernel"]

