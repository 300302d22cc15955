"""The rollout engine: requests in, completions (tokens + logprobs) out."""
import time
from dataclasses import replace

import torch

from . import fused, sampler, traffic
from .config import EngineConfig
from .lora import DoubleCopy, causal_lm, is_lora_layer, load_adapter
from .model_runner import ModelRunner
from .scheduler import Scheduler
from .sequence import Completion, Sequence


def peft_adapter(model) -> tuple[tuple[str, ...], dict, float] | None:
    """(target names, A/B state, scaling) of a PeftModel's active adapter; None for a plain model."""
    lm = causal_lm(model)
    layers = {n: m for n, m in lm.named_modules() if is_lora_layer(m)}
    if not layers:
        return None
    state, scalings = {}, set()
    for name, mod in layers.items():
        (adapter,) = mod.active_adapters
        state[f"{name}.lora_A.weight"] = mod.lora_A[adapter].weight
        state[f"{name}.lora_B.weight"] = mod.lora_B[adapter].weight
        scalings.add(mod.scaling[adapter])
    assert len(scalings) == 1, f"one LoRA scaling expected, got {scalings}"
    targets = tuple(sorted({n.rsplit(".", 1)[-1] for n in layers}))
    return targets, state, scalings.pop()


class Engine:
    def __init__(self, model, config: EngineConfig | None = None, owns_weights: bool = False):
        """model: an HF Qwen3/Llama CausalLM, or a PeftModel of one, already on its device and dtype.

        With LoRA targets (from config, or the PeftModel's adapter when lora_merge) the engine runs a
        copy of the targeted weights with the adapter merged; `model`'s values are never written.
        owns_weights: nothing else holds `model`'s parameters, so the engine may re-lay them as fused
        projections (values unchanged; the modules' weights become views).
        """
        config = config or EngineConfig()
        self.owns_weights = owns_weights
        if owns_weights:  # inference only; a model it shares (a trainer's) keeps its flags
            model.requires_grad_(False)
        adapter = peft_adapter(model)
        if adapter and config.lora_merge and not config.lora_targets:
            config = replace(config, lora_targets=adapter[0])
        self.config = config
        self.lora = DoubleCopy(model, config.lora_targets) if config.lora_targets and config.lora_merge else None
        on_host = owns_weights if config.pristine_on_host is None else config.pristine_on_host
        if self.lora and on_host:  # nothing but refresh() reads the pristine base: the GPU holds one copy
            self.lora.offload_pristine()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        self.model = self.lora.model if self.lora else causal_lm(model)  # PEFT layers stay: unmerged path
        self.model.eval()
        fuse = config.fuse_projections
        fuse = (self.lora is not None or owns_weights) if fuse is None else fuse
        if fuse and not fused.fusable(self.model.model.layers):
            assert config.fuse_projections is None, "fuse_projections=True needs plain bias-free Linear projections"
            fuse = False
        self.runner = ModelRunner(self.model, config, fuse=fuse)
        self.scheduler = Scheduler(config, self.runner.pages)
        # wall time by phase; both phases end in a host sync, so these are device times too
        self.timings = {"prefill_s": 0.0, "prefill_tokens": 0, "prefill_passes": 0, "decode_s": 0.0,
                        "decode_steps": 0, "decode_rows": 0, "decode_chunks": 0, "decode_bytes": 0}
        # what one decode step must read (traffic.py): the weights whole, and per cached token its K/V
        self.step_weight_bytes = traffic.weight_bytes(self.model)
        self.kv_token_bytes = traffic.kv_token_bytes(self.runner.kv.layers, [p.window for p in self.runner.plan])
        if self.lora and adapter:
            self.refresh_lora(adapter[1], adapter[2])
        if self.runner.graphs_on and config.capture_all:
            for how in ("greedy", "topk"):
                self.runner.capture(self.runner.buckets, how)

    @classmethod
    def from_pretrained(cls, model_dir, config: EngineConfig | None = None, adapter_dir=None, device="cpu",
                        dtype=torch.float32) -> "Engine":
        """Load an HF model dir; with a PEFT adapter dir, merge it into the inference copy."""
        from transformers import AutoModelForCausalLM

        config = config or EngineConfig()
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
        if adapter_dir is None:
            return cls(model, config, owns_weights=True)
        state, scaling, targets = load_adapter(adapter_dir)
        projections = {n.rsplit(".", 1)[-1] for n, m in model.model.layers[0].named_modules()
                       if isinstance(m, torch.nn.Linear)}
        unknown = set(targets) - projections
        assert not unknown, f"adapter targets {sorted(unknown)} are not projections of a decoder layer"
        engine = cls(model, replace(config, lora_targets=config.lora_targets or targets, lora_merge=True),
                     owns_weights=True)
        engine.refresh_lora(state, scaling)
        return engine

    def refresh_lora(self, adapter_state: dict[str, torch.Tensor], scaling: float) -> None:
        """Merged weights <- pristine + scaling * B @ A, in place (CUDA graphs stay valid)."""
        assert self.lora is not None, "engine built without LoRA targets (EngineConfig.lora_targets)"
        self.lora.refresh(adapter_state, scaling)

    # requests
    def submit(self, prompts: list[list[int]], sampling, max_new_tokens: int | list[int], n: int = 1,
               ignore_eos: bool = False, eos_token_id: int | None = None, first_index: int = 0) -> list[Sequence]:
        """Queue n completions per prompt; sequence i (prompt-major, from first_index) samples with
        request_seed(sampling.seed, i), so its draws do not depend on what runs beside it. max_new_tokens: one
        budget for all, or each sequence's own (prompt-major, len(prompts) * n: a recorded rollout's lengths)."""
        budgets = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * (len(prompts) * n)
        assert n >= 1 and len(budgets) == len(prompts) * n and min(budgets, default=1) >= 1, (n, len(budgets))
        seqs = []
        for p, prompt in enumerate(prompts):
            longest = max(budgets[p * n:(p + 1) * n])
            assert prompt and len(prompt) + longest <= self.config.max_seq_len, \
                f"prompt of {len(prompt)} + {longest} new tokens exceeds max_seq_len={self.config.max_seq_len}"
            group = []
            for j in range(n):
                index = first_index + p * n + j
                group.append(Sequence(
                    id=index, tokens=list(prompt), prompt_len=len(prompt), max_new_tokens=budgets[p * n + j],
                    temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                    min_p=sampling.min_p, seed=sampler.request_seed(sampling.seed, index),
                    eos_token_id=None if ignore_eos else eos_token_id))
            self.scheduler.add(group)
            seqs.extend(group)
        return seqs

    def generate(self, prompts: list[list[int]], sampling, max_new_tokens: int | list[int], n: int = 1,
                 ignore_eos: bool = False, eos_token_id: int | None = None) -> list[Completion]:
        """n completions per prompt, prompt-major. See Completion for what the logprobs are."""
        seqs = self.submit(prompts, sampling, max_new_tokens, n, ignore_eos, eos_token_id)
        while self.scheduler.has_work:
            self.step()
        return [s.completion() for s in seqs]

    @torch.no_grad()
    def step(self, max_steps: int | None = None) -> None:
        """Admit and prefill what fits, then run one chunk of at most max_steps decode steps
        (0: prefill only)."""
        sched, pages = self.scheduler, self.runner.pages
        # prefill first, pass after pass while groups fit: decoding at the largest batch amortises
        # the weight reads best
        while groups := sched.admit():
            t0 = time.perf_counter()
            pages.sync()
            logits = self.runner.prefill([(g[0].tokens, g[0].slot) for g in groups])  # [G, V]
            src, dst = zip(*sched.copies) if sched.copies else ((), ())
            self.runner.kv.copy_pages(list(src), list(dst))  # after the prefill wrote the partial pages
            sched.copies.clear()
            seqs = [s for g in groups for s in g]
            rows = torch.tensor([i for i, g in enumerate(groups) for _ in g], device=logits.device)
            self._sample_first(logits[rows], seqs)
            self.timings["prefill_s"] += time.perf_counter() - t0
            self.timings["prefill_tokens"] += sum(g[0].num_tokens - 1 for g in groups)
            self.timings["prefill_passes"] += 1
            sched.finish([s for s in seqs if s.finished])
        if not sched.running or max_steps == 0:
            return
        chunk = sched.chunk_len(max_steps or self.config.max_chunk)
        sched.reserve(chunk)
        if not sched.running:
            return
        pages.sync()
        running = list(sched.running)
        t0 = time.perf_counter()
        tokens, logprobs = self.runner.decode(running, chunk)
        self.timings["decode_s"] += time.perf_counter() - t0
        self.timings["decode_steps"] += chunk
        self.timings["decode_chunks"] += 1
        self.timings["decode_rows"] += chunk * len(running)
        self.timings["decode_bytes"] += chunk * self.step_weight_bytes + traffic.kv_read_bytes(
            self.kv_token_bytes, [s.num_tokens for s in running], chunk)
        for seq, toks, lps in zip(running, tokens, logprobs):
            for t, lp in zip(toks, lps):
                if seq.append(t, lp):
                    break  # steps past an EOS were wasted work, not output
        sched.finish([s for s in running if s.finished])

    def _sample_first(self, logits: torch.Tensor, seqs: list[Sequence]) -> None:
        dev = logits.device
        params = sampler.Params(
            torch.tensor([s.temperature for s in seqs], dtype=torch.float32, device=dev),
            torch.tensor([s.top_k for s in seqs], dtype=torch.long, device=dev),
            torch.tensor([s.top_p for s in seqs], dtype=torch.float32, device=dev),
            torch.tensor([s.min_p for s in seqs], dtype=torch.float32, device=dev),
            torch.tensor([s.seed for s in seqs], dtype=torch.long, device=dev))
        how = sampler.mode([(s.temperature, s.top_k, s.top_p, s.min_p) for s in seqs], self.config.sampler_topk_cap,
                           self.runner.vocab, self.config.sampler_temperature_path)
        positions = torch.tensor([s.num_tokens for s in seqs], device=dev)
        out = []
        for i in range(0, len(seqs), 64):  # [rows, V] float32 temporaries: bound them
            rows = slice(i, i + 64)
            p = sampler.Params(*(t[rows] for t in (params.temperature, params.top_k, params.top_p, params.min_p,
                                                   params.seed)))
            out.append(sampler.sample(logits[rows], p, positions[rows], how, self.config.sampler_topk_cap,
                                      self.config.logprobs == "processed"))
        tokens, lps = torch.cat([t for t, _ in out]), torch.cat([lp for _, lp in out])
        for seq, t, lp in zip(seqs, tokens.tolist(), lps.tolist()):
            seq.append(t, lp)

    def abort(self) -> None:
        """Drop every queued and running sequence (their KV pages and slots are released)."""
        for seq in list(self.scheduler.running):
            seq.finished = True
            self.scheduler.finish([seq])
        self.scheduler.waiting.clear()

    # checks and accounting
    @torch.no_grad()
    def prompt_logits(self, prompts: list[list[int]]) -> torch.Tensor:
        """Logits after each prompt's last token [n, V] float32, through the paged prefill path."""
        assert not self.scheduler.has_work, "prompt_logits needs an idle engine"
        too_long = [len(p) for p in prompts if len(p) > self.config.max_seq_len]
        assert not too_long, f"prompts of {too_long} tokens exceed max_seq_len={self.config.max_seq_len}"
        pages, out, chunks = self.runner.pages, [], [[]]
        for p in prompts:  # pack like the scheduler: prefill-token budget and free slots
            c = chunks[-1]
            if c and (len(c) == pages.slots_free or sum(map(len, c)) + len(p) > self.config.max_prefill_tokens):
                chunks.append([])
            chunks[-1].append(p)
        for chunk in chunks:
            slots = [pages.alloc_slot() for _ in chunk]
            try:
                for slot, p in zip(slots, chunk):
                    assert pages.grow(slot, len(p)), "KV pool too small for prompt_logits"
                pages.sync()
                out.append(self.runner.prefill(list(zip(chunk, slots))))
            finally:
                for slot in slots:
                    pages.free_slot(slot)
        return torch.cat(out)

    def weight_bytes(self, device: torch.device | None = None) -> int:
        """Bytes of the weights (merged copy and pristine base) on `device`, the model's by default."""
        device = self.runner.device if device is None else torch.device(device)
        seen, total = set(), 0
        tensors = list(self.model.parameters()) + (list(self.lora.pristine.values()) if self.lora else [])
        for t in tensors:
            if t.device == device and t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
        return total

    def memory(self) -> dict:
        """What the engine holds itself on its device: the KV pool plus weights (pristine + merged
        copy); a pristine base offloaded to host memory is reported beside it. On a model it does
        not own (a trainer's), only the merged copy is its own: the rest is `shared_weights_gb`."""
        kv, weights = self.runner.kv.nbytes, self.weight_bytes()
        shared = 0 if self.owns_weights else weights - (self.lora.nbytes if self.lora else 0)
        out = {"reserved": round((kv + weights - shared) / 1e9, 3), "kv_pool_gb": round(kv / 1e9, 3),
               "weights_gb": round((weights - shared) / 1e9, 3)}
        if not self.owns_weights:
            out["shared_weights_gb"] = round(shared / 1e9, 3)
        if self.runner.device.type != "cpu":
            out["host_weights_gb"] = round(self.weight_bytes("cpu") / 1e9, 3)
        return out
