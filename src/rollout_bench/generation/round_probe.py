"""What the process did during one timed round: its CPU time (all threads, and the
thread that called the engine), the garbage collector's passes and pauses, and its context switches.

An engine that schedules and builds its outputs in one Python thread (vLLM in-process, as TRL colocates it) may run
only as fast as that thread: a round that took longer spent the extra time in the collector (`gc.pause_s`), on the
CPU (`thread_cpu_s` grew with the wall), or waiting in a sleep (neither grew). A wait for the GPU where CUDA spins
counts as CPU time, so a thread on a CPU for most of the wall is not by that alone bound by its CPU. `freeze_heap`
moves every object alive before the timed rounds out of the collector's reach, as vLLM's engine does after its own
start-up, so that a collection in a round does not walk the heap the warm-up, the compile and the earlier cells left
behind.
"""
import gc
import resource
import time
from contextlib import contextmanager


class _Pauses:
    """A gc.callbacks hook: passes and seconds per generation."""

    def __init__(self):
        self.passes = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._t = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            g = info["generation"]
            self.passes[g] += 1
            self.seconds[g] += time.perf_counter() - self._t
            self._t = None


def freeze_heap() -> int:
    """Collect, then freeze what survives (never unfrozen: that would also thaw an engine's own frozen heap);
    -> the objects frozen in all."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextmanager
def probe():
    """Wrap one round; the dict it yields is filled when the round ends."""
    pauses, out = _Pauses(), {}
    gc.callbacks.append(pauses)
    r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.thread_time()
    try:
        yield out
    finally:
        c1, t1, r1 = time.process_time(), time.thread_time(), resource.getrusage(resource.RUSAGE_SELF)
        gc.callbacks.remove(pauses)
        out.update({
            "cpu_s": round(c1 - c0, 4),
            "thread_cpu_s": round(t1 - t0, 4),
            "gc": {"passes": pauses.passes, "pause_s": round(sum(pauses.seconds), 6),
                   "gen2_pause_s": round(pauses.seconds[2], 6)},
            "ctx_switches": {"voluntary": r1.ru_nvcsw - r0.ru_nvcsw, "involuntary": r1.ru_nivcsw - r0.ru_nivcsw},
        })
