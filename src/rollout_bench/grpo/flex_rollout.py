"""The `flex` rollout backend: our engine behind TRL's `rollout_func`.

TRL hands the rollout function the generation batch with each prompt already repeated
`num_generations` times in a row, and wants back one completion per entry, in input order, with
the sampled tokens' logprobs. Runs of one prompt go to the engine as one group (`n` = run length),
so it prefills the prompt once and shares its KV pages.

Importance-sampling correction: TRL 1.15 computes the old-policy pass, the per-token IS ratio and
its `sampling/*` metrics only when `trainer.use_vllm` is set, and then calls
`trainer.vllm_generation.sync_weights()` before each rollout. `enable_importance_sampling` sets that
flag after construction (no vLLM is built) with a weight-sync stub, so the correction is TRL's own
code; the engine's LoRA refresh stays in the rollout function either way.
"""
import dataclasses
import itertools
from contextlib import nullcontext
from types import SimpleNamespace

import torch


def lora_scaling(peft_config) -> float:
    assert not peft_config.rank_pattern and not peft_config.alpha_pattern, "per-module ranks are not supported"
    r = peft_config.r
    return peft_config.lora_alpha / (r ** 0.5 if peft_config.use_rslora else r)


def adapter_state(peft_model, adapter: str = "default") -> dict[str, torch.Tensor]:
    """The trained adapter's weights, PEFT's saved-adapter keys (`...q_proj.lora_A.weight`)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach() for k, v in get_peft_model_state_dict(peft_model, adapter_name=adapter).items()}


def groups(prompt_ids: list[list[int]]) -> tuple[list[list[int]], int]:
    """Consecutive repeats -> (unique prompts, group size); group size 1 when runs are uneven."""
    runs = [(k, len(list(g))) for k, g in itertools.groupby(map(tuple, prompt_ids))]
    sizes = {n for _, n in runs}
    if len(sizes) == 1:
        return [list(k) for k, _ in runs], sizes.pop()
    return prompt_ids, 1


class FlexRollout:
    """`rollout_func(prompts, trainer) -> {"prompt_ids", "completion_ids", "logprobs"}`."""

    def __init__(self, engine, spec, clock=None):
        self.engine = engine
        self.spec = spec
        self.clock = clock
        self.refreshes = 0
        self._refreshed_step = None

    def _phase(self, name):
        return self.clock.phase(name) if self.clock else nullcontext()

    def refresh(self, trainer) -> None:
        """Merge the trainer's current adapter into the engine's inference copy, once per optimizer step."""
        step = trainer.state.global_step
        if step == self._refreshed_step:
            return
        model = trainer.accelerator.unwrap_model(trainer.model)
        with self._phase("lora_refresh"), torch.no_grad():
            self.engine.refresh_lora(adapter_state(model), lora_scaling(model.peft_config["default"]))
        self._refreshed_step = step
        self.refreshes += 1

    def __call__(self, prompts, trainer) -> dict:
        tok = trainer.processing_class
        prompt_ids = tok.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True,
                                             return_dict=True, **trainer.chat_template_kwargs)["input_ids"]
        self.refresh(trainer)
        unique, n = groups(prompt_ids)
        # A fresh seed per step, the same on every run: step k's rollouts are reproducible.
        sampling = dataclasses.replace(self.spec.sampling, seed=self.spec.sampling.seed + trainer.state.global_step)
        with torch.no_grad():
            outs = self.engine.generate(unique, sampling, self.spec.max_completion_length, n=n,
                                        eos_token_id=tok.eos_token_id)
        assert len(outs) == len(prompt_ids), (len(outs), len(prompt_ids))
        completion_ids = [list(o.token_ids) for o in outs]
        logprobs = [[float(x) for x in o.logprobs] for o in outs]
        assert all(len(c) == len(lp) for c, lp in zip(completion_ids, logprobs)), "one logprob per sampled token"
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}


def enable_importance_sampling(trainer) -> None:
    # See the module docstring: TRL's IS correction is gated on `use_vllm`; the stub makes its
    # once-per-step weight sync a no-op (FlexRollout.refresh does the real one).
    trainer.use_vllm = True
    trainer.vllm_generation = SimpleNamespace(sync_weights=lambda: None)
    trainer._last_loaded_step = -1


def build_engine(model, spec, max_prompt_len: int):
    """The engine on the trainer's PeftModel: its frozen base weights are the pristine base (shared,
    never written), and the engine adds only the merged inference copy of the LoRA-targeted weights,
    sized for one generation batch; `spec.options["engine"]` overrides any EngineConfig field."""
    from ..engine import Engine, EngineConfig

    config = EngineConfig.from_options(
        spec.options.get("engine", {}),
        max_batch=spec.batch_size * spec.gradient_accumulation_steps,
        max_seq_len=max_prompt_len + spec.max_completion_length,
        # the base belongs to the trainer: it cannot move to host memory
        pristine_on_host=False)
    engine = Engine(model, config)
    assert engine.lora is not None, "the flex rollout needs the trainer's LoRA adapter (a PeftModel)"
    return engine
