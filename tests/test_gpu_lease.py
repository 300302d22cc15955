import json
import subprocess
import sys
import time

import pytest

from rollout_bench.host import gpu_lease
from rollout_bench.host.gpu_lease import LeaseError

RECORD = """
import json, os, sys, time
t0 = time.time(); time.sleep(float(sys.argv[2])); t1 = time.time()
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"ids": os.environ["CUDA_VISIBLE_DEVICES"], "rb": os.environ["ROLLOUT_BENCH_GPU_IDS"],
                        "port": os.environ["MASTER_PORT"], "order": os.environ["CUDA_DEVICE_ORDER"],
                        "t0": t0, "t1": t1}) + "\\n")
"""


def test_24_concurrent_jobs_on_8_simulated_gpus_never_share(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_lease.COUNT_VAR, "8")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    log = tmp_path / "log.jsonl"
    procs = []
    for i in range(24):
        n = 2 if i % 4 == 0 else 1  # multi-GPU jobs are all-or-none
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "rollout_bench.host.gpu_lease", "--gpus", str(n), "--lock-dir", str(tmp_path / "locks"),
             "--", sys.executable, "-c", RECORD, str(log), "0.3"]))
    assert all(p.wait(timeout=120) == 0 for p in procs)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 24
    spans = {}
    for r in rows:
        ids = [int(x) for x in r["ids"].split(",")]
        assert r["rb"] == r["ids"] and r["order"] == "PCI_BUS_ID" and len(set(ids)) == len(ids)
        assert all(0 <= i < 8 for i in ids)
        for i in ids:
            spans.setdefault(i, []).append((r["t0"], r["t1"]))
    for gpu, s in spans.items():
        s.sort()
        for (a0, a1), (b0, b1) in zip(s, s[1:]):
            assert b0 >= a1, f"GPU {gpu} shared by two jobs"
    assert len(spans) == 8  # the load spread over every GPU


def test_all_or_none_and_release(tmp_path):
    a = gpu_lease.acquire(3, tmp_path, [0, 1, 2, 3])
    assert a.ids == [0, 1, 2]
    with pytest.raises(LeaseError, match="no 2 free GPU"):
        gpu_lease.acquire(2, tmp_path, [0, 1, 2, 3], timeout_s=0.3)
    b = gpu_lease.acquire(1, tmp_path, [0, 1, 2, 3], timeout_s=0.3)
    assert b.ids == [3]
    a.release()
    c = gpu_lease.acquire(2, tmp_path, [0, 1, 2, 3], timeout_s=0.3)
    assert c.ids == [0, 1]
    assert c.env()["MASTER_PORT"] != b.env()["MASTER_PORT"]
    b.release(), c.release()


def test_candidates_pin_scheduler_and_host():
    assert gpu_lease.candidates([5, 6], {}) == [5, 6]
    assert gpu_lease.candidates(None, {"CUDA_VISIBLE_DEVICES": "2,3"}) == [2, 3]  # SLURM granted these
    # a lease's own export is not a scheduler grant
    assert gpu_lease.candidates(None, {"CUDA_VISIBLE_DEVICES": "2", "ROLLOUT_BENCH_GPU_IDS": "2",
                                       gpu_lease.COUNT_VAR: "4"}) == [0, 1, 2, 3]
    assert gpu_lease.candidates(None, {gpu_lease.COUNT_VAR: "8"}) == list(range(8))


@pytest.mark.parametrize("budget, host, match", [
    (None, 8, "need --resources gpu=N"),
    (0, 8, "pass gpu>=1"),
    (16, 8, "only 8 GPU"),
])
def test_budget_errors_say_what_to_pass(budget, host, match):
    with pytest.raises(LeaseError, match=match):
        gpu_lease.check_budget(1, budget, host)


def test_budget_ok_and_cpu_jobs_need_nothing():
    gpu_lease.check_budget(1, 8, 8)
    gpu_lease.check_budget(0, None, 0)


def test_job_needing_more_gpus_than_exist_fails_fast(tmp_path):
    t = time.monotonic()
    with pytest.raises(LeaseError, match="only 2 are available"):
        gpu_lease.acquire(3, tmp_path, [0, 1])
    assert time.monotonic() - t < 1


def test_slurm_grants_scope_the_locks_to_the_job_and_the_log_to_the_node(tmp_path):
    import socket

    slurm = {"SLURM_JOB_ID": "42", "CUDA_VISIBLE_DEVICES": "0"}
    assert gpu_lease.slurm_job(slurm) == "42"
    assert gpu_lease.scope(tmp_path, slurm) == (tmp_path / "slurm-42", tmp_path / socket.gethostname())
    # no grant (a CPU job), a lease's own export, or no SLURM: the one shared lock directory
    for env in ({"SLURM_JOB_ID": "42"}, {**slurm, "ROLLOUT_BENCH_GPU_IDS": "0"}, {"CUDA_VISIBLE_DEVICES": "0"}):
        assert gpu_lease.slurm_job(env) is None and gpu_lease.scope(tmp_path, env) == (tmp_path, tmp_path)
    lease = gpu_lease.Lease([0], port=31234)
    assert lease.env()["MASTER_PORT"] == "31234"
