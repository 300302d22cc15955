"""Pin a job to physical GPUs: one flock per GPU, all-or-none, then run the command on them.

Snakemake counts `gpu` but never says which; this wrapper picks free ids under its locks and
exports CUDA_VISIBLE_DEVICES (PCI bus order), a MASTER_PORT unique to the lease, and the ids
for the stats file. A scheduler that already set CUDA_VISIBLE_DEVICES (SLURM) is honoured.

    python -m rollout_bench.gpu_lease --gpus 1 [--pin 2,3] [--lock-dir D] -- CMD ARGS...
"""
import argparse
import fcntl
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import envinfo

COUNT_VAR = "ROLLOUT_BENCH_GPU_COUNT"  # overrides the detected count (tests, dry hosts)


class LeaseError(RuntimeError):
    pass


@dataclass
class Lease:
    ids: list[int]
    _files: list = field(default_factory=list, repr=False)

    def env(self) -> dict:
        return {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, self.ids)),
            envinfo.GPU_IDS_VAR: ",".join(map(str, self.ids)),
            "MASTER_PORT": str(29500 + self.ids[0]),  # GPUs are exclusive, so is the lowest id
        }

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


def acquire(n: int, lock_dir, ids: list[int], timeout_s: float = 3600, poll_s: float = 0.2) -> Lease:
    """Take `n` of `ids`, all or none; wait while others hold them (Snakemake's count keeps this short)."""
    if n > len(ids):
        raise LeaseError(f"job needs {n} GPU(s) but only {len(ids)} are available here ({ids}); "
                         f"lower --resources gpu / the job's gpu count, or run on a host with more GPUs")
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        held = []
        for i in ids:
            f = _try_lock(lock_dir / f"gpu{i}.lock")
            if f is not None:
                held.append((i, f))
                if len(held) == n:
                    return Lease([i for i, _ in held], [f for _, f in held])
        for _, f in held:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()
        if time.monotonic() > deadline:
            raise LeaseError(f"no {n} free GPU(s) among {ids} after {timeout_s:.0f}s: another process holds "
                             f"the locks in {lock_dir}")
        time.sleep(poll_s)


def check_budget(needed_per_job: int, budget, host_gpus: int) -> None:
    """Fail before any job when `--resources gpu=N` is missing, too small, or over the host's GPUs."""
    if needed_per_job == 0:
        return
    if budget is None:
        raise LeaseError(f"GPU jobs need --resources gpu=N (each takes {needed_per_job}); this host has "
                         f"{host_gpus}: run e.g. `snakemake --cores 8 --resources gpu={max(host_gpus, needed_per_job)}`")
    if budget < needed_per_job:
        raise LeaseError(f"--resources gpu={budget} but a job needs {needed_per_job} GPU(s): pass gpu>={needed_per_job}")
    if budget > host_gpus:
        raise LeaseError(f"--resources gpu={budget} but this host has only {host_gpus} GPU(s): pass gpu={host_gpus} "
                         f"(or set {COUNT_VAR} where nvidia-smi cannot see them)")


def host_gpu_count(environ=os.environ) -> int:
    return len(candidates(None, environ))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rollout_bench.gpu_lease", description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--pin", default="", help="comma-separated physical ids")
    ap.add_argument("--lock-dir", default="results/.gpu_locks")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command after --")
    if a.gpus == 0:
        return subprocess.call(cmd)
    pin = [int(x) for x in a.pin.split(",") if x.strip()]
    try:
        lease = acquire(a.gpus, a.lock_dir, candidates(pin), a.timeout)
    except LeaseError as e:
        print(f"gpu_lease: {e}", file=sys.stderr)
        return 3
    try:
        print(f"gpu_lease: GPUs {lease.ids}", file=sys.stderr)
        return subprocess.call(cmd, env={**os.environ, **lease.env()})
    finally:
        lease.release()


if __name__ == "__main__":
    sys.exit(main())
