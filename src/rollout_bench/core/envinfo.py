"""What a result was measured on: package versions and the GPUs this job holds."""
import datetime as _dt
import os
import platform
import time
import subprocess
from functools import cache
from importlib import metadata

PACKAGES = ("torch", "transformers", "peft", "trl", "accelerate", "datasets", "tokenizers",
            "triton", "vllm", "unsloth", "flash-attn", "flash-attn-3", "flash-attn-4", "bitsandbytes",
            "snakemake")

GPU_IDS_VAR = "ROLLOUT_BENCH_GPU_IDS"  # set by gpu_lease: physical ids, comma separated
# where the code runs from a copy without its .git (a GPU host the checkout was carried to): the commit it was
# copied at and whether it differed from it, written there by whoever copied it (workflow/scripts/device/)
COMMIT_VAR, DIRTY_VAR = "ROLLOUT_BENCH_GIT_COMMIT", "ROLLOUT_BENCH_GIT_DIRTY"


def version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def cuda():
    """torch.cuda when torch imports and a GPU is visible, else None: where peak memory is read."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda if torch.cuda.is_available() else None


def gpu_ids() -> list[int]:
    raw = os.environ.get(GPU_IDS_VAR, "")
    return [int(x) for x in raw.split(",") if x.strip()]


def collect() -> dict:
    # The host CPU and its load at job start: launch-bound rollouts (model.generate at 4 rows) run at
    # the speed of the host, so two sessions on the same GPU kind can differ by the host alone.
    env = {"python": platform.python_version(), "host": platform.node(), "cpu_count": os.cpu_count(),
           "cpu_model": cpu_model(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    env.update({p.replace("-", "_"): version(p) for p in PACKAGES})
    env.update(gpu_info())
    env.update(code_version())
    return env


def git(root, *args) -> str | None:
    """git's output in the checkout at `root`; None where it fails (no .git there, an unknown revision)."""
    out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    return out.stdout if out.returncode == 0 else None


@cache
def code_version() -> dict:
    """The git commit of the code that ran and whether the checkout differed from it (uncommitted changes to
    tracked files): from ROLLOUT_BENCH_GIT_COMMIT / _DIRTY where whoever carried the checkout set them, else from
    git where the checkout has its .git; None where neither says. The carrier's word wins: a carried copy's .git
    can be another commit's (a device session's smoke run read 4af6a68, dirty, for a tree at 6e66195)."""
    from .. import ROOT

    commit = os.environ.get(COMMIT_VAR) or None
    if commit:
        dirty = os.environ.get(DIRTY_VAR)
        return {"git_commit": commit, "git_dirty": None if dirty is None else dirty not in ("0", "false", ""),
                "git_source": "env"}
    try:
        head = git(ROOT, "rev-parse", "HEAD")
        status = git(ROOT, "status", "--porcelain", "--untracked-files=no") if head else None
    except (OSError, subprocess.SubprocessError):
        head = status = None
    if head and status is not None:
        return {"git_commit": head.strip(), "git_dirty": bool(status.strip()), "git_source": "git"}
    return {"git_commit": None, "git_dirty": None, "git_source": None}


def utc_iso(t: float | None = None) -> str:
    """A timestamp (now where None) as the stats write dates: UTC, ISO 8601, to the second."""
    return _dt.datetime.fromtimestamp(time.time() if t is None else t, _dt.timezone.utc).isoformat(timespec="seconds")


def process_age_s() -> float | None:
    """Seconds since this process started (the kernel's start time), interpreter start-up included; None off Linux."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime, in clock ticks
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpu_info() -> dict:
    info = {"gpu_name": None, "gpu_count": 0, "gpu_uuids": [], "driver": None, "cuda": None}
    try:
        import torch
    except ImportError:
        return info
    info["cuda"] = torch.version.cuda
    if not torch.cuda.is_available():
        return info
    n = torch.cuda.device_count()
    info["gpu_count"] = n
    info["gpu_name"] = torch.cuda.get_device_name(0)
    info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    info["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    info["gpu_uuids"] = [str(torch.cuda.get_device_properties(i).uuid) for i in range(n)]
    info["driver"] = _driver()
    return info


@cache  # one nvidia-smi call a process: every cell's stats record the driver
def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


@cache  # asked once per job param at DAG build; a host's GPUs don't change under one process
def physical_gpu_count() -> int:
    """GPUs on this host without initialising CUDA (the DAG is built before any job)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")) if out.returncode == 0 else 0
