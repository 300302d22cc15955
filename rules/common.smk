# Config resolution, job enumeration and the GPU budget check; logic lives in src/rollout_bench.
import json
import re
import sys
from pathlib import Path

_SRC_DIR = str(Path(workflow.basedir) / "src")
sys.path.insert(0, _SRC_DIR)
# jobs run `python -m rollout_bench ...`: make them import this checkout's package
shell.prefix(f"export PYTHONPATH={_SRC_DIR}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; ")

from rollout_bench import MODEL_CONFIGS
from rollout_bench import backends as rb_backends
from rollout_bench.grpo import availability as rb_grpo_availability
from rollout_bench.host import compile_cache as rb_compile_cache
from rollout_bench.host import gpu_lease as rb_lease
from rollout_bench.pipeline import config as rb_config
from rollout_bench.pipeline import invalid_stats as rb_invalid_stats
from rollout_bench.pipeline import invocation as rb_invocation
from rollout_bench.pipeline import jobs as rb_jobs
from rollout_bench.pipeline import plan as rb_plan
from rollout_bench.pipeline import sources as rb_sources

# A cluster job re-reads the workflow on its compute node (`--mode remote`), without --resources.
CLUSTER_JOB = workflow.remote_exec
# A cluster executor needs --jobs, which a local run folds into --cores: the scheduler grants the GPUs.
SCHEDULED = CLUSTER_JOB or workflow.resource_settings.nodes is not None
if CLUSTER_JOB and config.get("profile", "auto") == "auto":
    raise WorkflowError("profile: auto picks by the host that reads the workflow, and a cluster job reads it "
                        "on its compute node: pass --config profile=gpu (or cpu) to snakemake")

_CACHE_ENV = rb_compile_cache.snapshot()  # the Snakefile's imports set some (torch's Inductor); jobs get cache_dir
try:
    # `config` merges config/config.yaml with the user's files and --config; the user's own keys win
    # over the selected profile's, so they are handed over apart
    CFG = rb_config.resolve(config, rb_config.user_overrides(workflow.overwrite_configfiles,
                                                             workflow.config_settings.config))
except rb_config.ConfigError as e:
    raise WorkflowError(str(e)) from None

GPU_PER_JOB = 1 if rb_config.uses_gpu(CFG) else 0
GEN_GROUPS = rb_jobs.gen_groups(CFG)
GEN_STATS = [c.path for g in GEN_GROUPS for c in g.cells]
TRAIN_STATS = [j.path for j in rb_jobs.train_jobs(CFG)]
COMPARE_PATHS = rb_jobs.compare_paths(CFG)
BAND_PATHS = rb_jobs.band_paths(CFG)
DECODE_PROFILE_PATHS = rb_jobs.decode_profile_paths(CFG)
MISMATCH_JOBS = {rb_jobs.model_slug(m.model): m for m in rb_jobs.mismatch_jobs(CFG)}
MISMATCH_PATHS = [m.path for m in MISMATCH_JOBS.values()]
_BY_SLUG = {rb_jobs.model_slug(m): m for m in rb_jobs.all_models(CFG)}
# config/models names: the random-init model dirs the `model` rule builds, and the bases `warmstart` starts from
CONFIG_NAMES = "|".join(sorted(re.escape(p.stem) for p in MODEL_CONFIGS.glob("*.json")))

# A dry run shows the plan on any machine (no GPU needed) and what its GPU jobs should take; a real run on a host
# without the GPUs it asks for stops here.
DRY_RUN = not CLUSTER_JOB and rb_plan.is_dry_run(sys.argv)
if DRY_RUN and GPU_PER_JOB:
    logger.info(rb_plan.text(CFG, Path(workflow.basedir) / "results/published"))
# Snakemake counts `gpu` but does not stop a GPU job from starting when --resources lacks it.
_gpu_budget = workflow.global_resources.get("gpu")
_gpu_budget = getattr(_gpu_budget, "value", _gpu_budget)  # a Resource, or the bare number
try:
    if not SCHEDULED and not DRY_RUN:
        rb_lease.check_budget(GPU_PER_JOB, _gpu_budget,
                              rb_lease.host_gpu_count(), CFG["gpu"]["jobs_per_gpu"])
except rb_lease.LeaseError as e:
    raise WorkflowError(str(e)) from None
try:
    _cores = workflow.cores
except WorkflowError:  # a dry run without --cores
    _cores = 1
# Snakemake's share of --cores per GPU job, so that `--resources gpu=N` jobs are admitted at once; the
# lease pins each job to its GPU's share of the host's CPUs (cpu_share.py), recorded in its stats.
GPU_JOB_THREADS = max(1, _cores // max(1, _gpu_budget or 1)) if GPU_PER_JOB else 1
# every GPU job runs under the lease: its GPUs, its CPU share, its line in the lease log
_LEASE = (f"python -m rollout_bench.host.gpu_lease --gpus {GPU_PER_JOB} --lock-dir {CFG['gpu']['lock_dir']} "
          f"--slots {CFG['gpu']['jobs_per_gpu']} {'--timing-lock ' if CFG['gpu']['timing_lock'] else ''}"
          f"{'' if CFG['gpu']['pin_cpus'] else '--no-pin-cpus '}")
LEASE = f"{_LEASE}--job {{output}} "
LEASE_JOB = f"{_LEASE}--job {{output.job}} "  # a generation job: its record names it in the lease log


def gpu_slots_of(backend, options):
    """A GPU job's `gpu` resource: one job slot, or every slot of its GPU for a job that must have it alone
    (backends: alone_on_gpu), so that Snakemake starts no slot job the lease would hold back."""
    alone = rb_backends.alone_on_gpu(backend, options)
    return GPU_PER_JOB * (CFG["gpu"]["jobs_per_gpu"] if alone else 1)


def lease_alone_of(backend, options):
    return "--alone " if GPU_PER_JOB and rb_backends.alone_on_gpu(backend, options) else ""


def gpu_slots(wc):
    """A train job's `gpu` resource (gpu_slots_of, with its train.options)."""
    return gpu_slots_of(wc.backend, train_workload(wc)["options"])


def lease_alone(wc):
    return lease_alone_of(wc.backend, train_workload(wc)["options"])


# A truncated or invalid cached stats file counts as missing: moved aside, so its job reruns (by the
# main process only: cluster jobs must not move each other's files).
def _readers(path):
    """The cached outputs made from a stats file: removed with it when it is set aside."""
    if path.startswith("results/generate/"):
        return ["results/summary/generate.csv"]
    model = path.split("/")[2]
    return ["results/tables/train.md", "results/tables/equivalence.md"] + [
        p for p in BAND_PATHS + COMPARE_PATHS if p.split("/")[2] == model]


for _msg in [] if CLUSTER_JOB else rb_invalid_stats.set_aside(GEN_STATS + TRAIN_STATS, _readers):
    logger.warning(f"invalid cached stats file: {_msg}")


def code(*entries, skip_lazy=()):
    """A job's code inputs: the import closure of the modules its command runs (sources.py)."""
    return rb_sources.closure(entries, skip_lazy)


def backend_sources_of(backend):
    """Editing a backend's code reruns that backend's jobs only (docs/design.md §2)."""
    return code("pipeline.cli:_generate", "host.gpu_lease", f"backends.{backend}",
                skip_lazy=rb_sources.other_backends(backend, rb_backends.NAMES))


def model_source(slug):
    return _BY_SLUG[slug]


def model_dir(slug):
    """Where backends load the model from: the materialised (random or warm) dir, or the user's dir / hub id."""
    src = model_source(slug)
    return f"results/assets/models/{slug}" if rb_jobs.model_assets.resolve(src) in ("config", "warm") else src


def model_input_of(model):
    """`model` (a config entry or a slug) as a job input: the dir the pipeline builds, or the user's own dir."""
    slug = rb_jobs.model_slug(model)
    src = model_source(slug)
    kind = rb_jobs.model_assets.resolve(src)
    built = [f"results/assets/models/{slug}"]
    return {"config": built, "warm": built, "dir": [src], "hub": []}[kind]


def model_input(wc):
    return model_input_of(wc.model)


def lora_dir(slug):
    return f"results/assets/lora/{slug}-r{CFG['lora']['rank']}"


# the dataset sources the pipeline builds itself
BUILT_DATASETS = {"synthetic": "results/assets/dataset", "learnable": "results/assets/dataset-learnable"}


def dataset_dir(source=None):
    src = source or CFG["dataset"]["source"]
    return BUILT_DATASETS.get(src, src)


def dataset_input(source=None):
    """The dataset dir as a job input when the pipeline builds it (a user's dir or hub id is not tracked)."""
    src = source or CFG["dataset"]["source"]
    return [BUILT_DATASETS[src]] if src in BUILT_DATASETS else []


def cell_workload(cell):
    return rb_jobs.job_workload(CFG, cell.model, cell.backend, cell.case, cell.batch_size)


def group_datasets(group):
    """The dataset dirs a generation job's cells read, where the pipeline builds them."""
    return sorted({d for c in group.cells for d in dataset_input(cell_workload(c)["dataset"])})


def group_cells(group):
    """A generation job's cells, as its command takes them: each one's workload, dataset dir and stats path."""
    cells = [(c, cell_workload(c)) for c in group.cells]
    return json.dumps([{"case": c.case, "workload": wl, "dataset": dataset_dir(wl["dataset"]), "out": c.path}
                       for c, wl in cells], sort_keys=True)


def autotune_input_of(model, backend):
    """flex jobs, generation and GRPO rollouts, replay the model's tuned decode kernel options when autotune is
    enabled (a warm start's are its random base's)."""
    if backend == "flex" and CFG["autotune"]["enabled"]:
        return [f"results/autotune/{rb_jobs.autotune_slug(model_source(rb_jobs.model_slug(model)))}/decode_opts.json"]
    return []


def autotune_input(wc):
    return autotune_input_of(wc.model, wc.backend)


def backend_env_of(backend, variant=None):
    """Each backend group has its own environment where pins conflict (vLLM pins torch exactly; flash-attn-4 a
    newer nvidia-cutlass-dsl than vLLM's)."""
    return f"../envs/{rb_backends.env_group(backend, variant)}.yaml"


def site_of(backend, variant):
    """Its group's site directory first on the job's PYTHONPATH, where config `sites` names one."""
    return rb_config.site_prefix(CFG, rb_backends.env_group(backend, variant))


def probe_of(backend, variant):
    """What decides a `skipped` result (packages, GPUs), and what its group's site holds where it has one: a rerun
    when either changes. Without a site, the probe of every job of the backend."""
    site = rb_config.site_packages(CFG, rb_backends.env_group(backend, variant))
    return rb_backends.fingerprint(backend) + (f" site:{site}" if site else "")


def train_sources(wc):
    return code("grpo.cli:_train", "host.gpu_lease",
                skip_lazy=rb_sources.other_backends(wc.backend, rb_grpo_availability.NAMES))


def train_workload(wc):
    return rb_jobs.train_workload(CFG, model_source(wc.model), wc.backend, *rb_jobs.parse_seed(wc.seed))


def train_path(model_slug, backend, seed):
    return rb_jobs.train_path(model_slug, backend, CFG["train"]["steps"], seed)
