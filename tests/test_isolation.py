"""Each leased job's share of the host: disjoint NUMA-local CPU sets, thread counts sized to them, the
lease log that names the neighbours of a timed window, and the opt-in host-wide timing lock."""
import itertools
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from rollout_bench.host import cpu_share, gpu_lease, isolation


def fake_sys(tmp_path, nodes: dict[int, str], gpu_nodes: dict[str, int]):
    """A sysfs tree: NUMA node -> cpulist, PCI address -> numa_node."""
    for n, cpus in nodes.items():
        d = tmp_path / f"devices/system/node/node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    for bus, n in gpu_nodes.items():
        d = tmp_path / "bus/pci/devices" / bus
        d.mkdir(parents=True)
        (d / "numa_node").write_text(f"{n}\n")
    return tmp_path


def test_parse_cpulist():
    assert cpu_share.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert cpu_share.parse_cpulist("") == []


def test_eight_gpus_on_two_nodes_get_disjoint_node_local_shares(tmp_path):
    # 4 GPUs per node, 16 CPUs per node (0-15 on node 0, 16-31 on node 1)
    root = fake_sys(tmp_path, {0: "0-15", 1: "16-31"}, {f"0000:{g:02x}:00.0": g // 4 for g in range(8)})
    bus = {g: f"0000:{g:02x}:00.0" for g in range(8)}
    nodes = cpu_share.topology(list(range(8)), root, bus)
    lists = {n: cpu_share.node_cpus(n, root) for n in (0, 1)}
    shares = {g: cpu_share.share(g, 0, 1, list(range(8)), list(range(32)), nodes, lists) for g in range(8)}
    assert shares[0] == [0, 1, 2, 3] and shares[4] == [16, 17, 18, 19] and shares[7] == [28, 29, 30, 31]
    flat = [c for s in shares.values() for c in s]
    assert len(flat) == len(set(flat)) == 32  # disjoint, and every CPU used
    for g, s in shares.items():
        assert set(s) <= set(lists[g // 4])  # on the GPU's own node


def test_unknown_topology_splits_the_allowed_cpus_and_slots_split_a_share():
    nodes = {0: None, 1: None}
    allowed = [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]  # e.g. a cgroup's CPUs
    a = cpu_share.share(0, 0, 1, [0, 1], allowed, nodes, {})
    b = cpu_share.share(1, 0, 1, [0, 1], allowed, nodes, {})
    assert a == [2, 3, 4, 5, 6] and b == [7, 8, 9, 10, 11]
    slots = [cpu_share.share(0, s, 2, [0, 1], allowed, nodes, {}) for s in range(2)]
    assert slots == [[2, 3, 4], [5, 6, 7]]
    # more slots than CPUs: shared round-robin, never empty
    assert all(cpu_share.share(0, s, 4, [0], [0, 1], {0: None}, {}) for s in range(4))


def test_shares_stay_disjoint_when_only_some_gpus_have_a_node():
    """GPU 2's node is unknown: node-local shares for the others beside a host-wide split for it would
    overlap, so every GPU splits the whole set."""
    nodes = {0: 0, 1: 0, 2: None, 3: 1}
    lists = {0: list(range(8)), 1: list(range(8, 16))}
    shares = [cpu_share.share(g, 0, 1, [0, 1, 2, 3], list(range(16)), nodes, lists) for g in range(4)]
    flat = [c for s in shares for c in s]
    assert len(flat) == len(set(flat)) == 16
    # a cpuset holding only node 0: GPU 1's node has no usable CPU, likewise
    nodes = {0: 0, 1: 1}
    shares = [cpu_share.share(g, 0, 1, [0, 1], list(range(8)), nodes, lists) for g in range(2)]
    assert shares == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_lease_pins_the_job_and_sizes_its_threads(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_lease.COUNT_VAR, "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    probe = ("import json, os, sys; print(json.dumps({'aff': sorted(os.sched_getaffinity(0)), "
             "'omp': os.environ.get('OMP_NUM_THREADS'), 'cpus': os.environ.get('ROLLOUT_BENCH_CPUS'), "
             "'lease': os.environ.get('ROLLOUT_BENCH_LEASE')}))")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: the topology is unknown, as on a CPU host
    out = subprocess.run([sys.executable, "-m", "rollout_bench.host.gpu_lease", "--gpus", "1", "--lock-dir",
                          str(tmp_path), "--job", "results/x.json", "--", sys.executable, "-c", probe],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    allowed = sorted(os.sched_getaffinity(0))
    assert got["aff"] == [int(c) for c in got["cpus"].split(",")] and int(got["omp"]) == len(got["aff"])
    assert got["aff"] == cpu_share.share(0, 0, 1, [0, 1], allowed, {0: None, 1: None}, {})
    events = [json.loads(x) for x in (tmp_path / isolation.LOG).read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "end"] and events[0]["job"] == "results/x.json"
    assert events[0]["lease"] == got["lease"] and events[0]["cpus"] == got["aff"]


def test_slots_let_one_gpu_take_several_jobs_but_no_more(tmp_path):
    a = gpu_lease.acquire(1, tmp_path, [0], slots=2)
    b = gpu_lease.acquire(1, tmp_path, [0], slots=2, timeout_s=0.3)
    assert (a.ids, a.slot, b.ids, b.slot) == ([0], 0, [0], 1)
    assert a.env()["MASTER_PORT"] != b.env()["MASTER_PORT"]
    with pytest.raises(gpu_lease.LeaseError, match="no 1 free GPU"):
        gpu_lease.acquire(1, tmp_path, [0], slots=2, timeout_s=0.3)
    a.release(), b.release()


def test_a_job_alone_on_its_gpu_waits_for_slot_jobs_and_keeps_them_out(tmp_path):
    # vLLM's start-up memory profile asserts when a neighbour on its GPU frees memory meanwhile (the smoke run's
    # vLLM jobs, 4 slots a GPU, crashed so on the H200): such a job takes the GPU with no slot job beside it
    slot = gpu_lease.acquire(1, tmp_path, [0, 1], slots=4)
    assert slot.ids == [0]
    alone = gpu_lease.acquire(1, tmp_path, [0, 1], slots=4, alone=True, timeout_s=0.3)
    assert (alone.ids, alone.slot) == ([1], 0)  # the GPU with no slot job
    with pytest.raises(gpu_lease.LeaseError, match="no 1 free GPU"):
        gpu_lease.acquire(1, tmp_path, [1], slots=4, timeout_s=0.3)  # no slot beside it
    with pytest.raises(gpu_lease.LeaseError, match="no 1 free GPU"):
        gpu_lease.acquire(1, tmp_path, [0], slots=4, alone=True, timeout_s=0.3)  # nor it beside a slot job
    slot.release()
    again = gpu_lease.acquire(1, tmp_path, [0], slots=4, alone=True, timeout_s=0.3)
    assert again.ids == [0]
    again.release(), alone.release()


def test_budget_counts_the_slots_of_each_gpu():
    gpu_lease.check_budget(1, 4, 1, jobs_per_gpu=4)
    with pytest.raises(gpu_lease.LeaseError, match="jobs_per_gpu=4: pass gpu=4"):
        gpu_lease.check_budget(1, 5, 1, jobs_per_gpu=4)


def test_window_names_the_leases_that_overlapped_it(tmp_path):
    isolation.log_event(tmp_path, event="start", lease="me", job="mine", gpus=[0], slot=0, cpus=[0], pid=1)
    isolation.log_event(tmp_path, event="start", lease="old", job="before", gpus=[1], slot=0, cpus=[1], pid=2)
    isolation.log_event(tmp_path, event="end", lease="old")
    time.sleep(0.05)
    env = {isolation.LOCK_DIR_VAR: str(tmp_path), isolation.LEASE_VAR: "me", isolation.CPUS_VAR: "0"}
    with isolation.window(env) as w:
        isolation.log_event(tmp_path, event="start", lease="n", job="neighbour", gpus=[1], slot=0, cpus=[1], pid=3)
        time.sleep(0.1)
    rec = isolation.record(w, env)
    assert [n["job"] for n in rec["neighbours"]] == ["neighbour"]  # not itself, not the one that ended before
    assert 0 < rec["neighbours"][0]["overlap_s"] <= rec["window_s"]
    assert rec["cpus"] == [0] and rec["lock_wait_s"] is None and rec["timing_lock"] is False


def test_timing_lock_keeps_timed_windows_apart(tmp_path):
    env = {isolation.LOCK_DIR_VAR: str(tmp_path), isolation.TIMING_LOCK_VAR: "1"}
    spans = []

    def timed(name):
        env_i = {**env, isolation.LEASE_VAR: name}
        with isolation.window(env_i) as w:
            time.sleep(0.2)
        spans.append((w.t0, w.t1, w.lock_wait_s))

    threads = [threading.Thread(target=timed, args=(f"j{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans.sort()
    assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans))  # no two windows overlap
    assert max(s[2] for s in spans) >= 0.35  # the last one waited for the other two


def test_a_pin_outside_the_host_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_lease.COUNT_VAR, "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = subprocess.run([sys.executable, "-m", "rollout_bench.host.gpu_lease", "--gpus", "1", "--pin", "5",
                          "--lock-dir", str(tmp_path), "--", "true"], capture_output=True, text=True, check=False)
    assert out.returncode == 3 and "gpu.pin names GPU(s) [5] but this host has [0, 1]" in out.stderr


def test_slot_jobs_and_a_whole_gpu_job_exclude_each_other(tmp_path):
    """A smoke run's slot leases and a benchmark's whole-GPU lease on the same GPU never overlap."""
    slot = gpu_lease.acquire(1, tmp_path, [0], slots=4)
    with pytest.raises(gpu_lease.LeaseError):
        gpu_lease.acquire(1, tmp_path, [0], timeout_s=0.3)
    slot.release()
    whole = gpu_lease.acquire(1, tmp_path, [0])
    with pytest.raises(gpu_lease.LeaseError):
        gpu_lease.acquire(1, tmp_path, [0], slots=4, timeout_s=0.3)
    whole.release()


def test_a_killed_lease_ends_its_job_and_logs_its_end(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_lease.COUNT_VAR, "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    marker = tmp_path / "child_pid"
    child = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    lease = subprocess.Popen([sys.executable, "-m", "rollout_bench.host.gpu_lease", "--gpus", "1", "--lock-dir",
                              str(tmp_path), "--", sys.executable, "-c", child])
    deadline = time.monotonic() + 30
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    lease.terminate()  # a scheduler's time limit
    assert lease.wait(timeout=30) != 0
    with pytest.raises(ProcessLookupError):
        os.kill(int(marker.read_text()), 0)  # the job went with it
    assert [e["event"] for e in map(json.loads, (tmp_path / isolation.LOG).read_text().splitlines())] == \
        ["start", "end"]
    gpu_lease.acquire(1, tmp_path, [0], timeout_s=1).release()  # and the GPU is free


def test_a_lease_whose_process_died_unlogged_is_no_neighbour(tmp_path):
    import socket

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    isolation.log_event(tmp_path, event="start", lease="ghost", job="killed -9", gpus=[1], slot=0, cpus=[1],
                        pid=dead.pid, host=socket.gethostname())
    env = {isolation.LOCK_DIR_VAR: str(tmp_path), isolation.LEASE_VAR: "me"}
    with isolation.window(env) as w:
        time.sleep(0.05)
    assert w.neighbours == []


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_host_load_tells_the_jobs_own_cpu_from_everyone_elses(tmp_path):
    """A process outside the job spinning through the window is `others`; the job spinning itself is `own`."""
    if isolation.host_cpu_s() is None:
        pytest.skip("no /proc/stat on this host")
    n = os.cpu_count()
    with isolation.window({}) as quiet:
        time.sleep(0.5)
    spin = "import time\nt = time.time() + 1.5\nwhile time.time() < t: pass"
    neighbour = subprocess.Popen([sys.executable, "-c", spin])
    try:
        with isolation.window({}) as busy_host:
            time.sleep(1.0)
    finally:
        neighbour.wait()
    with isolation.window({}) as busy_self:
        _spin(1.0)
    one_cpu = 1 / n  # a process spinning on one CPU of n
    assert busy_host.host_load["others"] >= quiet.host_load["others"] + 0.6 * one_cpu
    assert busy_host.host_load["own"] < 0.2 * one_cpu
    assert busy_self.host_load["own"] >= 0.8 * one_cpu
    assert isolation.record(busy_host, {})["host_load"] == busy_host.host_load


def test_host_load_is_none_without_proc_stat(tmp_path):
    assert isolation.host_cpu_s(str(tmp_path / "missing")) is None
    assert isolation.load(None, (1.0, 2.0), 0.1) is None
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 100 0 50 800 50 0 0 0 0 0\n")
    busy, total = isolation.host_cpu_s(str(stat))
    tick = os.sysconf("SC_CLK_TCK")
    assert (busy, total) == (150 / tick, 1000 / tick)  # iowait counts as idle
    assert isolation.load((0.0, 0.0), (3.0, 10.0), 1.0) == {"busy": 0.3, "own": 0.1, "others": 0.2}
