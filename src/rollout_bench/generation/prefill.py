"""A cell's prefill: which kernel ran its attention (`prefill_kernel`) and a prefill-only rate (`prefill`).

prefill_kernel (every cell): {"kernel": "fa4" | "flex-triton" | the backend's own (transformers'
attn_implementation; vLLM's attention backend in prefill_rate cells, else "vllm"), "reason": why FA4 did not run, or
None}. A generator says it with `prefill_kernel()`, which reads what the generator already holds and calls nothing in
the engine; one that does not runs its framework's own attention, which the fallback names. Only in a cell of a
`prefill_rate` case (workload.prefill_rate) may a generator's `prefill_kernel_from_engine()` ask the engine (vLLM:
LLM.collective_rpc into its workers' attention layers).

prefill (cells of a prefill_rate case only; the other cells make no extra call and have no such field): prompt
tokens a second of a call that decodes one token a completion (max_new_tokens=1), on the last timed round's prompts
with each prompt's first token replaced, so that no prefix cache (vLLM's, transformers' block sharing: both hash
blocks chained from the first token) holds what the round left, at the round's lengths. A first such call on the
warm-up's prompts takes what a new call shape compiles or captures. Its wall is the prefill, one sampling step and
the call's host work: one method for every engine. flex also reports its own prefill passes' time within that call
(`engine_tps`: synced, the first tokens sampled). A backend that cannot make a one-token call of its own generate
(one budget compiled in) records None and why.
"""
import time


def wanted(workload: dict) -> bool:
    """Whether the cell measures its prefill (the probe below, the engine's kernel name): its case's prefill_rate."""
    return bool(workload.get("prefill_rate"))


def kernel(gen, backend: str, ask_engine: bool = False) -> dict:
    """ask_engine: a prefill_rate cell, where a generator may name its kernel by calling into the engine."""
    if ask_engine and hasattr(gen, "prefill_kernel_from_engine"):
        return gen.prefill_kernel_from_engine()
    own = getattr(gen, "prefill_kernel", None)
    if own is not None:
        return own()
    return {"kernel": backend, "reason": f"{backend} runs its framework's own attention (FA4 prefill is flex's "
                                         f"fa4_prefill option and transformers_cb's paged_flash_attention_4 variant)"}


def one_token_call(mod) -> bool:
    """Whether the backend's generate takes max_new_tokens=[...] (per completion, or one budget for all)."""
    return bool(getattr(mod, "PER_REQUEST_LENGTHS", False) or getattr(mod, "ONE_BUDGET_CALL", False))


def uncached(prompts: list[list[int]], avoid: tuple[int, ...]) -> list[list[int]]:
    """Each prompt with its first token replaced by one of `avoid`'s that differs from it: same lengths, and every
    block hash (chained from the first token) new to the engine."""
    return [[next(t for t in avoid if t != p[0]), *p[1:]] for p in prompts]


def probe(gen, mod, backend: str, spec, prompts: list[list[int]], warmup: list[list[int]], sync) -> dict:
    """The prefill-only figure of one cell (module doc); call it after everything that reads the last round's
    outputs (the round gate, the logprob sample): it makes calls of its own."""
    if not one_token_call(mod):
        return {"tps": None, "reason": f"{backend}'s generate takes no one-token budget (its decode is compiled for "
                                       f"the cell's max_new_tokens), so no prefill-only call was timed"}
    n = spec.num_generations
    # a tokenizer without an EOS (eos_token_id None) must not put None in a prompt
    avoid = tuple(t for t in dict.fromkeys((spec.pad_token_id, spec.eos_token_id, 0, 1)) if t is not None)

    def call(ps):
        return gen.generate(ps, n, max_new_tokens=[1] * (len(ps) * n))

    if warmup:
        call(uncached(warmup, avoid))
    ps = uncached(prompts, avoid)
    sync()
    t0 = time.perf_counter()
    outs = call(ps)
    sync()
    wall = time.perf_counter() - t0
    assert len(outs) == len(ps) * n and all(len(o) == 1 for o in outs), [len(o) for o in outs]
    tokens = sum(map(len, ps))  # once a prompt: the engines prefill a group's shared prompt once (hf_generate n x)
    out = {"tps": round(tokens / wall, 1), "tokens": tokens, "wall_s": round(wall, 6), "prompts": len(ps),
           "method": "max_new_tokens=1 call, first token replaced (no prefix cache hit)", "reason": None}
    last = getattr(gen, "last_call", None)  # flex: the engine's own split of that call
    if last and last.get("prefill_s"):
        out["engine_tps"] = round(last["prefill_tokens"] / last["prefill_s"], 1)
    return out
