"""TRL's colocated vLLM engine, built in the trainer's dtype and with the config's engine kwargs.

TRL 1.15 builds its colocated engine in `VLLMGeneration._init_vllm` (called from GRPOTrainer.__init__) as
`LLM(...)` with a fixed set of keyword arguments and no dtype, so vLLM takes its own choice for the model's
config: on the smoke run's float32 tiny model (H200, results/published/h200-2026-12-01-session7) it ran
16-bit FlashAttention-3 and crashed at start-up with an illegal memory access, where the generation jobs,
which pass the workload's dtype, ran. While the trainer is built, the module-global `LLM` that TRL calls is
wrapped so that the engine gets the trainer's dtype and `train.options.vllm.engine_kwargs` (for example a
fixed `kv_cache_memory_bytes`, backends/vllm.alone_on_gpu); each engine's extra kwargs are recorded.
"""
import contextlib

FIELD = "train.options.vllm.engine_kwargs"
# what TRL 1.15 passes to LLM(...) itself (trl/generation/vllm_generation.py): the config cannot override these
# each with where the project sets it, or None where TRL decides it alone
TRL_SETS = {"model": "the model dir (train.models)", "gpu_memory_utilization": "train.options.vllm.gpu_memory_utilization",
            "max_model_len": "train.max_completion_length (plus the longest prompt)",
            "max_num_seqs": "train.prompts_per_step x train.num_generations", "seed": "train.seeds",
            "tensor_parallel_size": None, "enable_sleep_mode": None, "model_impl": None,
            "distributed_executor_backend": None, "max_num_batched_tokens": None, "logprobs_mode": None,
            "quantization": None, "trust_remote_code": None}


def check(engine_kwargs: dict) -> None:
    """A config that would override what TRL sets, or the dtype the trainer sets, fails naming the field."""
    if not isinstance(engine_kwargs, dict):
        raise ValueError(f"config error at {FIELD}: a mapping of vLLM LLM() keyword arguments, not "
                         f"{type(engine_kwargs).__name__}")
    if "dtype" in engine_kwargs:
        raise ValueError(f"config error at {FIELD}: 'dtype' is the trainer's: remove it from {FIELD} and set "
                         f"workload.dtype")
    clash = sorted(set(TRL_SETS) & set(engine_kwargs))
    if clash:
        how = "; ".join(f"{k}: " + (f"set through {TRL_SETS[k]}" if TRL_SETS[k] else "TRL's own choice")
                        for k in clash)
        raise ValueError(f"config error at {FIELD}: {', '.join(clash)} set by TRL's GRPOTrainer itself; remove "
                         f"them from {FIELD} ({how})")


@contextlib.contextmanager
def engine_options(dtype: str, engine_kwargs: dict):
    """While the trainer is built, TRL's `LLM(...)` gets `dtype` and `engine_kwargs`; yields the list of what each
    engine built meanwhile was given (empty: TRL built none through it, see `require_built`)."""
    check(engine_kwargs)
    from trl.generation import vllm_generation

    had = hasattr(vllm_generation, "LLM")  # absent where vLLM does not import
    original = getattr(vllm_generation, "LLM", None)
    built: list[dict] = []

    def llm(*args, **kwargs):
        ours = {"dtype": dtype, **engine_kwargs}
        taken = sorted(set(ours) & set(kwargs))
        if "dtype" in taken:  # a newer TRL chooses the dtype itself: ours would silently replace its choice
            raise RuntimeError("TRL now passes dtype to vLLM's LLM() itself; grpo/vllm_colocate.py must not "
                               "override it")
        if taken:
            raise ValueError(f"config error at {FIELD}: this TRL passes {', '.join(taken)} to vLLM's LLM() itself: "
                             f"remove them from {FIELD} (and add them to vllm_colocate.TRL_SETS)")
        built.append(ours)
        return original(*args, **kwargs, **ours)

    vllm_generation.LLM = llm
    try:
        yield built
    finally:
        if had:
            vllm_generation.LLM = original
        else:
            del vllm_generation.LLM


def require_built(built: list[dict]) -> dict:
    """The kwargs the trainer's one colocated engine got; a trainer that built none through the wrapper fails."""
    if len(built) != 1:
        raise RuntimeError(f"expected GRPOTrainer to build one colocated vLLM engine through "
                           f"trl.generation.vllm_generation.LLM while it was constructed, saw {len(built)}: a TRL "
                           f"that builds it elsewhere or later would run it without the trainer's dtype")
    return built[0]
