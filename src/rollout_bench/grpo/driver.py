"""One GRPO run with TRL's GRPOTrainer: the same tokenizer, chat template, dataset, rewards, starting
adapter and hyper-parameters for every backend; only the rollout path differs.

    hf_generate      TRL's default `model.generate` path (PEFT adapter unmerged)
    transformers_cb  TRL's transformers continuous-batching path (`generate_batch`, paged KV)
    flex             our engine through `rollout_func` (flex_rollout.py)
    vllm             TRL `use_vllm=True`, `vllm_mode="colocate"` (issue 5 runs it on the GPU)
    unsloth          Unsloth's FastLanguageModel (fast_inference=False) with the shared adapter copied
                     in, trained by the GRPOTrainer Unsloth patches into TRL (its own generate path)
"""
import contextlib
import dataclasses
import math
import os
import tempfile
import time
from dataclasses import dataclass, field

import torch

from ..assets import chat, rewards
from ..core.workload import LORA_TARGETS
from ..host import isolation, trl_cpu
from . import attention_kernels, data, flex_rollout, importance, outcomes, vllm_colocate
from .config import TrainSpec, grpo_config
from .finite_grads import FiniteGrads
from .phases import PHASES, PhaseClock
from .stats_callback import StepStats
from .wall_budget import WallBudget

CPU_CB_BLOCK_SIZE = 32
CPU_CB_MAX_BATCH_TOKENS = 512
# a folder: a run that meets a non-finite gradient saves that step's batch and weights there (finite_grads.py)
NAN_DUMP_VAR = "ROLLOUT_BENCH_NAN_DUMP"


@dataclass
class Run:
    steps: list[dict]
    train_wall_s: float
    peak_memory_gb: dict
    info: dict = field(default_factory=dict)


def load_tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.chat_template = chat.CHAT_TEMPLATE  # the seed puts its GRPO template on any tokenizer, hub ones too
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_policy(model_dir: str, adapter_dir: str | None, spec: TrainSpec):
    """-> (model, peft_config) for GRPOTrainer.

    kl_reference "base": TRL applies LoRA itself (`peft_config`), so its reference is the policy with
    adapters disabled, i.e. the base model, as for any new adapter; `load_adapter_weights` then copies
    the shared adapter in. The shared adapter's lora_B is non-zero, so the KL term and its gradient
    are non-zero from step 1 even when random-weight completions all score alike (zero advantages):
    the loss, KL and grad-norm trajectories carry signal and the LoRA weights really move.
    kl_reference "adapter": the shared adapter as a trainable PeftModel; TRL then freezes a copy of
    it as the reference ("ref" adapter), so KL starts at exactly 0.
    """
    from peft import LoraConfig, PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, spec.dtype)).to(spec.device)
    if adapter_dir and spec.kl_reference == "adapter":
        return PeftModel.from_pretrained(model, adapter_dir, is_trainable=True), None
    if adapter_dir:
        # a saved adapter's config says inference_mode=True: get_peft_model would then freeze the new
        # LoRA, Trainer would build its optimizer over no parameters, and the adapter would never move
        return model, dataclasses.replace(PeftConfig.from_pretrained(adapter_dir), inference_mode=False)
    return model, LoraConfig(r=spec.lora_rank, lora_alpha=spec.lora_alpha, target_modules=list(LORA_TARGETS),
                             lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")


def load_unsloth_policy(model_dir: str, adapter_dir: str | None, spec: TrainSpec, max_seq_len: int):
    """-> (PeftModel, None): Unsloth's model with LoRA from the shared adapter's config and tensors (or
    the spec's rank on all projections). TRL then takes the base (adapters disabled) as its KL
    reference, as it does for the other backends' new adapters."""
    from unsloth import FastLanguageModel

    from ..backends import unsloth as unsloth_backend

    model, _ = FastLanguageModel.from_pretrained(
        model_name=model_dir, max_seq_length=max_seq_len, dtype=getattr(torch, spec.dtype), load_in_4bit=False,
        fast_inference=False, **spec.options.get("from_pretrained", {}))
    cfg = unsloth_backend.adapter_config(adapter_dir) if adapter_dir else {
        "r": spec.lora_rank, "lora_alpha": spec.lora_alpha, "target_modules": list(LORA_TARGETS)}
    model = FastLanguageModel.get_peft_model(
        model, r=cfg["r"], lora_alpha=cfg["lora_alpha"], target_modules=list(cfg["target_modules"]),
        lora_dropout=0.0, bias="none", use_rslora=bool(cfg.get("use_rslora", False)),
        use_gradient_checkpointing=spec.gradient_checkpointing, random_state=spec.seed)
    if adapter_dir:
        from safetensors.torch import load_file

        unsloth_backend.copy_adapter(model, load_file(f"{adapter_dir}/adapter_model.safetensors"))
    return model, None


def load_adapter_weights(peft_model, adapter_dir: str) -> None:
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    weights = load_peft_weights(adapter_dir, device=str(next(peft_model.parameters()).device))
    result = set_peft_model_state_dict(peft_model, weights, adapter_name="default")
    missing = [k for k in result.missing_keys if "lora_" in k and ".default." in k]
    assert not missing and not result.unexpected_keys, (missing[:3], result.unexpected_keys[:3])


def cpu_cb_config(spec: TrainSpec, max_prompt_len: int) -> dict:
    # On CPU the library would size the paged cache from a share of host RAM; size it for this run.
    blocks_per_seq = math.ceil((max_prompt_len + spec.max_completion_length) / CPU_CB_BLOCK_SIZE)
    return {"block_size": CPU_CB_BLOCK_SIZE, "num_blocks": spec.batch_size * blocks_per_seq + 1,
            "max_batch_tokens": CPU_CB_MAX_BATCH_TOKENS}


def train(backend: str, spec: TrainSpec, *, model_dir: str, adapter_dir: str | None, dataset_dir: str,
          steps: int, dataset_limit: int | None = None, engine_factory=None,
          max_wall_s: float | None = None) -> Run:
    """`engine_factory(peft_model, spec, max_prompt_len)` builds the flex engine on the trainer's
    model once its adapter is loaded (default: ours, flex_rollout.build_engine). `max_wall_s` stops
    training between steps before its wall time passes that budget (wall_budget.py)."""
    from transformers import set_seed

    logprob_head = "torch fallback (no Triton)" if trl_cpu.ensure_logprob_head() else "trl triton kernel"
    kernels = attention_kernels.apply()
    set_seed(spec.seed)
    spec, tok, train_ds, max_prompt_len = load_data(backend, spec, model_dir, dataset_dir, dataset_limit)
    model, peft_config = load_model(backend, spec, model_dir, adapter_dir, max_prompt_len)
    stats_cb, clock, budget = StepStats(), PhaseClock(), WallBudget(max_wall_s)
    finite = FiniteGrads(dump_dir=os.environ.get(NAN_DUMP_VAR))
    rollout = flex_rollout_of(backend, spec, clock)

    with tempfile.TemporaryDirectory(prefix="grpo-") as workdir:
        trainer, args = build_trainer(backend, spec, steps, workdir, max_prompt_len, model, peft_config, tok,
                                      train_ds, [stats_cb, budget, finite], rollout)
        if adapter_dir and peft_config is not None:
            load_adapter_weights(trainer.model, adapter_dir)
        policy = trainer.accelerator.unwrap_model(trainer.model)
        if rollout is not None:
            rollout.engine = (engine_factory or flex_rollout.build_engine)(policy, spec, max_prompt_len)
        clock.install(trainer)
        finite.install(trainer)
        outcomes.install(trainer)
        is_correction = importance_sampling(backend, spec, args, trainer)
        recorded = importance.install(trainer)
        assert recorded == is_correction, (recorded, is_correction)
        train_wall, window, adapter_start, adapter_end, optimized = fit(trainer, policy)

    step_records = merge(stats_cb.records(), clock.steps)
    info = {
        "optimizer": str(getattr(args.optim, "value", args.optim)),
        "is_correction": is_correction,
        "is_mode": args.vllm_importance_sampling_mode if is_correction else None,
        "is_clip": ([args.vllm_importance_sampling_clip_min, args.vllm_importance_sampling_clip_max]
                    if is_correction else None),
        "sampler_logprobs": sampler_logprobs(is_correction, rollout),
        "trainer_class": f"{type(trainer).__module__}.{type(trainer).__name__}",
        "reward_funcs": [f.__name__ for f in trainer.reward_funcs],
        "reward_sha256": rewards.source_sha256(),
        "max_prompt_tokens": max_prompt_len,
        "n_train_prompts": len(train_ds),
        "grpo": {**spec.to_dict(), "loss_type": args.loss_type, "scale_rewards": args.scale_rewards,
                 "epsilon": args.epsilon, "generation_batch_size": args.generation_batch_size,
                 "steps_per_generation": args.steps_per_generation, "shared_adapter": bool(adapter_dir)},
        "logprob_head": logprob_head,
        "attention_kernels": kernels,
        "wall_budget": budget.info(),
        **finite.info(),
        "isolation": isolation.record(window),
        "trl_summary": stats_cb.summary,
        # what training changed: a run whose optimizer holds no LoRA parameters still logs a loss,
        # a KL and a grad norm, so these two are the evidence that the adapter learned
        "optimizer_params": optimized,
        "adapter_update_norm": update_norm(adapter_start, adapter_end),
    }
    if rollout is not None:
        info["engine"] = {"lora_refreshes": rollout.refreshes, **getattr(rollout.engine, "memory", dict)()}
    if backend == "vllm":
        info["engine"] = {"colocated_kwargs": trainer.vllm_engine_kwargs}
    return Run(step_records, round(train_wall, 4), peak_memory(step_records), info)


def load_data(backend: str, spec: TrainSpec, model_dir: str, dataset_dir: str, dataset_limit: int | None):
    """-> (spec, tokenizer, train dataset, max prompt tokens); on CPU, transformers_cb's spec gets a
    continuous-batching config sized to the prompts."""
    tok = load_tokenizer(model_dir)
    train_ds, max_prompt_len = data.load(dataset_dir, tok, spec.prompt_quantile, limit=dataset_limit,
                                         shuffle_seed=spec.data_seed)
    if backend == "transformers_cb" and spec.device == "cpu" and "continuous_batching" not in spec.options:
        spec = dataclasses.replace(spec, options={**spec.options,
                                                  "continuous_batching": cpu_cb_config(spec, max_prompt_len)})
    return spec, tok, train_ds, max_prompt_len


def load_model(backend: str, spec: TrainSpec, model_dir: str, adapter_dir: str | None, max_prompt_len: int):
    """-> (model, peft_config): the policy as the backend's trainer takes it."""
    if backend == "unsloth":
        return load_unsloth_policy(model_dir, adapter_dir, spec, max_prompt_len + spec.max_completion_length)
    return load_policy(model_dir, adapter_dir, spec)


def flex_rollout_of(backend: str, spec: TrainSpec, clock: PhaseClock):
    """flex's rollout_func (its engine is built once the trainer holds the model); None for the others."""
    if backend != "flex":
        return None
    # rollout_func is marked experimental in TRL 1.15; the warning would repeat in every flex job log
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    return flex_rollout.FlexRollout(None, spec, clock)  # the engine follows the trainer's model


def build_trainer(backend: str, spec: TrainSpec, steps: int, workdir: str, max_prompt_len: int, model, peft_config,
                  tok, train_ds, callbacks, rollout):
    """-> (GRPOTrainer, its GRPOConfig); `workdir` is its output_dir (it saves nothing there)."""
    from trl import GRPOTrainer

    if backend == "vllm":
        from ..backends import vllm as vllm_backend

        # the offline host's engine start hangs without these (backends/vllm.py)
        for k, v in vllm_backend.ENV.items():
            os.environ.setdefault(k, v)
    args = grpo_config(spec, backend, max_steps=steps, output_dir=workdir, max_prompt_len=max_prompt_len)
    engine = (vllm_colocate.engine_options(spec.dtype, spec.options.get("engine_kwargs", {})) if backend == "vllm"
              else contextlib.nullcontext())
    with engine as built:
        trainer = GRPOTrainer(model=model, reward_funcs=rewards.build(tok.eos_token), args=args,
                              train_dataset=train_ds, processing_class=tok, peft_config=peft_config,
                              callbacks=callbacks, rollout_func=rollout)
    if backend == "vllm":
        trainer.vllm_engine_kwargs = vllm_colocate.require_built(built)  # the driver records it
    return trainer, args


def importance_sampling(backend: str, spec: TrainSpec, args, trainer) -> bool:
    """Whether the trainer corrects for the sampler's logprobs (vllm by TRL, flex by ours)."""
    is_correction = backend == "vllm" and args.vllm_importance_sampling_correction
    if backend == "flex" and spec.importance_sampling:
        flex_rollout.enable_importance_sampling(trainer)
        is_correction = True
    return is_correction


def fit(trainer, policy):
    """trainer.train(), timed -> (wall s, isolation window, adapter before, adapter after, optimized params)."""
    adapter_start = {k: v.clone() for k, v in flex_rollout.adapter_state(policy).items()}
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with isolation.window() as window:
        trainer.train()
    train_wall = time.perf_counter() - t0
    adapter_end = flex_rollout.adapter_state(policy)
    optimized = sum(p.numel() for g in trainer.optimizer.param_groups for p in g["params"])
    return train_wall, window, adapter_start, adapter_end, optimized


def sampler_logprobs(is_correction: bool, rollout) -> str | None:
    """Which sampler logprob the IS ratio divides by: vLLM's are renormalised over the tokens
    top-k/top-p/min-p kept (TRL asks for logprobs_mode="processed_logprobs"); flex's are the
    policy's unless its `logprobs` engine option says "processed"."""
    if not is_correction:  # only vllm and flex correct
        return None
    return rollout.engine.config.logprobs if rollout is not None else "processed"


def update_norm(start: dict[str, torch.Tensor], end: dict[str, torch.Tensor]) -> float:
    """L2 norm of the change of every adapter tensor between two snapshots."""
    assert start.keys() == end.keys(), sorted(set(start) ^ set(end))[:3]
    return math.sqrt(sum(float((end[k].float() - start[k].float()).pow(2).sum()) for k in start))


def merge(records: list[dict], phases: dict[int, dict]) -> list[dict]:
    out = []
    for rec in records:
        rec = {**rec, **phases.get(rec["step"], {})}
        if rec.get("step_wall_s") is not None and f"time/{PHASES[0]}_s" in rec:
            rec["time/other_s"] = round(rec["step_wall_s"] - sum(rec[f"time/{p}_s"] for p in PHASES), 6)
        out.append(rec)
    return out


def peak_memory(steps: list[dict]) -> dict:
    if not torch.cuda.is_available():
        return {"allocated": None, "reserved": None}
    return {"allocated": max((s["mem_gb"] or 0.0) for s in steps),
            "reserved": max((s.get("mem_reserved_gb") or 0.0) for s in steps)}
