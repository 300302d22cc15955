"""The jobs a resolved config asks for (config.py resolves it): generation groups and their cells, GRPO runs,
comparisons and bands, the autotune and decode-profile passes, warm starts; their paths and workloads."""
import json
import re
from dataclasses import dataclass

from .. import MODEL_CONFIGS
from ..assets import model as model_assets
from ..core.workload import Sampling
from ..generation import trace
from .config import prompts_per_round, uses_gpu, variants, warm_models, warm_name, warmstart_knobs


@dataclass(frozen=True)
class GenJob:
    model: str
    backend: str
    variant: str
    case: str
    batch_size: int

    @property
    def path(self) -> str:
        return f"results/generate/{self.model_slug}/{self.backend}/{self.variant}/{self.case}/bs{self.batch_size}.json"

    @property
    def model_slug(self) -> str:
        return model_slug(self.model)


def model_slug(model: str) -> str:
    return model.strip("/").replace("/", "--")


def case_models(cfg: dict, case: dict) -> list[str]:
    """The models a case runs on: the top-level ones but its `skip_models`, or their warm starts (`warm: true`)."""
    # a list of what to leave out, not of what to run: a user's own `models` then runs every case
    skip = set(case.get("skip_models", []))
    if case["warm"]:
        return [warm_name(m) for m in warm_models(cfg) if m not in skip]
    return [m for m in cfg["models"] if m not in skip]


def all_models(cfg: dict) -> list[str]:
    """Every model some job loads: generation (top level and warm cases), training, and the random bases
    of warm starts (their autotune records), in first-seen order."""
    names = [m for c in cfg["workload"]["cases"].values() for m in case_models(cfg, c)] + cfg["train"]["models"]
    return list(dict.fromkeys(names + [b for m in names if (b := model_assets.warm_base(m))]))


def autotune_slug(model: str) -> str:
    """Whose autotune record a flex job on `model` replays: a warm start replays its random base's
    (the kernels' speed depends on shapes and dtype, not on weight values)."""
    return model_slug(model_assets.warm_base(model) or model)


def flex_slugs(cfg: dict) -> list[str]:
    """The models whose autotune record some flex generation job replays (autotune_slug), in first-seen order."""
    return list(dict.fromkeys(autotune_slug(j.model) for j in gen_jobs(cfg) if j.backend == "flex"))


def tuned_slugs(cfg: dict) -> list[str]:
    """The models whose autotune record some flex job replays, generation or GRPO rollout, in first-seen order."""
    trained = [autotune_slug(j.model) for j in train_jobs(cfg) if j.backend == "flex"]
    return list(dict.fromkeys(flex_slugs(cfg) + trained))


@dataclass(frozen=True)
class MismatchJob:
    """One model's mismatch job (generation/mismatch.py): the cells of backends that return logprobs, scored
    against the trainer's forward."""
    model: str
    cells: tuple[GenJob, ...]
    lora: bool  # some cell runs the LoRA adapter: the trainer loads it too

    @property
    def path(self) -> str:
        return f"results/mismatch/{model_slug(self.model)}.json"


def mismatch_jobs(cfg: dict) -> list[MismatchJob]:
    """One per model with cells of a backend that returns logprobs (backends' LOGPROBS), in first-seen order."""
    from .. import backends

    by_model: dict[str, list[GenJob]] = {}
    for j in gen_jobs(cfg):
        if getattr(backends.module(j.backend), "LOGPROBS", False):
            by_model.setdefault(j.model, []).append(j)
    return [MismatchJob(m, tuple(cells), any(cfg["workload"]["cases"][c.case]["lora"] for c in cells))
            for m, cells in by_model.items()]


def decode_profile_paths(cfg: dict) -> list[str]:
    """One decode profile per model whose autotune record a flex generation job replays (decode_profile.enabled)."""
    if not cfg["decode_profile"]["enabled"]:
        return []
    return [f"results/decode_profile/{slug}/decode_step.json" for slug in flex_slugs(cfg)]


@dataclass(frozen=True)
class GenGroup:
    """One generation job: the cells (GenJob) of one (model, backend, variant, LoRA on or off), served in order by
    one process and one engine (generation.run_group), each cell writing its own stats file. A case with `own_job`
    has a job of its own (`own_case`): an engine is sized for its job's largest batch and longest sequence, and
    8k-token prompts beside B = 256 would size the other cases' engine (flex: a KV slot of 8k for each of 256 rows)."""
    model: str
    backend: str
    variant: str
    lora: bool
    cells: tuple[GenJob, ...]
    own_case: str | None = None

    @property
    def model_slug(self) -> str:
        return model_slug(self.model)

    @property
    def name(self) -> str:
        return ("lora" if self.lora else "base") + (f"-{self.own_case}" if self.own_case else "")

    @property
    def key(self) -> str:
        return f"{self.model_slug}/{self.backend}/{self.variant}/{self.name}"

    @property
    def record(self) -> str:
        """The job's own record: its cells, each one's set-up and timed seconds, the process's wall."""
        return f"results/generate/{self.model_slug}/{self.backend}/{self.variant}/job-{self.name}.json"

    @property
    def rule_name(self) -> str:
        return "generate__" + re.sub(r"\W+", "_", self.key).strip("_")


def gen_groups(cfg: dict) -> list[GenGroup]:
    """gen_jobs grouped into jobs, in the order their first cells appear; a job's cells keep the config's order
    (cases as listed, then their batch sizes), the same for every backend."""
    groups: dict[tuple, list[GenJob]] = {}
    for j in gen_jobs(cfg):
        case = cfg["workload"]["cases"][j.case]
        own = j.case if case.get("own_job") else None
        groups.setdefault((j.model, j.backend, j.variant, case["lora"], own), []).append(j)
    out = [GenGroup(m, b, v, lora, cells=tuple(cells), own_case=own) for (m, b, v, lora, own), cells in groups.items()]
    names = [g.rule_name for g in out]
    assert len(set(names)) == len(names), f"two generation jobs share a rule name: {names}"
    return out


def _prompt_family(cfg: dict, case: dict) -> tuple:
    """Cells whose prompts an engine could have cached from one another: one model, LoRA or not, one prompt pool."""
    wl = cfg["workload"]
    return (case["lora"], case.get("dataset", cfg["dataset"]["source"]),
            tuple(case.get("prompt_tokens", wl["prompt_tokens"])), case.get("long_prompts", False))


def prompts_needed(cfg: dict, case_name: str, batch_size: int) -> tuple[int, int, int]:
    """(n_prompts a round, warm-up prompts, prompts the cell sends in all): every timed round, and every re-measure
    of them (workload.spread_retries), sends prompts of its own."""
    wl, case = cfg["workload"], cfg["workload"]["cases"][case_name]
    n = prompts_per_round(cfg, case, batch_size)
    warm = min(wl["warmup_prompts"], n)
    return n, warm, n * wl["rounds"] * (1 + wl["spread_retries"]) + warm


def prompt_offset(cfg: dict, model: str, case_name: str, batch_size: int) -> int:
    """Where a cell's prompts start in its prompt pool (the dataset after the shuffle, in the token window): after
    every earlier cell of the same model and family, in the config's order, whatever backend runs them. One engine
    serves a job's cells, and an engine that caches prefixes (vLLM's) must prefill every cell's prompts, as a GRPO
    step prefills new ones; every backend still sends a cell the same prompts."""
    cases = cfg["workload"]["cases"]
    family, offset = _prompt_family(cfg, cases[case_name]), 0
    for name, case in cases.items():
        if model not in case_models(cfg, case) or _prompt_family(cfg, case) != family:
            continue
        for bs in case["batch_sizes"]:
            if (name, bs) == (case_name, batch_size):
                return offset
            offset += prompts_needed(cfg, name, bs)[2]
    raise AssertionError(f"{model} runs no cell {case_name} B = {batch_size}")


def case_batch_sizes(case: dict, backend: str) -> list[int]:
    """The batch sizes `backend` runs `case` at: the case's, or its backend_batch_sizes entry (a subset of them)."""
    own = (case.get("backend_batch_sizes") or {}).get(backend)
    return [b for b in case["batch_sizes"] if own is None or b in own]  # in the case's order, as every backend's


def gen_jobs(cfg: dict) -> list[GenJob]:
    jobs = []
    for name, case in cfg["workload"]["cases"].items():
        for model in case_models(cfg, case):
            for backend in cfg["backends"]:
                if case.get("backends") and backend not in case["backends"]:
                    continue
                for variant in variants(cfg, backend, case):
                    for bs in case_batch_sizes(case, backend):
                        jobs.append(GenJob(model, backend, variant, name, bs))
    return jobs


def job_workload(cfg: dict, model: str, backend: str, case_name: str, batch_size: int) -> dict:
    """The full resolved workload of one job: recorded in its stats and passed as a param."""
    wl = cfg["workload"]
    case = wl["cases"][case_name]
    n = case["num_generations"]
    sampling = Sampling.from_config(case["sampling"], seed=wl["sampling_seed"])
    gpu = uses_gpu(cfg)
    dtype = workload_dtype(cfg, model)
    n_prompts, warmup, _ = prompts_needed(cfg, case_name, batch_size)
    traced = trace.load(case["trace"]) if "trace" in case else None
    return {
        "model": model,
        "case": case_name,
        "lora_rank": cfg["lora"]["rank"] if case["lora"] else 0,
        "lora_alpha": cfg["lora"]["alpha"] if case["lora"] else 0,
        "num_generations": n,
        "sampling": sampling.to_dict(),
        "sampling_preset": case["sampling"] if isinstance(case["sampling"], str) else None,
        "ignore_eos": case.get("ignore_eos", wl["ignore_eos"]),
        "max_new_tokens": trace.longest(traced) if traced else case.get("max_new_tokens", wl["max_new_tokens"]),
        # the trace itself, not its name: an edit to the file re-runs the cells that replay it
        "trace": {"name": case["trace"], "quantiles": traced["quantiles"]} if traced else None,
        "batch_size": batch_size,
        "n_prompts": n_prompts,
        "prompt_tokens": case.get("prompt_tokens", wl["prompt_tokens"]),
        # only where on: the other cases' workloads (a param of their jobs) stay as they were
        **({"long_prompts": True} if case.get("long_prompts") else {}),
        **({"prefill_rate": True} if case.get("prefill_rate") else {}),
        "prompt_offset": prompt_offset(cfg, model, case_name, batch_size),
        "shuffle_seed": wl["shuffle_seed"],
        "chat_template": wl["chat_template"],
        "warmup_prompts": warmup,
        "rounds": wl["rounds"],
        "max_round_spread": wl["max_round_spread"],
        "spread_retries": wl["spread_retries"],
        "dataset": case.get("dataset", cfg["dataset"]["source"]),
        "device": "cuda" if gpu else "cpu",
        "dtype": dtype,
        "options": cfg["options"].get(backend, {}),
    }


@dataclass(frozen=True)
class TrainJob:
    model: str
    backend: str
    steps: int
    seed: int
    frozen: bool = False  # the control: the reference at learning rate 0 (train.frozen_control)

    @property
    def path(self) -> str:
        return train_path(self.model, self.backend, self.steps, self.seed, self.frozen)


FROZEN = "-frozen"  # the control run's seed suffix in its path (and its rule's {seed} wildcard)


def train_path(model: str, backend: str, steps: int, seed: int, frozen: bool = False) -> str:
    return f"results/train/{model_slug(model)}/{backend}/steps{steps}-seed{seed}{FROZEN if frozen else ''}.json"


def parse_seed(wildcard: str) -> tuple[int, bool]:
    """A train path's seed wildcard ('3407' or '3407-frozen') -> (seed, frozen)."""
    frozen = wildcard.endswith(FROZEN)
    return int(wildcard.removesuffix(FROZEN)), frozen


def control_paths(cfg: dict, model: str) -> list[str]:
    """The frozen control of `model`'s reference (seed train.seeds[0]), when train.frozen_control is on."""
    tr = cfg["train"]
    return [train_path(model, tr["reference"], tr["steps"], tr["seeds"][0], frozen=True)] if tr["frozen_control"] \
        else []


def train_jobs(cfg: dict) -> list[TrainJob]:
    """The reference backend runs every seed (its noise band, grpo/verdict.py), and its frozen control when
    train.frozen_control is on; the others the first seed."""
    tr = cfg["train"]
    jobs = [TrainJob(m, b, tr["steps"], seed) for m in tr["models"] for b in cfg["train_backends"]
            for seed in (tr["seeds"] if b == tr["reference"] else tr["seeds"][:1])]
    if tr["frozen_control"] and tr["reference"] in cfg["train_backends"]:
        jobs += [TrainJob(m, tr["reference"], tr["steps"], tr["seeds"][0], frozen=True) for m in tr["models"]]
    return jobs


def compare_paths(cfg: dict) -> list[str]:
    """One equivalence comparison per candidate backend and model (none where train.equivalence is off)."""
    if not cfg["train"]["equivalence"]:
        return []
    ref = cfg["train"]["reference"]
    return [f"results/compare/{model_slug(m)}/{ref}__{b}.json"
            for m in cfg["train"]["models"] for b in cfg["train_backends"] if b != ref]


def band_paths(cfg: dict) -> list[str]:
    """One noise band per trained model, from the reference backend's seeds."""
    if not cfg["train_backends"] or not cfg["train"]["equivalence"]:
        return []
    return [f"results/band/{model_slug(m)}/{cfg['train']['reference']}.json" for m in cfg["train"]["models"]]


def train_workload(cfg: dict, model: str, backend: str, seed: int, frozen: bool = False) -> dict:
    """The resolved GRPO workload of one training job (grpo.config.TrainSpec reads it); `seed` seeds the
    trainer and the sampler, train.data_seed the prompt order (the same for every run). A frozen run is the
    control: the same run at learning rate 0, the warm policy's own scores on the same prompts."""
    tr = cfg["train"]
    imp = tr["importance_sampling"]
    gpu = uses_gpu(cfg)
    dtype = workload_dtype(cfg, model)
    return {
        "model": model,
        "seed": seed,
        "lora_rank": cfg["lora"]["rank"],
        "lora_alpha": cfg["lora"]["alpha"],
        "num_generations": tr["num_generations"],
        "prompts_per_step": tr["prompts_per_step"],
        "per_device_train_batch_size": tr["prompts_per_step"] * tr["num_generations"],
        "learning_rate": 0.0 if frozen else tr["learning_rate"],
        "frozen": frozen,
        "data_seed": tr["data_seed"],
        "sampling": Sampling.from_config(tr["sampling"], seed=seed).to_dict(),
        "sampling_preset": tr["sampling"] if isinstance(tr["sampling"], str) else None,
        "ignore_eos": False,
        "max_new_tokens": tr["max_completion_length"],
        "optim": tr["optim"],
        "importance_sampling": imp["correction"],
        "is_mode": imp["mode"],
        "is_clip_min": imp["clip_min"],
        "is_clip_max": imp["clip_max"],
        "dataset": tr["dataset"],
        "device": "cuda" if gpu else "cpu",
        "dtype": dtype,
        "options": tr["options"].get(backend, {}),
    }


def autotune_workload(cfg: dict, model: str) -> dict:
    """What the autotune job of `model` needs from the workload (the flex jobs' shapes and dtype)."""
    wl = cfg["workload"]
    return {"prompt_tokens": wl["prompt_tokens"], "max_new_tokens": wl["max_new_tokens"],
            "dtype": workload_dtype(cfg, model)}


WARMSTART_SFT = ("steps", "learning_rate", "batch_size", "max_length", "seed", "bf16", "gradient_checkpointing",
                 "group_by_length", "max_seconds", "probe_every", "probe_prompts", "micro_batch_size",
                 "stop_at_accuracy")
WARMSTART_EVAL = ("max_new_tokens", "group_prompts", "group_size")


def warmstart_spec(cfg: dict, model: str) -> dict:
    """The knobs of `model`'s warmstart job (assets.warmstart.specs reads them): warmstart, with
    warmstart.models[model] over it. The accuracy band is gated on GPU profiles, for a model GRPO trains
    (a warm start that only generates, e.g. the speed model, records its accuracy)."""
    ws = warmstart_knobs(cfg, model)
    gated = uses_gpu(cfg) and warm_name(model) in cfg["train"]["models"]
    return {"sft": {k: ws[k] for k in WARMSTART_SFT},
            "eval": {k: ws[k] for k in WARMSTART_EVAL},
            "gates": {**ws["gates"], "accuracy_band": ws["gates"]["accuracy_band"] if gated else None}}


def workload_dtype(cfg: dict, model: str) -> str:
    """workload.dtype, with "auto" resolved: the model config's dtype on the GPU profile, float32 on CPU."""
    dtype = cfg["workload"]["dtype"]
    if dtype == "auto":
        return _model_dtype(model) if uses_gpu(cfg) else "float32"
    return dtype


def _model_dtype(model: str) -> str:
    p = MODEL_CONFIGS / f"{model_assets.warm_base(model) or model}.json"
    if p.exists():
        return json.loads(p.read_text()).get("torch_dtype", "bfloat16")
    return "bfloat16"
