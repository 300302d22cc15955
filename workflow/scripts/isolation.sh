#!/usr/bin/env bash
# Does a leased job time the same alone and beside a busy neighbour? On a host with 2+ GPUs, run one
# greedy B = 64 cell of the gpu profile's Qwen3-4B shape (case `iso`, a job of its own) three times: alone;
# beside its twin (case `twin`, the same workload in another job, on the other GPU) with the leases' CPU
# shares; and beside its twin again with gpu.pin_cpus false (no CPU shares, as before the shares existed).
# Each run's stats (every round, its CPU set and the neighbours that overlapped its timed rounds) are copied
# to OUT/<run>/.
#   bash workflow/scripts/isolation.sh OUT BACKEND VARIANT [SNAKEMAKE...]     (e.g. OUT hf_generate default)
# Run it through offline_gpu_host.sh's environment on an offline host: SNAKEMAKE="bash
# workflow/scripts/offline_gpu_host.sh" (default: python3 -m snakemake). RUNS picks which of the three
# runs (default all); WORKLOAD, a YAML file, adds keys to every run (e.g. a longer warm-up).
set -euo pipefail
OUT=$1 BACKEND=$2 VARIANT=$3
shift 3
SNAKEMAKE=${SNAKEMAKE:-python3 -m snakemake}
JOB=results/generate/qwen3-4b/$BACKEND/$VARIANT/iso/bs64.json
TWIN=results/generate/qwen3-4b/$BACKEND/$VARIANT/twin/bs64.json
CFG=$(mktemp -d)
trap 'rm -rf "$CFG"' EXIT
# the measured cell and its twin: greedy at B = 64 under two names, for this backend only, each a job (and a
# process) of its own (own_job), so that neither waits for the other's cells
twin_case() {
  printf '    %s: {lora: false, sampling: greedy, batch_sizes: [64], own_job: true, backends: [%s],\n' "$1" "$BACKEND"
  printf '           variants: {%s: [%s]}}\n' "$BACKEND" "$VARIANT"
}
{ printf 'workload:\n  cases:\n'; twin_case iso; twin_case twin; } > "$CFG/twin.yaml"
printf 'gpu: {pin_cpus: false}\n' > "$CFG/unpinned.yaml"
BASE="$CFG/twin.yaml${WORKLOAD:+ $WORKLOAD}"
run() {  # NAME CONFIGFILES TARGETS...
  local name=$1 cfgs=$2
  shift 2
  rm -f "$JOB" "$TWIN"
  # shellcheck disable=SC2086  # $cfgs is a list of files
  $SNAKEMAKE "$@" "${EXTRA[@]}" --cores all --resources gpu=2 --config profile=gpu --configfile $cfgs
  mkdir -p "$OUT/$name"
  for f in "$@"; do
    local case_
    case_=$(basename "$(dirname "$f")")
    cp "$f" "$OUT/$name/$case_.json"
    cp "results/logs/generate/qwen3-4b/$BACKEND/$VARIANT/base-$case_.log" "$OUT/$name/$case_.log"  # the job's log
  done
}
EXTRA=("$@")
for r in ${RUNS:-alone beside_twin beside_twin_unpinned}; do
  case $r in
    alone) run alone "$BASE" "$JOB" ;;
    beside_twin) run beside_twin "$BASE" "$JOB" "$TWIN" ;;
    beside_twin_unpinned) run beside_twin_unpinned "$BASE $CFG/unpinned.yaml" "$JOB" "$TWIN" ;;
    *) echo "unknown run $r" >&2; exit 2 ;;
  esac
done
