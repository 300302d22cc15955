# rollout-bench: which rollout engine should a GRPO run use?  See README.md and ../shared/DESIGN.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/assets.smk"
include: "rules/generate.smk"
include: "rules/report.smk"


rule all:
    input:
        GEN_STATS,
        "results/summary/generate.csv",
        "results/tables/generate.md",
        "results/charts/tps_vs_batch.html",
        "results/charts/tps_vs_memory.html",
    default_target: True
