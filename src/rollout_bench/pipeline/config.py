"""Load, validate and resolve config/config.yaml (the jobs it asks for: jobs.py)."""
import copy
import os
import shlex
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import jsonschema
import yaml

from .. import ROOT, SCHEMAS, backends
from ..assets import dataset as dataset_assets
from ..assets import long_prompts
from ..assets import model as model_assets
from ..core import envinfo
from ..core.workload import LORA_TARGETS
from ..generation import trace
from ..grpo import vllm_colocate


ENVS = ROOT / "envs"


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
    from ..engine.config import EngineConfig

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
        knobs.append((f"warmstart.models.{name}", warmstart_knobs(cfg, name)))
    for where, k in knobs:
        if k["stop_at_accuracy"] is not None and not k["probe_every"]:
            raise ConfigError(f"config error at {where}.stop_at_accuracy: it is read off the accuracy probe, which "
                              f"is off (set {where}.probe_every to a number of steps)")


def _check(cfg: dict) -> None:
    _check_decode_timing(cfg)
    _check_train(cfg)
    _check_warmstart(cfg)
    _check_sources(cfg)
    _check_backend_names(cfg)
    _check_sites(cfg)
    for name, case in cfg["workload"]["cases"].items():
        _check_case(cfg, name, case)


def _check_sites(cfg: dict) -> None:
    groups = [p.stem for p in ENVS.glob("*.yaml")]
    for group, path in cfg["sites"].items():
        if group not in groups:
            raise ConfigError(f"config error at sites.{group}: not an environment group (envs/GROUP.yaml: "
                              f"{', '.join(sorted(groups))})")
        if not Path(path).is_dir():
            raise ConfigError(f"config error at sites.{group}: {path} is not a directory; install the group there "
                              f"(pip install --target {path} -r envs/{group}.requirements.txt, or the offline "
                              f"wheelhouse: python -m rollout_bench.host.wheelhouse install DIR --target {path}) "
                              f"or drop the key")


def _check_sources(cfg: dict) -> None:
    """Models and datasets resolve; prompt windows are [min, max]."""
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


def _check_backend_names(cfg: dict) -> None:
    """Every backend a field names exists, and each variant; the references are among the backends that run."""
    where = [("variants", cfg["variants"])] + [(f"workload.cases.{name}.variants", case.get("variants", {}))
                                               for name, case in cfg["workload"]["cases"].items()]
    for field, table in where:
        for b, vs in table.items():
            if b not in backends.NAMES:
                raise ConfigError(f"config error at {field}.{b}: unknown backend "
                                  f"(allowed: {', '.join(backends.NAMES)})")
            known = backends.module(b).VARIANTS
            for v in vs:
                if v not in known:
                    raise ConfigError(f"config error at {field}.{b}: unknown variant {v!r} "
                                      f"(allowed: {', '.join(known)})")
    if cfg["train_backends"] and cfg["train"]["reference"] not in cfg["train_backends"]:
        raise ConfigError(f"config error at train.reference: {cfg['train']['reference']!r} is not in train_backends "
                          f"{cfg['train_backends']} (add it there or pick one of them)")
    for b in cfg["options"]:
        if b not in backends.NAMES:
            raise ConfigError(f"config error at options.{b}: unknown backend (allowed: {', '.join(backends.NAMES)})")
    for i, b in enumerate(cfg["versus"]):
        if b not in backends.NAMES:
            raise ConfigError(f"config error at versus[{i}]: unknown backend {b!r} "
                              f"(allowed: {', '.join(backends.NAMES)})")
    if cfg["reference_backend"] not in cfg["backends"]:
        raise ConfigError(f"config error at reference_backend: {cfg['reference_backend']!r} is not in backends "
                          f"{cfg['backends']} (add it there or pick one of them)")


def _check_case(cfg: dict, name: str, case: dict) -> None:
    """One workload case: its backends, its trace, its batch sizes."""
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
    for b, sizes in (case.get("backend_batch_sizes") or {}).items():
        where = f"config error at workload.cases.{name}.backend_batch_sizes.{b}"
        if b not in backends.NAMES or (case.get("backends") and b not in case["backends"]):
            raise ConfigError(f"{where}: {b!r} is not a backend this case runs "
                              f"({', '.join(case.get('backends') or backends.NAMES)}): drop it or add it to the case")
        if not set(sizes) <= set(case["batch_sizes"]):
            raise ConfigError(f"{where}: {sorted(set(sizes) - set(case['batch_sizes']))} not in the case's "
                              f"batch_sizes {case['batch_sizes']}: a backend runs a subset of them")
    for bs in case["batch_sizes"]:
        if bs % case["num_generations"]:
            raise ConfigError(f"config error at workload.cases.{name}.batch_sizes: {bs} is not a multiple "
                              f"of num_generations={case['num_generations']} (a batch counts sequences, "
                              f"prompts x num_generations: use a multiple)")
        n = prompts_per_round(cfg, case, bs)
        if case.get("long_prompts") and n % long_prompts.PERIOD:
            raise ConfigError(f"config error at workload.cases.{name}.batch_sizes: at {bs} a round sends {n} long "
                              f"prompts, not a multiple of {long_prompts.PERIOD}: long prompts' target lengths repeat "
                              f"every {long_prompts.PERIOD} prompts, so that only rounds of a multiple of it hold "
                              f"about as many prompt tokens each; use a multiple (prompts x num_generations)")


def prompts_per_round(cfg: dict, case: dict, batch_size: int) -> int:
    """The prompts a timed round of `case` sends at `batch_size`: the case's n_prompts, the workload's, or one per
    num_generations sequences of the batch."""
    return case.get("n_prompts") or cfg["workload"]["n_prompts"] or batch_size // case["num_generations"]


def warm_name(model: str) -> str:
    """The warm start of a config-named model (`<name>-warm`); any other model trains as it is."""
    return model + model_assets.WARM if model_assets.resolve(model) == "config" else model


def load(path) -> dict:
    with open(path) as f:
        return resolve(yaml.safe_load(f) or {})


def uses_gpu(cfg: dict) -> bool:
    """Every profile but cpu runs its jobs on leased GPUs."""
    return cfg["profile"] != "cpu"


def site_prefix(cfg: dict, group: str) -> str:
    """The shell words that put environment group `group`'s site directory (`sites`) first on a job's PYTHONPATH;
    '' where it has none (the job runs in the workflow's environment, or conda's with --use-conda)."""
    path = cfg["sites"].get(group)
    return f"export PYTHONPATH={shlex.quote(str(Path(path).resolve()))}:$PYTHONPATH; " if path else ""


def site_packages(cfg: dict, group: str) -> str:
    """What environment group `group`'s site directory (`sites`) holds, 'name-version' of each installed
    distribution, sorted; '' where it has none. A job's probe: a package installed into the site reruns the group's
    `skipped` jobs (Snakemake's own process, which computes the probe, does not import from the site)."""
    path = cfg["sites"].get(group)
    if not path:
        return ""
    return ",".join(sorted(d.name.removesuffix(".dist-info") for d in Path(path).glob("*.dist-info")))


def variants(cfg: dict, backend: str, case: dict | None = None) -> list[str]:
    """A case's own variants for the backend, else the top-level ones, else its first variant."""
    own = (case or {}).get("variants", {}).get(backend)
    return own or cfg["variants"].get(backend) or [backends.module(backend).VARIANTS[0]]


def warm_models(cfg: dict) -> list[str]:
    """The `models` whose warm starts the warm cases run and GRPO trains (train.warm): warmstart.only's of
    them, else all."""
    only = cfg["warmstart"]["only"]
    return [m for m in cfg["models"] if only is None or (model_assets.warm_base(m) or m) in only]


def warmstart_knobs(cfg: dict, model: str) -> dict:
    """warmstart, with warmstart.models[model] over it."""
    return _deep_merge({k: v for k, v in cfg["warmstart"].items() if k != "models"},
                       cfg["warmstart"]["models"].get(model, {}))
