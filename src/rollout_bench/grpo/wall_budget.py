"""Stop a GRPO run between optimizer steps before its training wall time runs past a budget.

A slow backend (transformers_cb at ~70 s a step on the H200) cannot finish its planned steps inside a
bounded GPU lease. Stopping early keeps the steps it did run, with the learning-rate schedule of the
planned run, so its first N steps stay comparable step by step with a reference that ran them all;
the stats record the planned count, the count done and why it stopped.
"""
import time

from transformers import TrainerCallback


class WallBudget(TrainerCallback):
    """Stops after the step whose end leaves less than one more step (the last one's wall) of budget."""

    def __init__(self, max_wall_s: float | None):
        assert max_wall_s is None or max_wall_s > 0, max_wall_s
        self.max_wall_s = max_wall_s
        self.stopped_after_step: int | None = None
        self._t_begin = self._t_step = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._t_begin = time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        self._t_step = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.max_wall_s is None:
            return
        now = time.perf_counter()
        if now - self._t_begin + (now - self._t_step) > self.max_wall_s and state.global_step < state.max_steps:
            control.should_training_stop = True
            self.stopped_after_step = state.global_step

    def info(self) -> dict:
        return {"max_wall_s": self.max_wall_s, "stopped_after_step": self.stopped_after_step}
