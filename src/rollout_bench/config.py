"""Load, validate and resolve config/config.yaml; enumerate the jobs it asks for."""
import copy
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jsonschema
import yaml

from . import MODEL_CONFIGS, ROOT, SCHEMAS, backends, envinfo, trace
from .assets import dataset as dataset_assets
from .assets import model as model_assets
from .grpo import vllm_colocate
from .workload import LORA_TARGETS, Sampling


class ConfigError(ValueError):
    pass


@cache
def schema() -> dict:
    return yaml.safe_load((SCHEMAS / "config.schema.yaml").read_text())


def _with_defaults(cls):
    validate_props = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return jsonschema.validators.extend(cls, {"properties": set_defaults})


_Validator = _with_defaults(jsonschema.Draft202012Validator)


def _field(err) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path).lstrip(".")
    return path or "(top level)"


def _hint(err) -> str:
    if err.validator == "additionalProperties":
        return " (unknown key: remove it or check its spelling against workflow/schemas/config.schema.yaml)"
    if err.validator == "enum":
        return " (pick one of the allowed values)"
    if err.validator == "type" and isinstance(err.instance, str) and len(err.absolute_path) > 1:
        # `--config train='{steps: 10}'` arrives as {"steps": "10"}: snakemake parses nested values as text
        return (" (snakemake's --config passes values nested in a mapping as strings: put nested keys in a "
                "YAML file and pass it with --configfile)")
    if err.validator in ("minimum", "exclusiveMinimum"):
        return " (must be positive)" if err.validator_value in (0, 1) else ""
    desc = err.schema.get("description")
    return f" ({desc})" if desc else ""


def _deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def select_profile(raw: dict) -> str:
    p = raw.get("profile", "auto")
    if p == "auto":
        return "gpu" if envinfo.physical_gpu_count() > 0 else "cpu"
    return p


def validate(cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    errors = sorted(_Validator(schema()).iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        # oneOf errors (sampling) are vague; report the most specific one
        err = jsonschema.exceptions.best_match(errors)
        raise ConfigError(f"config error at {_field(err)}: {err.message}{_hint(err)}")
    return cfg


def profile_names() -> list[str]:
    """The profiles the schema knows: adding one is a schema and config/config.yaml edit only."""
    return list(schema()["properties"]["profiles"]["properties"])


def user_overrides(configfiles, cli_config, shipped=None) -> dict:
    """The keys the user set: each --configfile in order, then --config (Snakemake's own order).

    Snakemake hands the Snakefile one dict merged from config/config.yaml and these, so resolve()
    cannot tell them apart; these must win over the profile. The shipped file is never the user's,
    even when passed again with --configfile: it then behaves as it does by default.
    """
    from snakemake.common.configfile import load_configfile  # Snakemake's own reader: JSON or YAML

    # this checkout's file, not one relative to the working directory (`snakemake --directory`)
    shipped = Path(shipped or ROOT / "config/config.yaml").resolve()
    out = {}
    for f in configfiles:
        if Path(f).resolve() != shipped:
            out = _deep_merge(out, _plain(load_configfile(f) or {}))
    return _deep_merge(out, _plain(cli_config or {}))


def _plain(m):
    # Snakemake may keep --config as an immutables.Map, which _deep_merge would not descend into
    return {k: _plain(v) for k, v in m.items()} if isinstance(m, Mapping) else m


def resolve(raw: dict, user: dict | None = None) -> dict:
    """The config a run uses: the top level, the selected profile over it, the user's own keys over both.

    `raw` is everything given; `user` (user_overrides) is what the user set by --configfile or --config.
    The merged result is validated (filling defaults), then checked for what the schema can't say.
    """
    profile = select_profile(raw)
    names = profile_names()
    if profile not in names:
        raise ConfigError(f"config error at profile: {profile!r} (allowed: auto, {', '.join(names)})")
    overlays = raw.get("profiles") or {}
    overlay = (overlays.get(profile) or {}) if isinstance(overlays, dict) else {}
    if not isinstance(overlay, dict):
        raise ConfigError(f"config error at profiles.{profile}: {overlay!r} is not a mapping "
                          f"(give the keys this profile sets over the top level)")
    top = {k: v for k, v in raw.items() if k != "profiles"}
    mine = {k: v for k, v in (user or {}).items() if k != "profiles"}
    merged = _deep_merge(_deep_merge(top, overlay), mine)
    merged["profiles"] = overlays  # validated with the rest: an unknown profile name is a typo
    cfg = validate(merged)
    cfg["lora"].setdefault("targets", list(LORA_TARGETS))  # the one list: the schema does not repeat it
    del cfg["profiles"]
    cfg["profile"] = profile
    _check(cfg)
    # jobs and snakemake's inputs take paths as given: nothing would expand a ~ for them
    cfg["models"] = [os.path.expanduser(m) for m in cfg["models"]]
    cfg["dataset"]["source"] = os.path.expanduser(cfg["dataset"]["source"])
    for case in cfg["workload"]["cases"].values():
        if "dataset" in case:
            case["dataset"] = os.path.expanduser(case["dataset"])
        if "skip_models" in case:
            case["skip_models"] = [os.path.expanduser(m) for m in case["skip_models"]]
    tr = cfg["train"]
    if tr["models"] is None:  # the learner: each of `models`, or its warm start
        tr["models"] = [warm_name(m) for m in warm_models(cfg)] if tr["warm"] else list(cfg["models"])
    else:
        tr["models"] = [os.path.expanduser(m) for m in tr["models"]]
    tr["dataset"] = os.path.expanduser(tr["dataset"]) if tr["dataset"] else cfg["dataset"]["source"]
    return cfg


def _check_decode_timing(cfg: dict) -> None:
    """The autotune pass and the decode profile time one chunk of decode steps mid-generation."""
    from .engine.config import EngineConfig

    chunk = EngineConfig().decode_chunk
    passes = (("autotune", "the autotune pass", uses_gpu(cfg)), ("decode_profile", "the decode profile", True))
    for key, what, on in passes:
        if not (cfg[key]["enabled"] and on and "flex" in cfg["backends"]):
            continue
        if cfg["workload"]["max_new_tokens"] <= chunk:
            raise ConfigError(f"config error at workload.max_new_tokens: {cfg['workload']['max_new_tokens']} leaves "
                              f"nothing to time for {what} (it times {chunk} decode steps mid-generation): "
                              f"raise it above {chunk} or set {key}.enabled false")


def _check_train(cfg: dict) -> None:
    tr = cfg["train"]
    for m in tr["models"] or []:
        try:
            model_assets.resolve(m)
        except ValueError as e:
            raise ConfigError(f"config error at train.models: {e}") from None
    if len(set(tr["seeds"])) != len(tr["seeds"]):
        raise ConfigError(f"config error at train.seeds: {tr['seeds']} repeats a seed (each seed is one more "
                          f"reference run: give distinct seeds)")
    imp = tr["importance_sampling"]
    lo, hi = imp["clip_min"], imp["clip_max"]
    if lo is not None and hi is not None and lo >= hi:
        raise ConfigError(f"config error at train.importance_sampling.clip_min: {lo} is not below clip_max {hi} "
                          f"(give clip_min < clip_max, or null)")
    if imp["correction"] and imp["mode"].endswith("_truncate") and lo is None and hi is None:
        raise ConfigError(f"config error at train.importance_sampling.clip_max: mode {imp['mode']} needs a bound "
                          f"(set clip_max, e.g. 3.0, or clip_min)")
    try:
        vllm_colocate.check((tr["options"].get("vllm") or {}).get("engine_kwargs", {}))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _check_warmstart(cfg: dict) -> None:
    knobs = [("warmstart", cfg["warmstart"])]
    known = model_assets.config_names()
    for name in cfg["warmstart"]["only"] or []:
        if name not in known:
            raise ConfigError(f"config error at warmstart.only: {name!r} is not a name in config/models/ (only "
                              f"those have a warm start; known: {', '.join(known)})")
    for name in cfg["warmstart"]["models"]:
        if name not in known:
            raise ConfigError(f"config error at warmstart.models.{name}: not a name in config/models/ (only those "
                              f"have a warm start; known: {', '.join(known)})")
        knobs.append((f"warmstart.models.{name}", _warmstart_knobs(cfg, name)))
    for where, k in knobs:
        if k["stop_at_accuracy"] is not None and not k["probe_every"]:
            raise ConfigError(f"config error at {where}.stop_at_accuracy: it is read off the accuracy probe, which "
                              f"is off (set {where}.probe_every to a number of steps)")


def _check(cfg: dict) -> None:
    _check_decode_timing(cfg)
    _check_train(cfg)
    _check_warmstart(cfg)
    cases = cfg["workload"]["cases"]
    for m in cfg["models"]:
        try:
            model_assets.resolve(m)
        except ValueError as e:
            raise ConfigError(f"config error at models: {e}") from None
    sources = [("dataset.source", cfg["dataset"]["source"]), ("train.dataset", cfg["train"]["dataset"])]
    sources += [(f"workload.cases.{n}.dataset", c["dataset"]) for n, c in cases.items() if "dataset" in c]
    for field, source in sources:
        if source is None:
            continue
        try:
            dataset_assets.resolve(source)
        except ValueError as e:
            raise ConfigError(f"config error at {field}: {e}") from None
    windows = [("workload.prompt_tokens", cfg["workload"]["prompt_tokens"])]
    windows += [(f"workload.cases.{n}.prompt_tokens", c["prompt_tokens"]) for n, c in cases.items()
                if "prompt_tokens" in c]
    for field, (lo, hi) in windows:
        if lo > hi:
            raise ConfigError(f"config error at {field}: [{lo}, {hi}] has min > max (give [min, max]: [{hi}, {lo}])")
    where = [("variants", cfg["variants"])] + [(f"workload.cases.{name}.variants", case.get("variants", {}))
                                               for name, case in cfg["workload"]["cases"].items()]
    for field, table in where:
        for b, vs in table.items():
            if b not in backends.NAMES:
                raise ConfigError(f"config error at {field}.{b}: unknown backend (allowed: {', '.join(backends.NAMES)})")
            known = backends.module(b).VARIANTS
            for v in vs:
                if v not in known:
                    raise ConfigError(f"config error at {field}.{b}: unknown variant {v!r} "
                                      f"(allowed: {', '.join(known)})")
    for name, case in cfg["workload"]["cases"].items():
        for b in case.get("backends", []):
            if b not in backends.NAMES:
                raise ConfigError(f"config error at workload.cases.{name}.backends: unknown backend {b!r} "
                                  f"(allowed: {', '.join(backends.NAMES)})")
        if "trace" in case:
            try:
                trace.load(case["trace"])
            except trace.TraceError as e:
                raise ConfigError(f"config error at workload.cases.{name}.trace: {e}") from None
            if not case.get("ignore_eos", cfg["workload"]["ignore_eos"]):
                raise ConfigError(f"config error at workload.cases.{name}.ignore_eos: a trace case gives each "
                                  f"completion its own length and ignores EOS, so that every engine does the same "
                                  f"work: set ignore_eos true (or drop the case's ignore_eos: false)")
            if "max_new_tokens" in case:
                raise ConfigError(f"config error at workload.cases.{name}.max_new_tokens: a trace case's budgets "
                                  f"come from its trace (the longest is its max_new_tokens): drop the key")
        for bs in case["batch_sizes"]:
            if bs % case["num_generations"]:
                raise ConfigError(f"config error at workload.cases.{name}.batch_sizes: {bs} is not a multiple "
                                  f"of num_generations={case['num_generations']} (a batch counts sequences, "
                                  f"prompts x num_generations: use a multiple)")
    if cfg["train_backends"] and cfg["train"]["reference"] not in cfg["train_backends"]:
        raise ConfigError(f"config error at train.reference: {cfg['train']['reference']!r} is not in train_backends "
                          f"{cfg['train_backends']} (add it there or pick one of them)")
    for b in cfg["options"]:
        if b not in backends.NAMES:
            raise ConfigError(f"config error at options.{b}: unknown backend (allowed: {', '.join(backends.NAMES)})")
    for i, b in enumerate(cfg["versus"]):
        if b not in backends.NAMES:
            raise ConfigError(f"config error at versus[{i}]: unknown backend {b!r} (allowed: {', '.join(backends.NAMES)})")
    if cfg["reference_backend"] not in cfg["backends"]:
        raise ConfigError(f"config error at reference_backend: {cfg['reference_backend']!r} is not in backends "
                          f"{cfg['backends']} (add it there or pick one of them)")


def warm_name(model: str) -> str:
    """The warm start of a config-named model (`<name>-warm`); any other model trains as it is."""
    return model + model_assets.WARM if model_assets.resolve(model) == "config" else model


def load(path) -> dict:
    with open(path) as f:
        return resolve(yaml.safe_load(f) or {})


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


def variants(cfg: dict, backend: str, case: dict | None = None) -> list[str]:
    """A case's own variants for the backend, else the top-level ones, else its first variant."""
    own = (case or {}).get("variants", {}).get(backend)
    return own or cfg["variants"].get(backend) or [backends.module(backend).VARIANTS[0]]


def warm_models(cfg: dict) -> list[str]:
    """The `models` whose warm starts the warm cases run and GRPO trains (train.warm): warmstart.only's of
    them, else all."""
    only = cfg["warmstart"]["only"]
    return [m for m in cfg["models"] if only is None or (model_assets.warm_base(m) or m) in only]


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


def decode_profile_paths(cfg: dict) -> list[str]:
    """One decode profile per model whose autotune record a flex generation job replays (decode_profile.enabled)."""
    if not cfg["decode_profile"]["enabled"]:
        return []
    return [f"results/decode_profile/{slug}/decode_step.json" for slug in flex_slugs(cfg)]


@dataclass(frozen=True)
class GenGroup:
    """One generation job: the cells (GenJob) of one (model, backend, variant, LoRA on or off), served in order by
    one process and one engine (generation.run_group), each cell writing its own stats file."""
    model: str
    backend: str
    variant: str
    lora: bool
    cells: tuple[GenJob, ...]

    @property
    def model_slug(self) -> str:
        return model_slug(self.model)

    @property
    def key(self) -> str:
        return f"{self.model_slug}/{self.backend}/{self.variant}/{'lora' if self.lora else 'base'}"

    @property
    def record(self) -> str:
        """The job's own record: its cells, each one's set-up and timed seconds, the process's wall."""
        return f"results/generate/{self.model_slug}/{self.backend}/{self.variant}/job-{'lora' if self.lora else 'base'}.json"

    @property
    def rule_name(self) -> str:
        return "generate__" + re.sub(r"\W+", "_", self.key).strip("_")


def gen_groups(cfg: dict) -> list[GenGroup]:
    """gen_jobs grouped into jobs, in the order their first cells appear; a job's cells keep the config's order
    (cases as listed, then their batch sizes), the same for every backend."""
    groups: dict[tuple, list[GenJob]] = {}
    for j in gen_jobs(cfg):
        lora = cfg["workload"]["cases"][j.case]["lora"]
        groups.setdefault((j.model, j.backend, j.variant, lora), []).append(j)
    out = [GenGroup(*k, cells=tuple(v)) for k, v in groups.items()]
    names = [g.rule_name for g in out]
    assert len(set(names)) == len(names), f"two generation jobs share a rule name: {names}"
    return out


def _prompt_family(cfg: dict, case: dict) -> tuple:
    """Cells whose prompts an engine could have cached from one another: one model, LoRA or not, one prompt pool."""
    wl = cfg["workload"]
    return (case["lora"], case.get("dataset", cfg["dataset"]["source"]),
            tuple(case.get("prompt_tokens", wl["prompt_tokens"])))


def prompts_needed(cfg: dict, case_name: str, batch_size: int) -> tuple[int, int, int]:
    """(n_prompts a round, warm-up prompts, prompts the cell sends in all): every timed round, and every re-measure
    of them (workload.spread_retries), sends prompts of its own."""
    wl, case = cfg["workload"], cfg["workload"]["cases"][case_name]
    n = case.get("n_prompts") or wl["n_prompts"] or batch_size // case["num_generations"]
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


def gen_jobs(cfg: dict) -> list[GenJob]:
    jobs = []
    for name, case in cfg["workload"]["cases"].items():
        for model in case_models(cfg, case):
            for backend in cfg["backends"]:
                if case.get("backends") and backend not in case["backends"]:
                    continue
                for variant in variants(cfg, backend, case):
                    for bs in case["batch_sizes"]:
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


def _warmstart_knobs(cfg: dict, model: str) -> dict:
    """warmstart, with warmstart.models[model] over it."""
    return _deep_merge({k: v for k, v in cfg["warmstart"].items() if k != "models"},
                       cfg["warmstart"]["models"].get(model, {}))


def warmstart_spec(cfg: dict, model: str) -> dict:
    """The knobs of `model`'s warmstart job (assets.warmstart.specs reads them): warmstart, with
    warmstart.models[model] over it. The accuracy band is gated on GPU profiles, for a model GRPO trains
    (a warm start that only generates, e.g. the speed model, records its accuracy)."""
    ws = _warmstart_knobs(cfg, model)
    gated = uses_gpu(cfg) and warm_name(model) in cfg["train"]["models"]
    return {"sft": {k: ws[k] for k in WARMSTART_SFT},
            "eval": {k: ws[k] for k in WARMSTART_EVAL},
            "gates": {**ws["gates"], "accuracy_band": ws["gates"]["accuracy_band"] if gated else None}}


def uses_gpu(cfg: dict) -> bool:
    """Every profile but cpu runs its jobs on leased GPUs."""
    return cfg["profile"] != "cpu"


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

