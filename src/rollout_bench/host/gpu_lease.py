"""Pin a job to physical GPUs and to its share of the host's CPUs, then run the command there.

Snakemake counts `gpu` but never says which; this wrapper picks free ids under one flock per GPU
(per job slot of a GPU with --slots > 1), all-or-none, and exports CUDA_VISIBLE_DEVICES (PCI bus
order), a MASTER_PORT unique to the lease, and the ids for the stats file. A scheduler that already
set CUDA_VISIBLE_DEVICES (SLURM) is honoured, and under SLURM the locks are the job's own (`scope`).
The job is pinned to its GPUs' CPU share (cpu_share.py) with torch/OpenMP/MKL threads sized to it,
and the lease is logged in the lock directory, where the job finds the neighbours that overlapped
its timed rounds (isolation.py).

    python -m rollout_bench.host.gpu_lease --gpus 1 [--pin 2,3] [--lock-dir D] [--slots K] [--alone] [--job LABEL]
        [--timing-lock] [--no-pin-cpus] -- CMD ARGS...
"""
import argparse
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core import envinfo
from . import cpu_share, isolation

COUNT_VAR = "ROLLOUT_BENCH_GPU_COUNT"  # overrides the detected count (tests, dry hosts)


class LeaseError(RuntimeError):
    pass


@dataclass
class Lease:
    ids: list[int]
    _files: list = field(default_factory=list, repr=False)
    slot: int = 0  # which job slot of its GPUs (0 unless a GPU takes several jobs)
    cpus: list[int] = field(default_factory=list)  # its share of the host; [] = not pinned
    port: int | None = None  # MASTER_PORT, where the GPU ids cannot make it unique (SLURM)

    def env(self) -> dict:
        out = {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, self.ids)),
            envinfo.GPU_IDS_VAR: ",".join(map(str, self.ids)),
            # GPUs (slots) are exclusive, so is the lowest id with its slot
            "MASTER_PORT": str(self.port or 29500 + 64 * self.slot + self.ids[0]),
        }
        if self.cpus:  # a library sizing its pool from the host's core count would oversubscribe the share
            n = str(len(self.cpus))
            out.update({isolation.CPUS_VAR: ",".join(map(str, self.cpus)), "OMP_NUM_THREADS": n,
                        "MKL_NUM_THREADS": n})
        return out

    def release(self):
        _unlock(self._files)
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


def slurm_job(environ=os.environ) -> str | None:
    """The SLURM job id when SLURM granted this job its GPUs (CUDA_VISIBLE_DEVICES), else None."""
    if "CUDA_VISIBLE_DEVICES" in environ and envinfo.GPU_IDS_VAR not in environ:
        return environ.get("SLURM_JOB_ID")
    return None


def scope(lock_dir, environ=os.environ) -> tuple[Path, Path]:
    """Where a lease takes its GPU locks, and where it logs (and takes the timing lock).

    SLURM grants GPUs to one job alone and, where it constrains devices, numbers them from 0 in every
    job: granted ids name different GPUs in different jobs, and on a shared filesystem one `gpu0.lock`
    would queue every job of the cluster behind one. So the locks are the SLURM job's own (its leases,
    when snakemake runs inside one allocation, still exclude each other), and the log is the node's:
    a job's neighbours are the jobs on its host."""
    job = slurm_job(environ)
    if job is None:
        return Path(lock_dir), Path(lock_dir)
    return Path(lock_dir) / f"slurm-{job}", Path(lock_dir) / socket.gethostname()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _try_lock(path: Path, shared: bool = False):
    f = open(path, "a+")
    try:
        fcntl.flock(f, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return f
    except BlockingIOError:
        f.close()
        return None


def _unlock(files) -> None:
    for f in files:
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


def _take(lock_dir: Path, gpu: int, slot: int, slots: int, alone: bool = False) -> list | None:
    """One GPU's locks for one job: its GPU lock, exclusive; with several slots, the GPU lock shared
    and the slot's lock exclusive, so that a whole-GPU job and slot jobs (the smoke run beside a
    benchmark) still exclude each other. `alone`: the GPU lock exclusive whatever the slots."""
    if slots == 1 or alone:
        f = _try_lock(lock_dir / f"gpu{gpu}.lock")
        return [f] if f else None
    g = _try_lock(lock_dir / f"gpu{gpu}.lock", shared=True)
    if g is None:
        return None
    s = _try_lock(lock_dir / f"gpu{gpu}.slot{slot}.lock")
    if s is None:
        _unlock([g])
        return None
    return [g, s]


def acquire(n: int, lock_dir, ids: list[int], timeout_s: float = 3600, poll_s: float = 0.2,
            slots: int = 1, alone: bool = False) -> Lease:
    """Take `n` of `ids` in one job slot (of `slots` per GPU), all or none; wait while others hold
    them (Snakemake's count keeps this short). `alone`: the whole of each GPU, no slot job beside it."""
    if n > len(ids):
        raise LeaseError(f"job needs {n} GPU(s) but only {len(ids)} are available here ({ids}); "
                         f"lower --resources gpu / the job's gpu count, or run on a host with more GPUs")
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        for slot in range(1 if alone else slots):
            held = []
            for i in ids:
                files = _take(lock_dir, i, slot, slots, alone)
                if files is not None:
                    held.append((i, files))
                    if len(held) == n:
                        return Lease([i for i, _ in held], [f for _, fs in held for f in fs], slot)
            _unlock([f for _, fs in held for f in fs])
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
    ap = argparse.ArgumentParser(prog="python -m rollout_bench.host.gpu_lease", description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--pin", default="", help="comma-separated physical ids")
    ap.add_argument("--lock-dir", default="results/.gpu_locks")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--slots", type=int, default=1, help="jobs one GPU takes at once (gpu.jobs_per_gpu)")
    ap.add_argument("--alone", action="store_true",
                    help="no other job on its GPUs, whatever --slots (a backend that needs them alone)")
    ap.add_argument("--job", default="", help="label in the lease log (the job's output)")
    ap.add_argument("--timing-lock", action="store_true",
                    help="timed rounds take one lock in the lock dir (gpu.timing_lock)")
    ap.add_argument("--no-pin-cpus", action="store_true", help="leave the CPU affinity and thread counts alone")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command after --")
    if a.gpus == 0:
        return subprocess.call(cmd)
    pin = [int(x) for x in a.pin.split(",") if x.strip()]
    ids, host = candidates(pin), candidates(None)  # every GPU of the host shares out its CPUs
    if set(ids) - set(host):
        print(f"gpu_lease: gpu.pin names GPU(s) {sorted(set(ids) - set(host))} but this host has {host}: "
              f"pin ids among them", file=sys.stderr)
        return 3
    locks, log = scope(a.lock_dir)
    try:
        lease = acquire(a.gpus, locks, ids, a.timeout, slots=a.slots, alone=a.alone)
    except LeaseError as e:
        print(f"gpu_lease: {e}", file=sys.stderr)
        return 3
    if slurm_job() is not None:  # ids and slots repeat across SLURM jobs on one node: ask the OS
        lease.port = free_port()
    lease_id = f"{socket.gethostname()}:{os.getpid()}:{time.time():.3f}"
    try:
        log.mkdir(parents=True, exist_ok=True)
        if not a.no_pin_cpus:
            lease.cpus = cpu_share.for_lease(lease.ids, lease.slot, 1 if a.alone else a.slots, host)
            os.sched_setaffinity(0, lease.cpus)  # the job inherits it
        env = {**os.environ, **lease.env(), isolation.LEASE_VAR: lease_id,
               isolation.LOCK_DIR_VAR: str(log.resolve()),
               isolation.TIMING_LOCK_VAR: "1" if a.timing_lock else "0"}
        isolation.log_event(log, event="start", lease=lease_id, job=a.job or " ".join(cmd)[:200],
                            gpus=lease.ids, slot=lease.slot, cpus=lease.cpus, pid=os.getpid(),
                            host=socket.gethostname())
        print(f"gpu_lease: GPUs {lease.ids} slot {lease.slot} CPUs {lease.cpus or 'unpinned'}", file=sys.stderr)
        return _run(cmd, env)
    finally:
        try:
            isolation.log_event(log, event="end", lease=lease_id)
        finally:
            lease.release()


def _run(cmd: list[str], env: dict) -> int:
    """Run the job; a SIGTERM or SIGHUP to the lease (a scheduler's time limit) goes to the job too,
    which then ends before the lease releases its GPUs and logs its end."""
    proc = subprocess.Popen(cmd, env=env)

    def forward(signum, _frame):
        proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
