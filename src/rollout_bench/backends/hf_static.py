"""`model.generate` with a static KV cache and a torch.compile'd decode forward.

This is TRL's default path (hf_generate: PEFT adapter unmerged) with `cache_implementation="static"`.
transformers compiles the decode-step forward itself once the cache is static and the model is on a
GPU (`generation_config.compile_config`, default mode "reduce-overhead" = CUDA graphs); prefill stays
eager. Shapes are held fixed so one compiled graph serves the whole job: the cache is sized for
spec.max_seq_len on every call and every chunk is filled to spec.batch_size rows (the filler rows
repeat the chunk's last prompt and are dropped), so a short last chunk does not trigger a recompile.
"""

from . import hf_model

REQUIRES = ("torch", "transformers", "peft")
NEEDS_GPU = True
VARIANTS = ("default",)
COMPILE_OPTIONS = ("compile_mode", "fullgraph", "dynamic")


def unavailable(variant, gpu_count):
    return None


def compile_config(spec):
    from transformers.generation.configuration_utils import CompileConfig

    unknown = sorted(set(spec.options) - set(COMPILE_OPTIONS))
    if unknown:
        raise ValueError(f"unknown hf_static option(s) {unknown}; known: {list(COMPILE_OPTIONS)}")
    o = spec.options
    return CompileConfig(mode=o.get("compile_mode", "reduce-overhead"), fullgraph=o.get("fullgraph", False),
                         dynamic=o.get("dynamic", None))


class Generator(hf_model.Generator):
    fixed_batch = True

    def __init__(self, spec):
        super().__init__(spec)
        self.kwargs = dict(self.kwargs, cache_implementation="static", max_cache_len=spec.max_seq_len,
                           compile_config=compile_config(spec))

    def compiled(self) -> bool:
        """True once transformers has built the compiled decode call (it does not on CPU)."""
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        return hasattr(base, "_compiled_call")

    def info(self):
        return {"compiled": self.compiled(), "compile_config": self.kwargs["compile_config"].to_dict()}


def load(spec):
    return Generator(spec)
