"""One GRPO run's knobs (the seed's hyper-parameters by default) and the TRL `GRPOConfig` built from them."""
from dataclasses import asdict, dataclass, field, fields

from ..core.workload import SAMPLING_PRESETS, Sampling

IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@dataclass(frozen=True, slots=True)
class TrainSpec:
    max_completion_length: int = 512
    num_generations: int = 4
    # Completions per optimizer step; None = num_generations (one prompt group per step), the smallest
    # batch TRL accepts, as the seed's vanilla-HF runs auto-raised it to.
    per_device_train_batch_size: int | None = None
    gradient_accumulation_steps: int = 1
    learning_rate: float = 5e-6
    weight_decay: float = 0.001
    warmup_ratio: float = 0.1
    lr_scheduler_type: str = "linear"
    # Same clipping on every backend, so logged grad norms compare (the seed's cb_paged 919 vs 1.0).
    max_grad_norm: float = 1.0
    # One optimizer for every backend (a run's speed and updates depend on it). The seed's adamw_8bit
    # needs bitsandbytes, which only the unsloth environment has, so the default is plain AdamW.
    optim: str = "adamw_torch"
    # TRL 1.15 defaults beta to 0 (no reference pass, no `kl` metric); the KL trajectory is what the
    # equivalence check reads, so the run keeps DeepSeekMath's coefficient.
    beta: float = 0.04
    kl_reference: str = "base"  # "base" (adapters disabled) or "adapter" (frozen copy of the start); driver.load_policy
    seed: int = 3407
    data_seed: int = 3407  # the prompt order, the same for every seed (config: train.data_seed)
    sampling: Sampling = field(default_factory=lambda: Sampling(**SAMPLING_PRESETS["equivalence"]))
    lora_rank: int = 32
    lora_alpha: int = 64
    # TRL's vLLM importance-sampling correction; read by `vllm` and by `flex` (engine logprobs). TRL 1.15's
    # default mode, sequence_mask with no lower bound, multiplies the per-token ratios over a whole completion:
    # at the bf16 logprob gap of 512-token rollouts that product is 1e-7..1e-2 (or underflows to 0), and it
    # scales the policy gradient by as much. Token-level truncated IS (TIS) bounds each token's weight instead.
    importance_sampling: bool = True
    is_mode: str = "token_truncate"
    is_clip_min: float | None = None
    is_clip_max: float | None = 3.0
    prompt_quantile: float = 0.9  # the seed drops prompts longer than this quantile of templated lengths
    gradient_checkpointing: bool = True  # TRL's default, identical on every backend
    device: str = "cpu"
    dtype: str = "float32"
    options: dict = field(default_factory=dict)  # backend knobs: {"engine": {...}, "continuous_batching": {...}}

    def __post_init__(self):
        assert self.num_generations >= 2, "GRPO needs at least 2 completions per prompt"
        assert self.batch_size % self.num_generations == 0, (self.batch_size, self.num_generations)
        assert self.kl_reference in ("base", "adapter"), self.kl_reference
        assert self.max_completion_length > 0 and self.lora_rank > 0 and 0 < self.prompt_quantile <= 1
        assert self.is_mode in IS_MODES, self.is_mode

    @property
    def batch_size(self) -> int:
        return self.per_device_train_batch_size or self.num_generations

    @classmethod
    def from_workload(cls, wl: dict) -> "TrainSpec":
        """The resolved workload dict (stats contract) -> spec; keys absent from it keep the seed defaults."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in wl.items() if k in known and k != "sampling"}
        if "max_new_tokens" in wl:
            kw["max_completion_length"] = wl["max_new_tokens"]
        if "sampling" in wl:
            s = wl["sampling"]
            kw["sampling"] = Sampling.from_config(s, wl.get("seed", 3407)) if isinstance(s, str) else Sampling(**s)
        return cls(**kw)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["per_device_train_batch_size"] = self.batch_size
        return d


def check_optimizer(args) -> None:
    """The trainer's own optimizer lookup for `args.optim`, run before any model loads, so a missing
    package (bitsandbytes for adamw_8bit, ...) fails at once, naming the setting."""
    from transformers import Trainer

    try:
        Trainer.get_optimizer_cls_and_kwargs(args)
    except ValueError:  # needs the model (GaLore, LOMO): the trainer checks again when it builds the optimizer
        return
    except Exception as e:  # ImportError, or a broken CUDA build of the package
        optim = getattr(args.optim, "value", args.optim)  # an OptimizerNames member once the args exist
        raise ValueError(f"config error at train.optim: {optim!r} cannot be built here ({type(e).__name__}: "
                         f"{e}); set train.optim to adamw_torch, or install what it needs in every training "
                         f"backend's environment") from e


def grpo_config(spec: TrainSpec, backend: str, *, max_steps: int, output_dir: str, max_prompt_len: int | None = None):
    """TRL's GRPOConfig for `backend`; max_prompt_len bounds vLLM's context (else the model's 40k)."""
    from trl import GRPOConfig

    s = spec.sampling
    kw = dict(
        output_dir=output_dir,
        max_steps=max_steps,
        seed=spec.seed,
        data_seed=spec.data_seed,
        # data.load shuffled the prompts once with data_seed; TRL's sampler would reshuffle them with `seed`
        shuffle_dataset=False,
        learning_rate=spec.learning_rate,
        weight_decay=spec.weight_decay,
        warmup_steps=spec.warmup_ratio,  # transformers 5: a float below 1 is a ratio of the total steps
        lr_scheduler_type=spec.lr_scheduler_type,
        optim=spec.optim,
        max_grad_norm=spec.max_grad_norm,
        beta=spec.beta,
        per_device_train_batch_size=spec.batch_size,
        gradient_accumulation_steps=spec.gradient_accumulation_steps,
        num_generations=spec.num_generations,
        max_completion_length=spec.max_completion_length,
        gradient_checkpointing=spec.gradient_checkpointing,
        # TRL samples greedily only through temperature; 0 would divide the logits by zero.
        temperature=s.temperature if not s.greedy else 1e-5,
        top_p=s.top_p,
        top_k=s.top_k,
        min_p=s.min_p or None,
        bf16=spec.dtype == "bfloat16",
        fp16=False,
        use_cpu=spec.device == "cpu",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        vllm_importance_sampling_correction=spec.importance_sampling,
        vllm_importance_sampling_mode=spec.is_mode,
        vllm_importance_sampling_clip_min=spec.is_clip_min,
        vllm_importance_sampling_clip_max=spec.is_clip_max,
    )
    if backend == "transformers_cb":
        # `use_transformers_paged` is TRL 1.15's deprecated alias of this flag.
        kw["use_transformers_continuous_batching"] = True
        kw["transformers_continuous_batching_config"] = spec.options.get("continuous_batching") or None
    elif backend == "vllm":
        kw.update(use_vllm=True, vllm_mode="colocate",
                  vllm_gpu_memory_utilization=spec.options.get("gpu_memory_utilization", 0.3),
                  vllm_max_model_length=max_prompt_len + spec.max_completion_length if max_prompt_len else None)
    args = GRPOConfig(**kw)
    check_optimizer(args)
    return args
