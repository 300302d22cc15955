"""The warm start: SFT of a random-init model directory on the learnable task's worked solutions.

Weights cannot be downloaded, so the project makes a model that behaves like a base model that has
learnt the task format: TRL's SFTTrainer on (chat-templated prompt, worked solution + eos) pairs, loss
on the completion tokens only. The result is a model directory beside the random one, loaded by every
backend with its normal loader, with its card (warm_card) inside; the gates run before the directory
appears, so a warm model that fails them is never handed to GRPO.
"""
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import atomic
from . import chat, warm_card, warm_eval


@dataclass(frozen=True)
class SFTSpec:
    steps: int = 150
    learning_rate: float = 1e-2
    batch_size: int = 8
    max_length: int = 320  # prompt + completion tokens; longer rows are left out, not cut (a cut row has no eos)
    seed: int = 3407

    def __post_init__(self):
        assert self.steps > 0 and self.learning_rate > 0 and self.batch_size > 0 and self.max_length > 0


def specs(d: dict) -> tuple[SFTSpec, warm_eval.EvalSpec, warm_card.Gates]:
    """config.warmstart_spec's dict -> the three specs."""
    g = d["gates"]
    band = tuple(g["accuracy_band"]) if g.get("accuracy_band") else None
    return (SFTSpec(**d["sft"]), warm_eval.EvalSpec(**d["eval"], seed=d["sft"]["seed"]),
            warm_card.Gates(**{**g, "accuracy_band": band}))


def sft_rows(rows: list[dict], tok, max_length: int) -> list[dict]:
    """TRL's standard prompt-completion rows: the templated prompt (ending in the working-out marker) and
    the worked solution; the trainer appends eos. Rows over max_length tokens are dropped."""
    out = []
    for r in rows:
        prompt = tok.apply_chat_template(chat.messages(r["prompt"]), add_generation_prompt=True, tokenize=False)
        n = len(tok(prompt + r["worked_solution"])["input_ids"]) + 1
        if n <= max_length:
            out.append({"prompt": prompt, "completion": r["worked_solution"]})
    assert out, f"no row fits max_length={max_length}"
    return out


def train(model_dir, rows: list[dict], spec: SFTSpec, work_dir):
    """-> (the SFT'd model, its tokenizer, {train_rows, train_loss, train_s})."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from ..grpo import trl_cpu

    trl_cpu.ensure_logprob_head()  # SFTTrainer uses the same Triton-only fused LM head as GRPO
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    data = datasets.Dataset.from_list(sft_rows(rows, tok, spec.max_length))
    args = SFTConfig(
        output_dir=str(work_dir), max_steps=spec.steps, learning_rate=spec.learning_rate,
        per_device_train_batch_size=spec.batch_size, max_length=spec.max_length, seed=spec.seed,
        completion_only_loss=True, lr_scheduler_type="cosine", warmup_steps=max(1, spec.steps // 20),
        weight_decay=0.0, logging_steps=max(1, spec.steps // 10), save_strategy="no", report_to=[],
        use_cpu=not torch.cuda.is_available(), bf16=False, fp16=False, gradient_checkpointing=False,
        dataloader_num_workers=0, disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    t0 = time.perf_counter()
    result = trainer.train()
    info = {"train_rows": len(data), "train_loss": float(result.training_loss),
            "train_s": round(time.perf_counter() - t0, 2)}
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
        model, tok, info = train(model_dir, train_rows, spec, Path(tmp) / "_trainer")
        shutil.rmtree(Path(tmp) / "_trainer", ignore_errors=True)
        base_cfg = json.loads((Path(model_dir) / "config.json").read_text())
        dtype = base_cfg.get("dtype") or base_cfg.get("torch_dtype", "float32")
        model.to(getattr(torch, dtype)).save_pretrained(tmp)  # the random model's dtype, as backends expect
        tok.save_pretrained(tmp)
        figures = warm_eval.evaluate(tmp, test_rows, eval_spec)
        c = warm_card.card(figures, gates, {"base": str(model_dir), "dataset": str(dataset_dir), **asdict(spec), **info})
        warm_card.write(c, tmp)
        print(json.dumps(c, indent=2, sort_keys=True))
        warm_card.enforce(c)
    return c
