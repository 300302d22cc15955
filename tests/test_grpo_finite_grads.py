"""A non-finite gradient stops GRPO before the optimizer applies it, and the job fails naming the step."""
import torch
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

from rollout_bench.grpo import job
from rollout_bench.grpo.config import TrainSpec
from rollout_bench.grpo.driver import Run
from rollout_bench.grpo.finite_grads import FiniteGrads


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x, labels):
        return {"loss": ((self.lin(x).squeeze(-1) - labels) ** 2).mean()}


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(4, generator=g), "labels": torch.randn((), generator=g)}


class Snapshots(TrainerCallback):
    def __init__(self, model):
        self.model, self.after = model, {}

    def on_step_end(self, args, state, control, **kwargs):
        self.after[state.global_step] = self.model.lin.weight.detach().clone()


def test_the_first_nan_gradient_is_dropped_and_training_stops_there(tmp_path):
    torch.manual_seed(0)
    model = Tiny()
    calls = []
    # the third backward (optimizer step 3) yields a NaN gradient on the bias only: clipping by the total
    # norm spreads it to every parameter, as in the H200 run
    model.lin.bias.register_hook(lambda g: (calls.append(1), g * float("nan") if len(calls) == 3 else g)[1])
    guard, snaps = FiniteGrads(dump_dir=str(tmp_path / "dump")), Snapshots(model)
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=6, per_device_train_batch_size=4, learning_rate=0.1,
                             report_to=[], save_strategy="no", use_cpu=True, logging_steps=1, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Rows(), callbacks=[guard, snaps])
    guard.install(trainer)
    trainer.train()
    info = guard.info()
    assert info["nonfinite_grad_step"] == 3
    assert info["nonfinite_grad_params"] == ["lin.bias"]  # judged before clipping spread it to lin.weight
    assert len(calls) == 3  # stopped: no fourth step
    # the dump replays the failing backward on the weights it ran on
    dump = torch.load(info["nonfinite_dump"])
    assert dump["step"] == 3 and torch.equal(dump["trainable"]["lin.weight"], snaps.after[2])
    replay = Tiny()
    replay.load_state_dict(dump["trainable"])
    assert torch.equal(replay(**dump["inputs"])["loss"], trainer.compute_loss(model, dump["inputs"]))
    assert torch.isfinite(model.lin.weight).all() and torch.isfinite(model.lin.bias).all()
    assert not torch.equal(snaps.after[1], snaps.after[2])  # finite steps moved the weights
    assert torch.equal(snaps.after[3], snaps.after[2])  # the NaN step did not


def test_finite_gradients_are_left_alone():
    lin = nn.Linear(3, 2)
    lin(torch.randn(5, 3)).sum().backward()
    before = [p.grad.clone() for p in lin.parameters()]

    class Control:
        should_training_stop = False

    class State:
        global_step = 7

    guard, control = FiniteGrads(), Control()
    guard.on_pre_optimizer_step(None, State(), control, model=lin)
    assert guard.bad_step is None and not control.should_training_stop
    assert all(torch.equal(a, p.grad) for a, p in zip(before, lin.parameters()))


def _run(**info):
    steps = [{"step": i, "loss": 0.1, "n_completions": 4} for i in (1, 2)]
    return Run(steps, 1.0, {}, {"wall_budget": {"stopped_after_step": None}, **info})


def test_the_job_fails_a_run_the_guard_stopped():
    spec = TrainSpec(num_generations=4)
    reason = job.gate(_run(nonfinite_grad_step=2, nonfinite_grad_params=["a.lora_B", "b.lora_B"]), spec, 2)
    assert "non-finite gradient at optimizer step 2 (before clipping in 2 parameter(s), first a.lora_B)" in reason
