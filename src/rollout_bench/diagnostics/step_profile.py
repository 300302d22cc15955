"""Where one flex decode step's time goes, by kernel class: GEMM, attention, the BlockMask built from
the page table, norm/rotary/elementwise, sampling, and the gaps between kernels.

The step is profiled (torch.profiler) mid-generation, as a flex job runs it: on CUDA, replays of its
captured graph; without CUDA, the eager step, whose CPU ops stand for kernels. A graph replay runs no
host code, so nothing in its profile says which call launched a kernel. Each kernel name's class comes
instead from one eager step profiled with the step's attention, BlockMask and sampler calls named
(`scoped`): a kernel launched inside one of those scopes is of its class, any other is GEMM by its library
name (cuBLAS's nvjet/xmma/splitK, CUTLASS, aten's mm on CPU) or else norm/rotary/elementwise (RMSNorm,
RoPE, SiLU·mul, the KV cache's write, casts). Inductor's generated names need no guessing. A name
the eager step did not launch (cuBLAS may pick another kernel under capture) falls back to its library
name, and is listed. Gaps: the profiled window over the steps minus the union of the kernels' intervals.
"""
import contextlib
import re
from collections import Counter, defaultdict

import torch

from ..engine import sampler
from .decode_sweep import device_ms, to_mid_generation

CLASSES = ("gemm", "attention", "block_mask", "norm_rotary_elementwise", "sampling")
SCOPE = "rollout_bench::"
# the scopes `scoped` opens; other events of the prefix are ops of the package's own namespace
# (engine/skinny_gemm.py's rollout_bench::decode_linear), not scopes
SCOPES = frozenset({"attention", "block_mask", "sampling"})
# GPU: cuBLAS (nvjet_*, sm90_xmma_gemm_*, cublasLt::splitKreduce_kernel), CUTLASS, gemv, engine/skinny_gemm.py's
# split-K kernels (skinny_gemm_partial, skinny_gemm_reduce); CPU: aten's own names
GEMM = re.compile(r"nvjet|gemm|gemv|cutlass|xmma|cublas|splitk|^aten::(?:mm|addmm|bmm|baddbmm|matmul|linear)$", re.I)


def scope_of(name: str) -> str | None:
    """The class a scope event names, None for any other event."""
    rest = name[len(SCOPE):] if name.startswith(SCOPE) else None
    return rest if rest in SCOPES else None


def library_class(name: str) -> str:
    return "gemm" if GEMM.search(name) else "norm_rotary_elementwise"


@contextlib.contextmanager
def scoped(runner):
    """Name the decode step's attention, BlockMask and sampler calls for the profiler (host code: eager
    steps only). The runner's are instance attributes, shadowed and restored; the sampler is its module's."""
    assert "decode_inputs" not in vars(runner), "decode_inputs is the runner's method, shadowed here alone"
    attend, masks, sample = runner.attn_decode, runner.decode_inputs, sampler.sample

    def named(scope, fn):
        assert scope in SCOPES, scope

        def call(*args, **kwargs):
            with torch.profiler.record_function(SCOPE + scope):
                return fn(*args, **kwargs)
        return call

    runner.attn_decode, runner.decode_inputs = named("attention", attend), named("block_mask", masks)
    sampler.sample = named("sampling", sample)
    try:
        yield
    finally:
        runner.attn_decode, sampler.sample = attend, sample
        del runner.decode_inputs  # the class's method again


def _scope(event) -> str | None:
    while event is not None:
        if (scope := scope_of(event.name)) is not None:
            return scope
        event = event.cpu_parent
    return None


def _host_ops(prof):
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU and not e.is_async]


def attribute(prof, on_cuda: bool) -> dict[str, Counter]:
    """name -> {class: microseconds} from a profile of eager steps run under `scoped`: on CUDA each host
    op's kernels, else each host op's own time (its children's excluded), go to the scope around the op."""
    out = defaultdict(Counter)
    for e in _host_ops(prof):
        scope = _scope(e)
        if on_cuda:  # a kernel is attached to the innermost op that launched it, never to a scope
            for k in e.kernels:
                out[k.name][scope or library_class(k.name)] += k.duration
        elif scope_of(e.name) is None:
            out[e.name][scope or library_class(e.name)] += e.self_cpu_time_total
        else:  # the scope's own host time (the wrapper) is that call's
            out[e.name][scope] += e.self_cpu_time_total
    return dict(out)


def timeline(prof, on_cuda: bool) -> tuple[Counter, list[tuple[float, float]]]:
    """Microseconds per name, and the busy intervals: CUDA kernels, or host ops (own time; top-level spans)."""
    if on_cuda:  # a record_function scope also has a device-side span over its kernels: not a kernel
        kernels = [e for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and not e.is_user_annotation]
        per_name = Counter()
        for k in kernels:
            per_name[k.name] += k.time_range.elapsed_us()
        return per_name, [(k.time_range.start, k.time_range.end) for k in kernels]
    ops = _host_ops(prof)
    per_name = Counter()
    for e in ops:
        per_name[e.name] += e.self_cpu_time_total
    return per_name, [(e.time_range.start, e.time_range.end) for e in ops if e.cpu_parent is None]


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


def split(per_name: Counter, classes: dict[str, Counter]) -> tuple[dict[str, float], list[str]]:
    """Each name's time shared among classes as its eager launches were; names never launched eagerly go
    by their library name, and are returned."""
    out, unseen = dict.fromkeys(CLASSES, 0.0), []
    for name, us in per_name.items():
        seen = classes.get(name)
        if not seen or not sum(seen.values()):
            unseen.append(name)
            out[library_class(name)] += us
            continue
        total = sum(seen.values())
        for cls, part in seen.items():
            out[cls] += us * part / total
    return out, sorted(unseen)


@torch.no_grad()
def profile(engine, prompts: list[list[int]], new_tokens: int, steps: int | None = None) -> dict:
    """Per decode step at len(prompts) rows, mid-generation (about half of new_tokens decoded), greedy:
    milliseconds per kernel class, the kernels' busy time, the gaps, and the step's wall unprofiled.
    The engine is left idle."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    runner, on_cuda = engine.runner, engine.runner.device.type == "cuda"
    assert not engine.scheduler.has_work, "step_profile needs an idle engine"
    steps = steps or runner.cfg.decode_chunk
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    try:
        running = to_mid_generation(engine, prompts, new_tokens, steps)
        bucket = runner.bucket(len(running))
        if runner.graphs_on and (bucket, "greedy") not in runner.graphs:
            runner.capture([bucket], "greedy")
        graph = runner.graphs.get((bucket, "greedy")) if runner.graphs_on else None

        def eager():
            runner.decode_step(bucket, "greedy")

        def profiled(step, n: int, named: bool):
            runner.set_rows(running, bucket)  # the same positions each time, and outside the profiled window
            if on_cuda:
                torch.cuda.synchronize()
            with scoped(runner) if named else contextlib.nullcontext(), torch_profile(activities=activities) as prof:
                for _ in range(n):
                    step()
                if on_cuda:
                    torch.cuda.synchronize()
            return prof

        runner.set_rows(running, bucket)
        step_ms = device_ms(graph.replay if graph is not None else eager, steps)
        named = profiled(eager, 1 if graph is not None else steps, named=True)
        classes = attribute(named, on_cuda)
        timed = named if graph is None else profiled(graph.replay, steps, named=False)
        per_name, spans = timeline(timed, on_cuda)
    finally:
        engine.abort()
    assert spans, "the profiler recorded nothing of the decode step"
    by_class, unseen = split(per_name, classes)
    busy = union_us(spans) / 1e3 / steps
    window = (max(hi for _, hi in spans) - min(lo for lo, _ in spans)) / 1e3 / steps
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:12]
    return {"rows": len(running), "bucket": bucket, "steps": steps, "replay": "eager" if graph is None else "graph",
            "step_ms": round(step_ms, 4), "profiled_step_ms": round(window, 4),
            "class_ms": {c: round(us / 1e3 / steps, 4) for c, us in by_class.items()},
            "busy_ms": round(busy, 4), "gaps_ms": round(window - busy, 4),
            "kernels_per_step": round(len(spans) / steps, 1) if on_cuda else None,
            "top": [[name[:100], (classes.get(name) or Counter({library_class(name): 1})).most_common(1)[0][0],
                     round(us / 1e3 / steps, 4)] for name, us in top],
            "unattributed": unseen}
