"""A decode step's GEMMs on their own: each projection shape of a model at a few rows, under each GEMM the engine
could call, against the device's copy rate.

At small batches a decode step is its weight reads: Qwen3-4B's 8.05 GB at B = 8 took 2.57 of a 3.97 ms step under
cuBLAS, 0.74 of the copy rate (h200-2026-12-03-session15). This times, per shape (fused qkv, o, fused gate_up,
down, lm_head) and rows M, the replay of a CUDA graph that runs the shape once per layer on that layer's own
weights, as a step does: every weight is read once a replay, nothing stays in L2, and launch gaps are the graph's.
Implementations: cuBLAS as torch calls it (`cublas`), torch's cuBLASLt path (`cublaslt`), the transposed product
w @ x.T (`cublas_wxT`, which leaves y transposed), and the split-K Triton kernel of engine/skinny_gemm.py over its
tile grid. Each output is checked against a float32 product of the same operands (bf16 operands: under 1e-2).
Random operands, never zeros (METHOD.md). Times are the median of `repeats` replays, each timed by CUDA events.
"""
import json
import statistics
import time

import torch

from ..engine import skinny_gemm, smem
from .decode_sweep import MIN_GAIN

CUBLAS = ("cublas", "cublaslt", "cublas_wxT")
MAX_REL_ERR = 1e-2  # bf16 operands, fp32 accumulation


def decode_shapes(cfg: dict) -> list[dict]:
    """The GEMMs of one decode step of a uniform-layer decoder (Qwen3, Llama): name, n (outputs), k (inputs), count
    (per step). q/k/v and gate/up fused, as the flex engine runs them; the output head once."""
    if cfg.get("model_type") not in ("qwen3", "llama"):
        raise ValueError(f"gemm_bench: model_type {cfg.get('model_type')!r} has per-layer shapes; "
                         f"decode_shapes takes a qwen3 or llama config")
    hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    hq, hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or hidden // hq
    inter = cfg["intermediate_size"]
    return [
        {"name": "qkv", "n": (hq + 2 * hkv) * d, "k": hidden, "count": layers},
        {"name": "o", "n": hidden, "k": hq * d, "count": layers},
        {"name": "gate_up", "n": 2 * inter, "k": hidden, "count": layers},
        {"name": "down", "n": hidden, "k": inter, "count": layers},
        {"name": "lm_head", "n": cfg["vocab_size"], "k": hidden, "count": 1},
    ]


def step_bytes(shapes: list[dict], elt: int = 2) -> int:
    """Weight bytes one decode step's GEMMs read."""
    return sum(s["n"] * s["k"] * s["count"] * elt for s in shapes)


def summarize(shapes: list[dict], results: dict, copy_gb_s: float | None) -> dict:
    """Per M: each shape's cuBLAS time and its best implementation, and the step's GEMM total under cuBLAS as
    torch calls it against the best of every implementation per shape. results[m][shape][impl] = per-GEMM ms
    or an error string (never the best)."""
    out = {}
    for m, by_shape in results.items():
        rows, base_ms, best_ms = [], 0.0, 0.0
        for s in shapes:
            timed = {k: v for k, v in by_shape[s["name"]].items() if isinstance(v, float)}
            assert "cublas" in timed, f"no cuBLAS time for {s['name']} at M = {m}"
            best = min(timed, key=timed.get)
            gb = s["n"] * s["k"] * 2 / 1e9
            row = {"shape": s["name"], "n": s["n"], "k": s["k"], "count": s["count"],
                   "cublas_ms": timed["cublas"], "cublas_gb_s": round(gb / timed["cublas"] * 1e3, 1),
                   "best": best, "best_ms": timed[best], "best_gb_s": round(gb / timed[best] * 1e3, 1)}
            if copy_gb_s:
                row["cublas_of_copy"] = round(row["cublas_gb_s"] / copy_gb_s, 3)
                row["best_of_copy"] = round(row["best_gb_s"] / copy_gb_s, 3)
            rows.append(row)
            base_ms += timed["cublas"] * s["count"]
            best_ms += timed[best] * s["count"]
        gb = step_bytes(shapes) / 1e9
        out[m] = {"shapes": rows, "step_cublas_ms": round(base_ms, 4), "step_best_ms": round(best_ms, 4),
                  "step_at_copy_rate_ms": round(gb / copy_gb_s * 1e3, 4) if copy_gb_s else None}
    return out


def table(record: dict) -> str:
    """Markdown: one row per M and shape, then the step totals."""
    lines = ["| M | shape | n x k | cuBLAS ms | cuBLAS GB/s | best | best ms | best GB/s |",
             "|--:|---|---|--:|--:|---|--:|--:|"]
    totals = ["", "| M | step GEMMs, cuBLAS ms | best per shape, ms | at the copy rate, ms |", "|--:|--:|--:|--:|"]
    for m, s in record["summary"].items():
        for r in s["shapes"]:
            lines.append(f"| {m} | {r['shape']} | {r['n']} x {r['k']} | {r['cublas_ms']:.4f} | {r['cublas_gb_s']:,.0f} "
                         f"| {r['best']} | {r['best_ms']:.4f} | {r['best_gb_s']:,.0f} |")
        at_copy = "" if s["step_at_copy_rate_ms"] is None else f"{s['step_at_copy_rate_ms']:.3f}"
        totals.append(f"| {m} | {s['step_cublas_ms']:.3f} | {s['step_best_ms']:.3f} | {at_copy} |")
    copy = record.get("copy_gb_s")
    head = f"copy rate {copy:,.0f} GB/s" if copy else "copy rate not measured"
    return f"{record['model']}, {record['env'].get('gpu_name')}, {head}\n\n" + "\n".join(lines + totals) + "\n"


def _graph_ms(fn, count: int, repeats: int) -> float:
    """Median ms per call of fn(i) for i < count, captured as one CUDA graph and replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(count):  # warm-up outside capture: Triton compiles, cuBLAS picks its kernels
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(count):
            fn(i)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / count)
    del graph
    return round(statistics.median(times), 5)


def _impl(name: str, tiles=None):
    """(x [M, K], w [N, K], out [M, N], partial) -> y, for one implementation."""
    if name in ("cublas", "cublaslt"):  # cuBLASLt: the same call under preferred_blas_library (time_impls)
        return lambda x, w, out, partial: torch.matmul(x, w.t(), out=out)
    if name == "cublas_wxT":
        return lambda x, w, out, partial: torch.mm(w, x.t(), out=out.view(out.shape[1], out.shape[0]))
    assert tiles is not None, name
    return lambda x, w, out, partial: skinny_gemm.triton_linear(x, w, tiles, out=out, scratch=partial)


def time_impls(weights, m: int, impls: list[tuple[str, object]], repeats: int) -> dict:
    """{impl: ms per GEMM, or why not} of x [m, K] times each of `weights` (the layers' own [N, K] weights, a
    list or a stacked tensor) in turn, as one graph; impls: (name, Tiles or None for the cuBLAS names)."""
    w0 = weights[0]
    (n, k), count = w0.shape, len(weights)
    x = torch.randn(m, k, device=w0.device, dtype=w0.dtype)
    ref = x.float() @ w0.float().t()  # [M, N]: the first weight's product, in float32
    y = torch.empty(count, m, n, device=w0.device, dtype=w0.dtype)
    res = {}
    for name, tiles in impls:
        fn = _impl(name, tiles)
        partial = None
        if tiles is not None and skinny_gemm.splits(k, tiles) > 1:
            partial = torch.empty(skinny_gemm.splits(k, tiles), m, n, device=w0.device, dtype=torch.float32)
        prev = torch.backends.cuda.preferred_blas_library()
        try:
            if name == "cublaslt":
                torch.backends.cuda.preferred_blas_library("cublaslt")
            y.normal_()  # poison: every element must be written
            fn(x, w0, y[0], partial)
            got = (y[0].view(n, m).t() if name == "cublas_wxT" else y[0]).float()
            err = ((got - ref).norm() / ref.norm()).item()
            if not err < MAX_REL_ERR:  # NaN fails too
                res[name] = f"wrong: relative error {err:.3g} against float32"
                continue
            res[name] = _graph_ms(lambda i: fn(x, weights[i], y[i], partial), count, repeats)
        except Exception as e:  # noqa: BLE001 -- a tile set the compiler or the GPU refuses is a result too
            res[name] = f"{type(e).__name__}: {str(e)[:200]}"
        finally:
            torch.backends.cuda.preferred_blas_library(prev)
    return res


def runner_weights(runner) -> dict[str, list] | None:
    """The weights a runner's decode GEMMs multiply by, per shape key ("NxK"), layer by layer, the head's last; None
    where the engine's skinny_gemm.linear does not run them (weights not bf16/fp16, projections unfused or
    wrapped by PEFT, per-layer shapes: Gemma-4)."""
    lm = runner.lm
    if lm.config.model_type not in ("qwen3", "llama") or runner.dtype not in skinny_gemm.DTYPES:
        return None
    projections = [(layer.self_attn.o_proj, layer.mlp.down_proj) for layer in runner.layers]
    if runner.fused[0][0] is None or any(type(m) is not torch.nn.Linear or m.bias is not None
                                         for pair in projections for m in pair):
        return None
    out: dict[str, list] = {}
    for (o, down), (w_qkv, w_gate_up) in zip(projections, runner.fused):
        for w in (w_qkv, o.weight, w_gate_up, down.weight):
            out.setdefault(skinny_gemm.shape_key(*w.shape), []).append(w)
    head = lm.lm_head.weight
    out.setdefault(skinny_gemm.shape_key(*head.shape), []).append(head)
    return out


def tune_tiles(runner, rows: int, repeats: int = 10, min_gain: float = MIN_GAIN) -> dict | None:
    """The autotune pass's GEMM step: per weight shape of the runner's decode, cuBLAS and each of
    skinny_gemm.TUNE_CANDIDATES that fit, timed at `rows` rows on the layers' own weights. tiles: the shapes whose
    fastest candidate beats cuBLAS by more than min_gain, with it (the decode option GEMM_TILES). None where the
    runner's decode does not go through skinny_gemm."""
    weights = runner_weights(runner)
    if weights is None or rows > skinny_gemm.MAX_ROWS:
        return None
    limit = smem.device_limit(runner.device)
    ms, tiles = {}, {}
    for shape, ws in weights.items():
        n, k = ws[0].shape
        impls = [("cublas", None)] + [(t.key(), t) for t in skinny_gemm.TUNE_CANDIDATES
                                      if t.fits(n, k, limit, ws[0].element_size())]
        ms[shape] = res = time_impls(ws, rows, impls, repeats)
        timed = {name: v for name, v in res.items() if isinstance(v, float) and name != "cublas"}
        if timed and isinstance(res["cublas"], float):
            best = min(timed, key=timed.get)
            if timed[best] < (1 - min_gain) * res["cublas"]:
                tiles[shape] = best
    return {"rows": rows, "repeats": repeats, "min_gain": min_gain, "ms": ms, "tiles": tiles}


def _time_shape(shape: dict, w, ms: list[int], repeats: int, smem_limit: int, log) -> dict:
    """results[m][impl] for one shape; w [count, N, K]: cuBLAS's three calls and, at M <= 16, the tile grid."""
    grid = skinny_gemm.candidates(shape["n"], shape["k"], smem_limit)
    out = {}
    for m in ms:
        impls = [(name, None) for name in CUBLAS] + ([(t.key(), t) for t in grid] if m <= skinny_gemm.MAX_ROWS else [])
        out[m] = res = time_impls(w, m, impls, repeats)
        log(f"{shape['name']} M={m}: cublas {res['cublas']} ms, best "
            f"{min((v for v in res.values() if isinstance(v, float)), default=None)}")
    return out


def run(*, model: str, config: dict, ms: list[int], out: str, table_out: str | None = None, repeats: int = 20,
        seed: int = 0) -> dict:
    from ..core import atomic, stats
    from ..host import copy_rate

    if not torch.cuda.is_available():
        raise RuntimeError("gemm_bench times CUDA graphs: run it on a GPU host")
    shapes = decode_shapes(config)
    record = stats.base("gemm_bench", backend="flex", variant="graphs", model=model,
                        workload={"ms": sorted(ms), "dtype": "bfloat16", "repeats": repeats, "seed": seed,
                                  "shapes": shapes})
    t0 = record.pop("_t0")
    torch.manual_seed(seed)
    record["copy_gb_s"] = copy_rate.measure("cuda")
    limit = smem.device_limit("cuda")

    def log(msg):
        print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)

    results = {m: {} for m in sorted(ms)}
    for s in shapes:
        # one weight per layer, as a step reads them; scaled so that y stays O(1)
        w = torch.randn(s["count"], s["n"], s["k"], device="cuda", dtype=torch.bfloat16) * s["k"] ** -0.5
        for m, res in _time_shape(s, w, sorted(ms), repeats, limit, log).items():
            results[m][s["name"]] = res
        del w
        torch.cuda.empty_cache()
    record["results"] = {str(m): r for m, r in results.items()}
    record["summary"] = {str(m): v for m, v in summarize(shapes, results, record["copy_gb_s"]).items()}
    record["wall_s"] = round(time.perf_counter() - t0, 3)
    atomic.write_json(out, record)
    if table_out:
        atomic.write_text(table_out, table(record))
    return record


def load_config(model: str) -> dict:
    """config/models/<model>.json, the shipped config the pipeline builds the model from."""
    from .. import MODEL_CONFIGS

    return json.loads((MODEL_CONFIGS / f"{model}.json").read_text())
