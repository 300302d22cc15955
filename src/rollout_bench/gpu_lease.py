"""Pin a job to physical GPUs and to its share of the host's CPUs, then run the command there.

Snakemake counts `gpu` but never says which; this wrapper picks free ids under one flock per GPU
(per job slot of a GPU with --slots > 1), all-or-none, and exports CUDA_VISIBLE_DEVICES (PCI bus
order), a MASTER_PORT unique to the lease, and the ids for the stats file. A scheduler that already
set CUDA_VISIBLE_DEVICES (SLURM) is honoured. The job is pinned to its GPUs' CPU share
(cpu_share.py) with torch/OpenMP/MKL threads sized to it, and the lease is logged in the lock
directory, where the job finds the neighbours that overlapped its timed rounds (isolation.py).

    python -m rollout_bench.gpu_lease --gpus 1 [--pin 2,3] [--lock-dir D] [--slots K] [--job LABEL]
        [--timing-lock] -- CMD ARGS...
"""
import argparse
import fcntl
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import cpu_share, envinfo, isolation

COUNT_VAR = "ROLLOUT_BENCH_GPU_COUNT"  # overrides the detected count (tests, dry hosts)


class LeaseError(RuntimeError):
    pass


@dataclass
class Lease:
    ids: list[int]
    _files: list = field(default_factory=list, repr=False)
    slot: int = 0  # which job slot of its GPUs (0 unless a GPU takes several jobs)
    cpus: list[int] = field(default_factory=list)  # its share of the host; [] = not pinned

    def env(self) -> dict:
        out = {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, self.ids)),
            envinfo.GPU_IDS_VAR: ",".join(map(str, self.ids)),
            # GPUs (slots) are exclusive, so is the lowest id with its slot
            "MASTER_PORT": str(29500 + 64 * self.slot + self.ids[0]),
        }
        if self.cpus:  # a library sizing its pool from the host's core count would oversubscribe the share
            n = str(len(self.cpus))
            out.update({isolation.CPUS_VAR: ",".join(map(str, self.cpus)), "OMP_NUM_THREADS": n,
                        "MKL_NUM_THREADS": n})
        return out

    def release(self):
        for f in self._files:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()
        self._files.clear()


def candidates(pin: list[int] | None = None, environ=os.environ) -> list[int]:
    """GPU ids this job may take: the pin, else what a scheduler granted, else all on the host."""
    if pin:
        return list(pin)
    granted = environ.get("CUDA_VISIBLE_DEVICES")
    if granted is not None and envinfo.GPU_IDS_VAR not in environ:
        return [int(x) for x in granted.split(",") if x.strip()]
    n = int(environ[COUNT_VAR]) if COUNT_VAR in environ else envinfo.physical_gpu_count()
    return list(range(n))


def _try_lock(path: Path):
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return f
    except BlockingIOError:
        f.close()
        return None


def _lock_name(gpu: int, slot: int, slots: int) -> str:
    return f"gpu{gpu}.lock" if slots == 1 else f"gpu{gpu}.slot{slot}.lock"


def acquire(n: int, lock_dir, ids: list[int], timeout_s: float = 3600, poll_s: float = 0.2,
            slots: int = 1) -> Lease:
    """Take `n` of `ids` in one job slot (of `slots` per GPU), all or none; wait while others hold
    them (Snakemake's count keeps this short)."""
    if n > len(ids):
        raise LeaseError(f"job needs {n} GPU(s) but only {len(ids)} are available here ({ids}); "
                         f"lower --resources gpu / the job's gpu count, or run on a host with more GPUs")
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        for slot in range(slots):
            held = []
            for i in ids:
                f = _try_lock(lock_dir / _lock_name(i, slot, slots))
                if f is not None:
                    held.append((i, f))
                    if len(held) == n:
                        return Lease([i for i, _ in held], [f for _, f in held], slot)
            for _, f in held:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
        if time.monotonic() > deadline:
            raise LeaseError(f"no {n} free GPU(s) among {ids} after {timeout_s:.0f}s: another process holds "
                             f"the locks in {lock_dir}")
        time.sleep(poll_s)


def check_budget(needed_per_job: int, budget, host_gpus: int, jobs_per_gpu: int = 1) -> None:
    """Fail before any job when `--resources gpu=N` is missing, too small, or over the host's GPUs
    (times gpu.jobs_per_gpu, where a GPU takes several jobs)."""
    if needed_per_job == 0:
        return
    most = host_gpus * jobs_per_gpu
    if budget is None:
        raise LeaseError(f"GPU jobs need --resources gpu=N (each takes {needed_per_job}); this host has "
                         f"{host_gpus}: run e.g. `snakemake --cores 8 --resources gpu={max(most, needed_per_job)}`")
    if budget < needed_per_job:
        raise LeaseError(f"--resources gpu={budget} but a job needs {needed_per_job} GPU(s): pass gpu>={needed_per_job}")
    if budget > most:
        per = f" x gpu.jobs_per_gpu={jobs_per_gpu}" if jobs_per_gpu > 1 else ""
        raise LeaseError(f"--resources gpu={budget} but this host has only {host_gpus} GPU(s){per}: pass gpu={most} "
                         f"(or set {COUNT_VAR} where nvidia-smi cannot see them)")


def host_gpu_count(environ=os.environ) -> int:
    return len(candidates(None, environ))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rollout_bench.gpu_lease", description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--pin", default="", help="comma-separated physical ids")
    ap.add_argument("--lock-dir", default="results/.gpu_locks")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--slots", type=int, default=1, help="jobs one GPU takes at once (gpu.jobs_per_gpu)")
    ap.add_argument("--job", default="", help="label in the lease log (the job's output)")
    ap.add_argument("--timing-lock", action="store_true",
                    help="timed rounds take a host-wide lock (gpu.timing_lock)")
    ap.add_argument("--no-pin-cpus", action="store_true", help="leave the CPU affinity and thread counts alone")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command after --")
    if a.gpus == 0:
        return subprocess.call(cmd)
    pin = [int(x) for x in a.pin.split(",") if x.strip()]
    ids = candidates(pin)
    try:
        lease = acquire(a.gpus, a.lock_dir, ids, a.timeout, slots=a.slots)
    except LeaseError as e:
        print(f"gpu_lease: {e}", file=sys.stderr)
        return 3
    lease_id = f"{socket.gethostname()}:{os.getpid()}:{time.time():.3f}"
    try:
        host = candidates(None)  # every GPU of the host shares out its CPUs, not only the pinned ones
        if not a.no_pin_cpus:
            lease.cpus = cpu_share.for_lease(lease.ids, lease.slot, a.slots, sorted(set(host) | set(ids)))["cpus"]
            os.sched_setaffinity(0, lease.cpus)  # the job inherits it
        env = {**os.environ, **lease.env(), isolation.LEASE_VAR: lease_id,
               isolation.LOCK_DIR_VAR: str(Path(a.lock_dir).resolve()),
               isolation.TIMING_LOCK_VAR: "1" if a.timing_lock else "0"}
        isolation.log_event(a.lock_dir, event="start", lease=lease_id, job=a.job or " ".join(cmd)[:200],
                            gpus=lease.ids, slot=lease.slot, cpus=lease.cpus, pid=os.getpid())
        print(f"gpu_lease: GPUs {lease.ids} slot {lease.slot} CPUs {lease.cpus or 'unpinned'}", file=sys.stderr)
        return subprocess.call(cmd, env=env)
    finally:
        isolation.log_event(a.lock_dir, event="end", lease=lease_id)
        lease.release()


if __name__ == "__main__":
    sys.exit(main())
