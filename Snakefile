# rollout-bench: which rollout engine should a GRPO run use?  See README.md and docs/design.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/assets.smk"
include: "rules/generate.smk"
include: "rules/report.smk"
include: "rules/train.smk"


rb_compile_cache.restore(_CACHE_ENV)


# the command's own wall time (results/logs/invocation.json); a dry run calls none of these
onstart:
    rb_invocation.start(config.get("profile"))


onsuccess:
    rb_invocation.finish(ok=True)


onerror:
    rb_invocation.finish(ok=False)


# Under a cluster executor these run on the submit host: seconds of CPU each, less than a queue wait.
# The model and LoRA assets load the model (GBs for the 4B shape) and go to the cluster.
localrules:
    tokenizer,
    dataset,
    learnable_dataset,
    band,
    compare,
    aggregate_generate,
    render_generate,
    render_decode_profile,
    render_train,


rule all:
    input:
        GEN_STATS,
        MISMATCH_PATHS,
        "results/summary/generate.csv",
        "results/tables/generate.md",
        "results/charts/tps_vs_batch.html",
        "results/charts/tps_vs_memory.html",
        TRAIN_STATS,
        COMPARE_PATHS,
        BAND_PATHS,
        ["results/tables/decode_step.md"] if DECODE_PROFILE_PATHS else [],
        ["results/tables/train.md", "results/tables/equivalence.md", "results/charts/train_steps.html"]
        if TRAIN_STATS
        else [],
    default_target: True
