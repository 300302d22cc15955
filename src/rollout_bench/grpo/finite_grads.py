"""Stop a GRPO run at its first non-finite gradient, before the optimizer applies it.

The Trainer clips by the total norm: one NaN anywhere makes every gradient NaN (an inf zeroes the others
and leaves NaN where it was), and AdamW writes that into the trainable weights. The run then goes on
"training" a dead policy: on the H200 (2026-12-01, results/published/h200-2026-12-01-session6) a flex
learn run met a NaN gradient at step 28 with a finite loss, then sampled one-token completions (reward
-7.5) for 72 steps and ended `ok`; an hf_generate run crashed in its sampler on the NaN weights instead.
Here that step's gradients are dropped (the weights stay those of the last finite step), training stops,
and the job fails naming the step (job.gate).

Clipping erases where the NaN began, so each trainable parameter's gradient is judged as backward leaves
it, before clipping (a device-side flag: no host sync until the optimizer step). With `dump_dir` (env
ROLLOUT_BENCH_NAN_DUMP in the driver) the step's batch and the weights it ran on are saved, so that the
failing backward can be replayed offline (`compute_loss(model, inputs)` on the same weights).
"""
from pathlib import Path

import torch
from transformers import TrainerCallback


class FiniteGrads(TrainerCallback):
    def __init__(self, dump_dir: str | None = None):
        self.bad_step: int | None = None  # the optimizer step (1-based, as logged) whose gradients were not finite
        self.bad_params: list[str] = []  # trainable parameters whose own gradient was not finite before clipping
        self.dump: str | None = None
        self.dump_dir = dump_dir
        self._finite: dict[str, torch.Tensor] = {}  # name -> 0-d bool on the parameter's device
        self._inputs = None

    def install(self, trainer) -> None:
        """Watch every trainable parameter's gradient; with dump_dir, keep each step's loss inputs."""
        for name, p in trainer.model.named_parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(
                    lambda p, name=name: self._finite.__setitem__(name, p.grad.isfinite().all()))
        if self.dump_dir:
            prepare = trainer._prepare_inputs  # GRPOTrainer's: the step's generated, scored batch for the loss

            def _prepare_inputs(*args, **kwargs):
                self._inputs = prepare(*args, **kwargs)
                return self._inputs

            trainer._prepare_inputs = _prepare_inputs

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if all(bool(g.isfinite().all()) for g in grads):  # per tensor: a sharded model's grads span devices
            return
        self.bad_step = state.global_step + 1  # global_step counts the steps already taken
        self.bad_params = [n for n, ok in self._finite.items() if not bool(ok)]
        if self.dump_dir:
            self.dump = self._save(model)
        for p in model.parameters():
            p.grad = None  # the optimizer skips a parameter without a gradient
        control.should_training_stop = True

    def _save(self, model) -> str:
        path = Path(self.dump_dir) / f"nonfinite_step{self.bad_step}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        def cpu(x):
            return x.detach().cpu() if isinstance(x, torch.Tensor) else x

        torch.save({"step": self.bad_step, "bad_params": self.bad_params,
                    "inputs": {k: cpu(v) for k, v in (self._inputs or {}).items()},
                    "trainable": {n: cpu(p) for n, p in model.named_parameters() if p.requires_grad}}, path)
        return str(path)

    def info(self) -> dict:
        return {"nonfinite_grad_step": self.bad_step, "nonfinite_grad_params": self.bad_params[:20],
                "nonfinite_dump": self.dump}
