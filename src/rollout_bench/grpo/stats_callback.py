"""A TrainerCallback that keeps every key the trainer logs, merged per optimizer step.

The seed's StatisticsCallback kept a log dict only when it carried `loss`, so a KL logged on a
separate call was silently dropped. Here every `on_log` call merges into the record of
`state.global_step`, whichever keys it carries; the end-of-training summary (`train_runtime`, ...)
goes to `summary` instead of polluting the last step.
"""
import math
import time

from transformers import TrainerCallback

from ..core import envinfo

# Short names of the stats contract -> the TRL / Trainer key they are read from.
CONTRACT_KEYS = {
    "loss": "loss",
    "reward": "reward",
    "reward_std": "reward_std",
    "kl": "kl",
    "grad_norm": "grad_norm",
    "completion_len": "completions/mean_length",
}
SUMMARY_MARKER = "train_runtime"


class StepStats(TrainerCallback):
    def __init__(self):
        self.steps: dict[int, dict] = {}
        self.summary: dict = {}
        self._t0 = None

    def record(self, step: int) -> dict:
        return self.steps.setdefault(step, {"step": step})

    def merge(self, step: int, logs: dict) -> None:
        rec = self.record(step)
        for k, v in logs.items():
            rec[k] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    def on_step_begin(self, args, state, control, **kwargs):
        cuda = envinfo.cuda()
        if cuda:
            cuda.synchronize()
            cuda.reset_peak_memory_stats()
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        cuda = envinfo.cuda()
        if cuda:
            cuda.synchronize()
        rec = self.record(state.global_step)
        rec["step_wall_s"] = round(time.perf_counter() - self._t0, 6)
        rec["mem_gb"] = round(cuda.max_memory_allocated() / 1e9, 4) if cuda else None
        rec["mem_reserved_gb"] = round(cuda.max_memory_reserved() / 1e9, 4) if cuda else None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        if SUMMARY_MARKER in logs:
            self.summary.update(logs)
            return
        self.merge(state.global_step, logs)

    def records(self) -> list[dict]:
        """Step records in order, each with the contract's short keys (None where never logged)."""
        out = []
        for step in sorted(self.steps):
            rec = {}
            for k, v in self.steps[step].items():
                if isinstance(v, float) and not math.isfinite(v):
                    rec.setdefault("nonfinite", []).append(k)  # JSON has no NaN: keep which keys were bad
                    v = None
                rec[k] = v
            for short, key in CONTRACT_KEYS.items():
                rec[short] = rec.get(key)
            rec.setdefault("step_wall_s", None)
            rec.setdefault("mem_gb", None)
            out.append(rec)
        return out
