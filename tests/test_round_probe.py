"""A timed round records what the process did besides waiting: CPU time, the collector's passes and pauses; the
heap is frozen before the rounds."""
import gc
import time
import weakref

from rollout_bench.generation import measure, round_probe

from .test_generation_job import BASE


class _Cycles:
    """A generator that makes cyclic garbage (as an engine's output objects may) and, on the round asked, burns CPU
    in its own thread or sleeps."""

    def __init__(self, burn: dict[int, float], sleep: dict[int, float]):
        self.calls, self.burn, self.sleep = 0, burn, sleep

    def generate(self, prompts, n):
        i, self.calls = self.calls, self.calls + 1
        for _ in range(20_000):
            a = []
            a.append(a)
        t = time.thread_time()
        while time.thread_time() - t < self.burn.get(i, 0.0):
            pass
        time.sleep(self.sleep.get(i, 0.0))
        return [[1, 2, 3] for _ in range(len(prompts) * n)]


def test_probe_counts_collections_and_cpu():
    with round_probe.probe() as rec:
        for _ in range(5_000):
            a = []
            a.append(a)
        gc.collect()
        t = time.thread_time()
        while time.thread_time() - t < 0.05:
            pass
    assert rec["gc"]["passes"][2] >= 1 and sum(rec["gc"]["passes"]) > 1
    assert rec["gc"]["pause_s"] >= rec["gc"]["gen2_pause_s"] >= 0  # microseconds on a small heap
    assert rec["thread_cpu_s"] >= 0.05 and rec["cpu_s"] >= rec["thread_cpu_s"] - 1e-3
    assert set(rec["ctx_switches"]) == {"voluntary", "involuntary"}
    assert round_probe._Pauses not in map(type, gc.callbacks)  # the hook is gone once the round ends


def test_freeze_moves_the_heap_out_of_reach():
    """What was alive at the freeze is out of the collector's reach: a cycle dropped after it outlives a full
    collection. (The freeze count itself is no witness: a frozen object freed by its reference count leaves it.)"""
    class Node:
        pass

    keep = [[] for _ in range(10_000)]
    node = Node()
    node.me = node
    ref = weakref.ref(node)
    frozen = round_probe.freeze_heap()
    assert frozen >= len(keep)
    del node
    gc.collect()
    assert ref() is not None


def test_each_round_says_where_its_time_went():
    """Round 2 (the second timed round) burns CPU in the engine's thread, round 3 waits: the records tell them apart."""
    gen = _Cycles(burn={2: 0.2}, sleep={3: 0.2})
    wl = {**BASE, "rounds": 3, "batch_size": 2, "n_prompts": 2}
    spec = measure.spec_from_workload(wl, "m", None, "eager", eos_token_id=0, pad_token_id=0, max_prompt_tokens=8)
    rounds = [[[5, 6], [7, 8]] for _ in range(3)]
    out = measure.measure_cell(gen, spec, wl, [rounds], warmup=[[1, 2]], cuda=None)
    f = out["fields"]
    assert f["gc_frozen_objects"] > 0
    procs = [r["process"] for r in f["rounds"]]
    assert procs[1]["thread_cpu_s"] >= 0.2 > procs[0]["thread_cpu_s"] + 0.1
    assert procs[2]["thread_cpu_s"] < 0.1 and f["rounds"][2]["wall_s"] >= 0.2
    assert all(p["gc"]["passes"][0] > 0 for p in procs)  # the engine's cyclic garbage was collected in each round
