"""Continuous batching driven from the main thread: transformers 5.17's batch processor, no worker thread.

The manager is only used as the request/result plumbing and is never started; this module calls the
batch processor's prepare -> step -> update loop itself. That puts every forward on the calling thread,
which CUDA graph capture (and torch.compile's cudagraph trees) need.

Variant "graphs": pure decode steps (every request in the batch has one query token) are captured and
replayed as CUDA graphs through the library's own ModelRunner capture path; prefill steps stay eager.
With paged|sdpa all steps take the "varlen" path (the block-table decode path needs flash-attention),
so graphs are keyed by padded (query tokens, KV read, max KV length).
"""
import queue

import torch

from .hf_model import load_model, strip
from .paged_cache import unsupported  # noqa: F401  (the backend hook: models the paged cache cannot hold)
from .transformers_cb import cache_memory, cb_config, cb_generation_config

REQUIRES = ("torch", "transformers", "peft")
NEEDS_GPU = False
VARIANTS = ("eager", "graphs")
ATTN_IMPLEMENTATION = "paged|sdpa"


def unavailable(variant, gpu_count):
    if variant == "graphs" and gpu_count == 0:
        return ("the graphs variant captures CUDA graphs and needs a CUDA GPU; "
                "run it on a GPU host (the eager variant runs here)")
    return None


class Generator:
    def __init__(self, spec):
        self.spec = spec
        self.model = load_model(spec, attn_implementation=ATTN_IMPLEMENTATION)
        graphs = spec.variant == "graphs"
        assert not graphs or torch.cuda.is_available(), "graphs variant needs CUDA"
        # Sync batching only: async double-buffering would need the background thread's IO swap.
        cfg = cb_config(spec, use_cuda_graph=graphs, use_async_batching=False)
        self.manager = self.model.init_continuous_batching(
            generation_config=cb_generation_config(spec), continuous_batching_config=cfg)
        self.manager.batch_processor = self.manager._create_batch_processor()
        self.bp = self.manager.batch_processor
        self.graphs = graphs
        self.graph_note = "eager variant: no CUDA graphs requested" if not graphs else ""
        self.steps = {"prefill": 0, "decode_captured": 0, "decode_replayed": 0, "decode_eager": 0}

    @torch.no_grad()
    def generate(self, prompts, n):
        seqs = [p for p in prompts for _ in range(n)]
        torch.manual_seed(self.spec.sampling.seed)
        ids = self.manager.add_requests(seqs, max_new_tokens=self.spec.max_new_tokens)
        done = {}
        while len(done) < len(ids):
            if not self.bp.prepare_next_batch():
                raise RuntimeError(f"scheduler ran dry with {len(ids) - len(done)} requests unfinished")
            self.step()
            self.bp.update_batch()
            self.drain(done)
        return [strip(list(done[i].generated_tokens), self.spec) for i in ids]

    def step(self):
        io, runner = self.bp.inputs_and_outputs, self.bp.model_runner
        decode = all(fs.query_length == 1 for fs in io.requests_in_batch)
        use_graph = self.graphs and decode
        # The runner pads every step once graphs are on (shapes must match); only decode steps are graphed.
        runner.use_cuda_graph_varlen = use_graph
        if not use_graph:
            self.steps["decode_eager" if decode else "prefill"] += 1
            self.bp._generation_step(self.model)
            return
        # The graph key is only final once the runner pads the batch, so count captures by the buffer's growth.
        graphs_before = len(io.graphs._storage)
        try:
            self.bp._generation_step(self.model)
        # Any failure of the graphed step falls back; rerunning is safe (same cache slots, same values).
        except Exception as e:  # noqa: BLE001
            self.graphs = False
            self.graph_note = f"CUDA graph step failed, fell back to eager: {type(e).__name__}: {e}"[:500]
            runner.use_cuda_graph_varlen = False
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.steps["decode_eager"] += 1
            self.bp._generation_step(self.model)
            return
        captured = len(io.graphs._storage) > graphs_before
        self.steps["decode_captured" if captured else "decode_replayed"] += 1

    def drain(self, done: dict):
        out_q = self.manager.output_router.output_queue
        while True:
            try:
                out = out_q.get_nowait()
            except queue.Empty:
                return
            if out.error is not None:
                raise RuntimeError(f"request {out.request_id} failed: {out.error}")
            if out.is_finished():
                done[out.request_id] = out

    def graph_status(self) -> dict:
        captured = len(self.bp.inputs_and_outputs.graphs._storage)
        used = self.graphs and self.steps["decode_replayed"] > 0
        note = self.graph_note
        if self.spec.variant == "graphs" and not note:
            note = (f"{captured} decode graph(s) captured, {self.steps['decode_replayed']} decode steps replayed"
                    if used else "graphs enabled but no decode step was replayed")
        return {"cuda_graphs": used, "graph_note": note}

    def memory(self):
        return {"reserved_cache_gb": cache_memory(self.bp.cache)["reserved_cache_gb"], **self.graph_status()}

    def info(self):
        return {**cache_memory(self.bp.cache), **self.graph_status(), "steps": dict(self.steps),
                "graph_keys": [list(k) for k in self.bp.inputs_and_outputs.graphs._storage]}

    def close(self):
        self.manager.batch_processor = None
        self.bp = None


def load(spec):
    assert spec.variant in VARIANTS, spec.variant
    return Generator(spec)
