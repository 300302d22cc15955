"""Which host CPUs a leased GPU job runs on: a disjoint share per physical GPU (and per job slot).

Two GPU jobs on one host compete for the CPUs that launch their kernels and run their schedulers;
host-bound backends (vLLM's scheduler, HF generate) slow down beside a busy neighbour. Each GPU
owns a fixed slice of the CPUs of its NUMA node (sysfs, where the topology says so; else of all
the CPUs this process may use), split evenly among the GPUs on that node in id order, and that
slice among the GPU's job slots. The slice follows from the GPU lock alone, so two leases never
share a CPU without any other coordination.
"""
import os
import subprocess
from pathlib import Path

SYS = Path("/sys")


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]"""
    out = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def gpu_bus_ids() -> dict[int, str]:
    """Physical GPU index -> sysfs PCI address ('0000:18:00.0'), without initialising CUDA."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    ids = {}
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        idx, _, bus = (x.strip() for x in line.partition(","))
        if idx.isdigit() and bus:
            domain, _, rest = bus.partition(":")
            ids[int(idx)] = f"{domain[-4:]}:{rest}".lower()  # nvidia-smi prints an 8-digit domain
    return ids


def numa_node(bus_id: str | None, sys_root: Path = SYS) -> int | None:
    if not bus_id:
        return None
    try:
        node = int((sys_root / "bus/pci/devices" / bus_id / "numa_node").read_text())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None  # -1: the platform does not say


def node_cpus(node: int, sys_root: Path = SYS) -> list[int]:
    try:
        return parse_cpulist((sys_root / f"devices/system/node/node{node}/cpulist").read_text())
    except OSError:
        return []


def topology(gpus: list[int], sys_root: Path = SYS, bus_ids: dict[int, str] | None = None) -> dict[int, int | None]:
    """GPU id -> its NUMA node (None where unknown)."""
    bus_ids = gpu_bus_ids() if bus_ids is None else bus_ids
    return {g: numa_node(bus_ids.get(g), sys_root) for g in gpus}


def share(gpu: int, slot: int, slots: int, host_gpus: list[int], allowed: list[int],
          nodes: dict[int, int | None], node_cpu_lists: dict[int, list[int]]) -> list[int]:
    """The CPUs of job slot `slot` (of `slots`) on physical GPU `gpu`.

    allowed: the CPUs this process may use (sched_getaffinity); nodes: GPU -> NUMA node or None;
    node_cpu_lists: node -> its CPUs. The GPUs of one node split its allowed CPUs into contiguous
    equal parts (a remainder goes to the first ones); with more slots than CPUs, slots share CPUs
    round-robin rather than run on none. When any GPU of the host has no node with allowed CPUs, every
    GPU splits all the allowed CPUs instead: node-local shares beside a host-wide split would overlap.
    """
    assert gpu in host_gpus and 0 <= slot < slots, (gpu, host_gpus, slot, slots)
    ok = set(allowed)
    pools = {g: [c for c in node_cpu_lists.get(nodes.get(g), []) if c in ok] for g in host_gpus}
    if all(pools.values()):
        pool, peers = pools[gpu], [g for g in host_gpus if nodes.get(g) == nodes.get(gpu)]
    else:
        pool, peers = sorted(ok), list(host_gpus)
    parts = _split(pool, len(peers) * slots)
    return parts[(peers.index(gpu) * slots + slot) % len(parts)]


def _split(cpus: list[int], n: int) -> list[list[int]]:
    if len(cpus) < n:
        return [[c] for c in cpus]
    q, r = divmod(len(cpus), n)
    out, i = [], 0
    for k in range(n):
        size = q + (k < r)
        out.append(cpus[i:i + size])
        i += size
    return out


def for_lease(gpus: list[int], slot: int, slots: int, host_gpus: list[int], sys_root: Path = SYS,
              bus_ids: dict[int, str] | None = None) -> list[int]:
    """The CPU set of a lease of `gpus`: the union of each GPU's slot share."""
    allowed = sorted(os.sched_getaffinity(0))
    nodes = topology(host_gpus, sys_root, bus_ids)
    lists = {n: node_cpus(n, sys_root) for n in set(nodes.values()) if n is not None}
    return sorted({c for g in gpus for c in share(g, slot, slots, host_gpus, allowed, nodes, lists)})
