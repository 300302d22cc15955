"""Where a GRPO step's time goes: rollout, reference/old logprobs, rewards, forward, backward, optimizer.

TRL's own profiling timers only report to wandb/mlflow/trackio, so the trainer's phase methods are
wrapped on the instance (no subclass, no copied trainer code). Times are exclusive: a phase that runs
inside another (the flex LoRA refresh inside the rollout) is subtracted from its parent, so the
phases of a step add up to at most its wall time; the rest (padding, data loading, clipping,
scheduler, logging) is `other_s`.
"""
import functools
import time
from collections import defaultdict
from contextlib import contextmanager

import torch
from transformers import TrainerCallback

PHASES = ("rollout", "lora_refresh", "logprobs", "rewards", "forward", "backward", "optimizer")


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class PhaseClock(TrainerCallback):
    def __init__(self):
        self.steps: dict[int, dict] = {}
        self._acc = defaultdict(float)
        self._stack: list[list] = []  # [name, seconds spent in nested phases]
        self._completions = 0
        self._opt_t0 = None

    @contextmanager
    def phase(self, name: str):
        assert name in PHASES, name
        _sync()
        t0 = time.perf_counter()
        self._stack.append([name, 0.0])
        try:
            yield
        finally:
            _sync()
            dt = time.perf_counter() - t0
            _, nested = self._stack.pop()
            self._acc[name] += dt - nested
            if self._stack:
                self._stack[-1][1] += dt

    def _wrap(self, obj, attr: str, name_of):
        fn = getattr(obj, attr)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            with self.phase(name_of()):
                return fn(*args, **kwargs)

        setattr(obj, attr, timed)

    def install(self, trainer) -> "PhaseClock":
        # GRPOTrainer private methods (TRL 1.15.0): _generate = rollout + decode; the no-grad
        # _get_per_token_logps_and_entropies calls are the old-policy and reference passes, the
        # grad-enabled one is the loss forward. compute_loss counts as forward too: Unsloth's runs
        # its fused loss (the policy forward included) without that method doing the work.
        self._wrap(trainer, "_generate", lambda: "rollout")
        self._wrap(trainer, "_calculate_rewards", lambda: "rewards")
        self._wrap(trainer, "_get_per_token_logps_and_entropies",
                   lambda: "forward" if torch.is_grad_enabled() else "logprobs")
        self._wrap(trainer, "compute_loss", lambda: "forward")
        self._wrap(trainer.accelerator, "backward", lambda: "backward")
        generate = trainer._generate

        @functools.wraps(generate)
        def counted(prompts):
            out = generate(prompts)
            self._completions += len(out[1])  # (prompt_ids, completion_ids, ...)
            return out

        trainer._generate = counted
        trainer.add_callback(self)
        return self

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        _sync()
        self._opt_t0 = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        _sync()
        self._acc["optimizer"] += time.perf_counter() - self._opt_t0

    def on_step_end(self, args, state, control, **kwargs):
        rec = {f"time/{p}_s": round(self._acc.get(p, 0.0), 6) for p in PHASES}
        rec["n_completions"] = self._completions
        self.steps[state.global_step] = rec
        self._acc.clear()
        self._completions = 0
