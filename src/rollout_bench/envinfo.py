"""What a result was measured on: package versions and the GPUs this job holds."""
import os
import platform
import subprocess
from functools import cache
from importlib import metadata

PACKAGES = ("torch", "transformers", "peft", "trl", "accelerate", "datasets", "tokenizers",
            "triton", "vllm", "unsloth", "flash-attn", "flash-attn-3", "flash-attn-4", "bitsandbytes",
            "snakemake")

GPU_IDS_VAR = "ROLLOUT_BENCH_GPU_IDS"  # set by gpu_lease: physical ids, comma separated


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
    return env


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
