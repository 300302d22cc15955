"""What a leased job knows of its neighbours: its own CPU share, the other leases that overlapped
its timed window (from the lock directory's lease log), the host's CPU load over that window (its own and everyone
else's), and an opt-in timing lock shared through the lock directory.

gpu_lease appends a `start` and an `end` line per lease to <lock dir>/leases.jsonl and exports
the lease's id, CPU set and lock directory to the job. Timed code wraps its window in `window()`;
the stats then say who else held a GPU meanwhile, so a number taken beside a busy neighbour is
visible as such.
"""
import fcntl
import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

LEASE_VAR = "ROLLOUT_BENCH_LEASE"  # this job's lease id
LOCK_DIR_VAR = "ROLLOUT_BENCH_LOCK_DIR"
CPUS_VAR = "ROLLOUT_BENCH_CPUS"  # comma-separated CPU ids the lease pinned the job to
TIMING_LOCK_VAR = "ROLLOUT_BENCH_TIMING_LOCK"  # "1": timed windows take the lock directory's timing lock
LOG = "leases.jsonl"
TIMING_LOCK = "timing.lock"


def log_event(lock_dir, **event) -> None:
    """One line per event; O_APPEND keeps concurrent writers' lines whole. Best effort: a log that
    cannot be written costs the stats their neighbours, not the job its result."""
    line = json.dumps({**event, "t": time.time()}) + "\n"
    try:
        fd = os.open(Path(lock_dir) / LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError as e:
        print(f"isolation: lease log not written ({e})", file=sys.stderr)


def _alive(lease: dict) -> bool:
    """False for a lease of this host whose process is gone (killed before it could log its end)."""
    if lease.get("host") != socket.gethostname() or not lease.get("pid"):
        return True
    try:
        os.kill(lease["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def leases(lock_dir) -> dict[str, dict]:
    """Lease id -> {job, gpus, cpus, start, end (None while held)} from the log."""
    out = {}
    path = Path(lock_dir) / LOG
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash mid-write names nobody
        if ev.get("event") == "start":
            out[ev["lease"]] = {k: ev.get(k) for k in ("job", "gpus", "slot", "cpus", "pid", "host")} | {
                "start": ev["t"], "end": None}
        elif ev.get("event") == "end" and ev.get("lease") in out:
            out[ev["lease"]]["end"] = ev["t"]
    return out


def overlapping(lock_dir, own: str | None, t0: float, t1: float) -> list[dict]:
    """Other leases held at some point of [t0, t1], with how many seconds of it they overlapped. A
    lease whose process died without logging its end counts as ended when it started: its real end
    is unknown, and counting it as held would name a ghost beside every later job."""
    out = []
    for lid, lease in leases(lock_dir).items():
        if lease["end"] is not None:
            end = lease["end"]
        else:
            end = t1 if _alive(lease) else lease["start"]
        overlap = min(end, t1) - max(lease["start"], t0)
        if lid != own and overlap > 0:
            out.append({"job": lease["job"], "gpus": lease["gpus"], "cpus": lease["cpus"],
                        "overlap_s": round(overlap, 3)})
    return sorted(out, key=lambda x: -x["overlap_s"])


def host_cpu_s(stat: str = "/proc/stat") -> tuple[float, float] | None:
    """(busy, all) CPU seconds of the whole host since boot, summed over its CPUs; None off Linux."""
    try:
        with open(stat) as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user and nice
    return (total - idle) / tick, total / tick


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def load(before, after, own_s: float) -> dict | None:
    """The host's CPU load over a window, as fractions of all its CPUs' time: `busy` in all, `own` this process's
    share of it (its threads: a backend's scheduler, detokeniser, kernel launches), `others` the rest, which a
    timed round did not cause and may have been slowed by."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    busy, total = after[0] - before[0], after[1] - before[1]
    own = min(own_s, busy)
    return {"busy": round(busy / total, 4), "own": round(own / total, 4), "others": round((busy - own) / total, 4)}


@dataclass
class Window:
    """One timed window: wall-clock bounds, the lock wait, the host's CPU load and the neighbours once it closed."""
    t0: float = 0.0
    t1: float = 0.0
    lock_wait_s: float | None = None
    neighbours: list = field(default_factory=list)
    host_load: dict | None = None


@contextmanager
def window(environ=os.environ):
    """Wrap timed rounds: takes the lock directory's timing lock when the lease says so, and afterwards
    lists the other leases that overlapped the rounds."""
    lock_dir = environ.get(LOCK_DIR_VAR)
    w = Window()
    lock = None
    if lock_dir and environ.get(TIMING_LOCK_VAR) == "1":
        t = time.time()
        lock = open(Path(lock_dir) / TIMING_LOCK, "a+")
        fcntl.flock(lock, fcntl.LOCK_EX)
        w.lock_wait_s = round(time.time() - t, 3)
    cpu0, own0 = host_cpu_s(), own_cpu_s()
    w.t0 = time.time()
    try:
        yield w
    finally:
        w.t1 = time.time()
        w.host_load = load(cpu0, host_cpu_s(), own_cpu_s() - own0)
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
        if lock_dir:
            w.neighbours = overlapping(lock_dir, environ.get(LEASE_VAR), w.t0, w.t1)


def record(w: Window, environ=os.environ) -> dict:
    """The stats' `isolation` field: this job's CPU set and threads, and who overlapped its window."""
    cpus = [int(c) for c in environ.get(CPUS_VAR, "").split(",") if c.strip()]
    try:
        import torch
        threads = torch.get_num_threads()
    except ImportError:
        threads = None
    return {"lease": environ.get(LEASE_VAR), "cpus": cpus or None, "affinity": len(os.sched_getaffinity(0)),
            "torch_threads": threads, "timing_lock": environ.get(TIMING_LOCK_VAR) == "1",
            "window_s": round(w.t1 - w.t0, 3), "lock_wait_s": w.lock_wait_s, "neighbours": w.neighbours,
            "host_load": w.host_load}
