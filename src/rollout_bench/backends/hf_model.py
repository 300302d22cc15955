"""Shared by the HF-based backends: load the model dir (+ PEFT adapter, unmerged), and a batched,
left-padded `model.generate` driver."""
from dataclasses import replace

import torch


def load_model(spec, **kwargs):
    """The model every HF-based backend starts from: the model dir, PEFT adapter unmerged."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(spec.model_dir, dtype=getattr(torch, spec.dtype), **kwargs)
    if spec.adapter_dir:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, spec.adapter_dir)
    return model.to(spec.device).eval()


def generation_kwargs(spec) -> dict:
    s = spec.sampling
    kw = dict(max_new_tokens=spec.max_new_tokens, pad_token_id=spec.pad_token_id,
              eos_token_id=spec.eos_token_id)
    if spec.ignore_eos:
        kw["min_new_tokens"] = spec.max_new_tokens  # EOS suppressed until the budget is spent
    if s.greedy:
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kw.update(do_sample=True, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k or None,
                  min_p=s.min_p or None)
    return kw


def left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # [B, S]
    mask = torch.zeros((len(prompts), width), dtype=torch.long)  # [B, S]
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids.to(device), mask.to(device)


class Generator:
    # True: a short last chunk is filled up to batch_size with repeats that are dropped afterwards,
    # so a compiled, shape-specialised generate sees one batch shape for the whole job
    fixed_batch = False

    def __init__(self, spec, model=None):
        self.spec = spec
        self.model = model if model is not None else load_model(spec)
        self.kwargs = generation_kwargs(spec)

    def close(self):
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def retarget(self, spec) -> bool:
        """The next cell on the same model: generate's kwargs are the cell's own (a fixed-shape subclass: no)."""
        from . import same_engine

        if self.fixed_batch or not same_engine(self.spec, spec):
            return False
        self.spec, self.kwargs = spec, generation_kwargs(spec)
        return True

    def prefill_kernel(self) -> dict:
        impl = getattr(getattr(self.model, "config", None), "_attn_implementation", None) or "transformers"
        return {"kernel": impl, "reason": f"transformers' {impl} attention (FA4 prefill is flex's fa4_prefill option "
                                          f"and transformers_cb's paged_flash_attention_4 variant)"}

    @torch.inference_mode()
    def generate(self, prompts, n, max_new_tokens=None):
        """max_new_tokens: one budget for every completion, as a list (the prefill probe's one-token call)."""
        kwargs = self.kwargs
        if max_new_tokens is not None:
            assert len(set(max_new_tokens)) == 1, "model.generate takes one budget a call"
            kwargs = generation_kwargs(replace(self.spec, max_new_tokens=max_new_tokens[0]))
        seqs = [p for p in prompts for _ in range(n)]
        torch.manual_seed(self.spec.sampling.seed)
        out = []
        for i in range(0, len(seqs), self.spec.batch_size):
            chunk = seqs[i:i + self.spec.batch_size]
            filled = chunk + [chunk[-1]] * (self.spec.batch_size - len(chunk)) if self.fixed_batch else chunk
            ids, mask = left_pad(filled, self.spec.pad_token_id, self.spec.device)
            gen = self.model.generate(input_ids=ids, attention_mask=mask, **kwargs)  # [B, S+T]
            out.extend(strip(row, self.spec) for row in gen[:len(chunk), ids.shape[1]:].tolist())
        return out


def strip(tokens: list[int], spec) -> list[int]:
    """Drop the padding after an EOS (HF pads finished rows); keep the EOS itself."""
    if spec.ignore_eos or spec.eos_token_id not in tokens:
        return tokens
    return tokens[: tokens.index(spec.eos_token_id) + 1]
