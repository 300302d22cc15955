"""The warm start: SFT of a random-init model directory on the learnable task's worked solutions.

Weights cannot be downloaded, so the project makes a model that behaves like a base model that has
learnt the task format: TRL's SFTTrainer on (chat-templated prompt, worked solution + eos) pairs, loss
on the completion tokens only. The result is a model directory beside the random one, loaded by every
backend with its normal loader, with its card (warm_card) inside; the gates run before the directory
appears, so a warm model that fails them is never handed to GRPO.
"""
import gc
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core import atomic
from . import chat, warm_card, warm_eval


@dataclass(frozen=True)
class SFTSpec:
    # the tiny CPU models' knobs (the schema's defaults): with one token per digit, 150 steps of 8 rows
    # missed the format gate (0.56-0.81 on 64 held-out prompts); 16 rows at 5e-3 met it (1.0). With the
    # "i of n" line labels, 150 steps missed the EOS gate (llama-tiny 0.906 on CPU, qwen3-tiny 0.914 on the
    # H200), and 250 steps at 320 tokens met it only narrowly (0.938 on 64 prompts): rows over 320 tokens, the
    # long problems (23% of the held-out ones), were never trained on and looped. At 512 tokens (8% left out)
    # 250 steps of 16 met every gate on both tiny shapes (EOS 0.99-1.0, format 0.89-0.99), both jobs at once in
    # 213 s (194 CPU s a job). The steps count more than the rows: 300 steps of 5 met them on both shapes and two
    # seeds (EOS 1.0, format 0.93-1.0) in 98 s (75 CPU s a job); 260 of 5, 300 of 4 and 200 of 6 or 8 missed on
    # one shape or both (EOS 0.90-0.93 or format 0.64-0.70), 200 of 6 at 1e-2 on both (2026-12-01, 2 cores
    # shared with another workload, timed at its quietest)
    steps: int = 300
    learning_rate: float = 5e-3
    batch_size: int = 5
    max_length: int = 512  # prompt + completion tokens; longer rows are left out, not cut (a cut row has no eos)
    seed: int = 3407
    # GPU knobs: fp32 master weights under bf16 autocast; recomputed activations (a 4B shape's would not
    # fit beside fp32 AdamW state); rows of like length share a batch (padding is most of a random batch)
    bf16: bool = False
    gradient_checkpointing: bool = False
    group_by_length: bool = False
    max_seconds: float | None = None  # stop between steps past this training wall (the card says so)
    probe_every: int = 0  # every N steps, greedy accuracy on probe_prompts held-out prompts (0: off)
    probe_prompts: int = 64
    # rows per forward pass (gradients accumulate to batch_size): a real vocabulary's logits over 64 rows of
    # 512 tokens are tens of GB
    micro_batch_size: int | None = None
    # stop at the first probe reading at least this accuracy: a learner that would overshoot the gates'
    # band stops inside it, where GRPO still has room to learn
    stop_at_accuracy: float | None = None

    def __post_init__(self):
        assert self.steps > 0 and self.learning_rate > 0 and self.batch_size > 0 and self.max_length > 0
        assert self.micro_batch_size is None or self.batch_size % self.micro_batch_size == 0, \
            "warmstart.batch_size must be a multiple of warmstart.micro_batch_size"
        assert self.max_seconds is None or self.max_seconds > 0
        assert self.probe_every >= 0 and self.probe_prompts > 0
        assert self.stop_at_accuracy is None or self.probe_every, "warmstart.stop_at_accuracy needs probe_every"

    @property
    def rows_per_forward(self) -> int:
        return self.micro_batch_size or self.batch_size


def specs(d: dict) -> tuple[SFTSpec, warm_eval.EvalSpec, warm_card.Gates]:
    """jobs.warmstart_spec's dict -> the three specs."""
    g = d["gates"]
    band = tuple(g["accuracy_band"]) if g.get("accuracy_band") else None
    return (SFTSpec(**d["sft"]), warm_eval.EvalSpec(**d["eval"], seed=d["sft"]["seed"]),
            warm_card.Gates(**{**g, "accuracy_band": band}))


def sft_rows(rows: list[dict], tok, max_length: int, limit: int | None = None) -> list[dict]:
    """TRL's standard prompt-completion rows: the templated prompt (ending in the working-out marker) and
    the worked solution; the trainer appends eos. Rows over max_length tokens are dropped; the first `limit`
    that fit are kept (a run reads steps x batch_size rows: tokenizing all 3,700 of the tiny CPU warm start's,
    here and again in SFTTrainer, took ~10 CPU s; its 1,500 take ~4)."""
    out = []
    for r in rows:
        if limit is not None and len(out) >= limit:
            break
        prompt = tok.apply_chat_template(chat.messages(r["prompt"]), add_generation_prompt=True, tokenize=False)
        n = len(tok(prompt + r["worked_solution"])["input_ids"]) + 1
        if n <= max_length:
            out.append({"prompt": prompt, "completion": r["worked_solution"]})
    assert out, f"no row fits max_length={max_length}"
    return out


def _callbacks(spec: SFTSpec, tok, probe_rows: list[dict], record: dict) -> list:
    """The wall budget and the accuracy probe, as TrainerCallbacks writing into `record`."""
    from transformers import TrainerCallback

    class Budget(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if spec.max_seconds and time.perf_counter() - self.t0 - record["probe_s"] > spec.max_seconds:
                record["stopped_by_budget_at_step"] = state.global_step
                control.should_training_stop = True

    class Probe(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            if not (spec.probe_every and state.global_step % spec.probe_every == 0):
                return
            t0 = time.perf_counter()
            acc = warm_eval.greedy_accuracy(model, tok, probe_rows, autocast=spec.bf16)
            model.train()
            record["probe_s"] += time.perf_counter() - t0
            record["probe"].append({"step": state.global_step, "accuracy": acc,
                                    "loss": next((h["loss"] for h in reversed(state.log_history) if "loss" in h),
                                                 None)})
            print(f"probe: {record['probe'][-1]}", flush=True)  # in the log even if the job never ends
            if spec.stop_at_accuracy is not None and acc >= spec.stop_at_accuracy:
                record["stopped_at_accuracy_step"] = state.global_step
                control.should_training_stop = True

    return [Budget(), Probe()]


def train(model_dir, rows: list[dict], spec: SFTSpec, work_dir, probe_rows: list[dict] = ()):
    """-> (the SFT'd model, its tokenizer, {train_rows, train_loss, train_s, steps_done, peak_memory_gb, ...})."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from ..host import trl_cpu

    trl_cpu.ensure_logprob_head()  # SFTTrainer uses the same Triton-only fused LM head as GRPO
    cuda = torch.cuda.is_available()
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    data = datasets.Dataset.from_list(sft_rows(rows, tok, spec.max_length, limit=spec.steps * spec.batch_size))
    args = SFTConfig(
        output_dir=str(work_dir), max_steps=spec.steps, learning_rate=spec.learning_rate,
        per_device_train_batch_size=spec.rows_per_forward, max_length=spec.max_length,
        gradient_accumulation_steps=spec.batch_size // spec.rows_per_forward, seed=spec.seed,
        completion_only_loss=True, lr_scheduler_type="cosine", warmup_steps=max(1, spec.steps // 20),
        weight_decay=0.0, logging_steps=max(1, spec.steps // 10), save_strategy="no", report_to=[],
        use_cpu=not cuda, bf16=spec.bf16, fp16=False, gradient_checkpointing=spec.gradient_checkpointing,
        train_sampling_strategy="group_by_length" if spec.group_by_length else "random",
        optim="adamw_torch_fused" if cuda else "adamw_torch", dataloader_num_workers=0, disable_tqdm=True)
    record = {"probe": [], "probe_s": 0.0}
    probe_rows = list(probe_rows)[:spec.probe_prompts]
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok,
                         callbacks=_callbacks(spec, tok, probe_rows, record))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    result = trainer.train()
    wall = time.perf_counter() - t0
    info = {"train_rows": len(data), "train_loss": float(result.training_loss),
            "train_s": round(wall - record["probe_s"], 2), "steps_done": trainer.state.global_step,
            "log": [h for h in trainer.state.log_history if "loss" in h]}
    if spec.probe_every:
        info.update(probe=record["probe"], probe_s=round(record["probe_s"], 2))
    for k in ("stopped_by_budget_at_step", "stopped_at_accuracy_step"):
        if k in record:
            info[k] = record[k]
    if cuda:
        info["peak_memory_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
        info["gpu"] = torch.cuda.get_device_name()
    return trainer.model, tok, info


def build(model_dir, dataset_dir, out_dir, spec: SFTSpec, eval_spec: warm_eval.EvalSpec,
          gates: warm_card.Gates) -> dict:
    """Train, save, evaluate on the held-out split, write the card; raise GateError (no out_dir) on a failed gate."""
    import json

    import torch

    from . import dataset

    train_rows = dataset.load(str(dataset_dir)).to_list()
    test_rows = dataset.load(str(dataset_dir), split="test").to_list()
    with atomic.directory(out_dir) as tmp:
        # the probe reads the held-out split's tail: the gates' greedy pass reads all of it, after training
        model, tok, info = train(model_dir, train_rows, spec, Path(tmp) / "_trainer", test_rows[::-1])
        shutil.rmtree(Path(tmp) / "_trainer", ignore_errors=True)
        base_cfg = json.loads((Path(model_dir) / "config.json").read_text())
        dtype = base_cfg.get("dtype") or base_cfg.get("torch_dtype", "float32")
        model.to(getattr(torch, dtype)).save_pretrained(tmp)  # the random model's dtype, as backends expect
        tok.save_pretrained(tmp)
        del model
        gc.collect()  # the trainer's reference cycles hold its optimizer state
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the trainer's fp32 weights and AdamW state go before the evaluation loads
        figures = warm_eval.evaluate(tmp, test_rows, eval_spec)
        c = warm_card.card(figures, gates, {"base": str(model_dir), "dataset": str(dataset_dir), **asdict(spec), **info})
        warm_card.write(c, tmp)
        print(json.dumps(c, indent=2, sort_keys=True))
        warm_card.enforce(c)
    return c
