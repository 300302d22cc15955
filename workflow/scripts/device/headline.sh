#!/bin/bash
# The plan of a headline session, run by launch.sh from /tmp/rb (`launch.sh headline.sh [STEPS]`, default S H T),
# one step after the other in the order named, so that each timed profile has the GPU to itself and what matters most
# runs before anything the device budget could cut short:
#   S  the smoke run, once the core and vLLM groups are installed (not timed)
#   H  the headline profile; then its tables
#   T  the GPU tests (pytest -m gpu)
#   P  S and T beside each other (neither is timed for a result), before H: a session's device time for all three;
#      T starts once the core group is installed, while the vLLM group's wheels are still arriving
#   E  the smoke run on the core group alone, from the core group's install on, while the vLLM group's wheels are
#      still arriving (its vLLM jobs say `skipped`; H's vLLM jobs run that path): a session short of device time
#      checks the GPU paths in the carries' wall; the next step waits for it. First in STEPS, never with S or P
#      (`E H`); bg.log says "E start", "E rc="
#   F  FlashAttention-4 (issue 50), alone on the GPU: its GPU test (tests/test_engine_fa4_gpu.py), then the prefill
#      profile, whose fa4 jobs run with the fa4 group's site first on their path (`sites`); the group arrives like the
#      others (`stash.sh fa4/batchNNN ... install fa4`). Where its install failed, the profile runs without the site
#      and its fa4 jobs say `skipped`
# H_TARGETS: what H asks Snakemake for (default: the whole profile), e.g. two jobs' records for a short session.
# CORE_ONLY=1: no vLLM group (the plan does not wait for it; S and H then record vLLM `skipped`); GPU_TESTS: the test
# files T runs (default: all of tests/).
# S and H share one compile-cache directory, as the jobs of one host do (host/compile_cache.py): what vLLM compiles
# once a host (the Triton kernels of its warm-up: 90-110 s after graph capture in every first vLLM start of a
# published run, 8-9 s in the next) is paid in S, and H's stats say per library whether its cache was warm.
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
[ -f .carry/commit.env ] && . .carry/commit.env
export PYTHONUNBUFFERED=1 VLLM_HOST_IP=127.0.0.1 VLLM_ENABLE_V1_MULTIPROCESSING=0
CACHE_ROOT=/tmp/compile_cache  # not CC: the C compiler variable, exported on the device, Triton builds with it
CACHES="TORCHINDUCTOR_CACHE_DIR=$CACHE_ROOT/inductor TRITON_CACHE_DIR=$CACHE_ROOT/triton VLLM_CACHE_ROOT=$CACHE_ROOT/vllm"
STEPS="${*:-S H T}"
step() { [[ " $STEPS " == *" $1 "* ]]; }
say "plan ($STEPS) start at ${ROLLOUT_BENCH_GIT_COMMIT:-?} dirty=${ROLLOUT_BENCH_GIT_DIRTY:-?}"
# a group only once installed whole: a package half-written by its install would fail the jobs that import it
# (1: its install failed, bg.log says so)
wait_for() { while [ ! -f /tmp/site-$1/.installed ]; do grep -q "install $1 rc=[1-9]" $LOG && return 1; sleep 2; done; }
wait_for core
mkdir -p /tmp/rb-bin && printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/rb-bin/python && chmod +x /tmp/rb-bin/python
export PATH="/tmp/rb-bin:$PATH"
SITE=/tmp/site-vllm:/tmp/site-core
# run_profile STEP DIR NAME TIMEOUT CONFIG...: snakemake on one GPU in a fresh copy of the tree at DIR with --config
# CONFIG..., its log /tmp/NAME.log and its wall in /tmp/NAME_wall_s; TIMEOUT seconds, or "" for none
run_profile() {
  local step=$1 dir=$2 name=$3 limit=$4 targets=""
  [ "$step" = H ] && targets="${H_TARGETS:-}"
  shift 4
  rm -rf $dir && mkdir -p $dir && cp -r Snakefile rules workflow config src envs profiles pyproject.toml $dir/
  (cd $dir
   t0=$(date +%s)
   env $CACHES PYTHONPATH=$SITE:$PWD/src ${limit:+timeout $limit} python3 -m snakemake $targets --cores 16 \
     --resources gpu=1 --config "$@" --keep-going > /tmp/$name.log 2>&1
   rc=$?
   say "$step rc=$rc wall=$(( $(date +%s) - t0 ))s"
   echo "$(( $(date +%s) - t0 ))" > /tmp/${name}_wall_s)
}
gpu_tests() {
  say "T start"
  PYTHONPATH=/tmp/site-core:$PWD/src python3 -m pytest -m gpu -q -rA -p no:cacheprovider --durations=15 ${GPU_TESTS:-tests} \
    > /tmp/pytest_gpu.log 2>&1
  say "T rc=$?"
}
smoke() {  # smoke [LABEL]: S, or E for the early one
  local label=${1:-S}
  say "$label start"
  env $CACHES PYTHONPATH=$SITE:$PWD/src timeout 900 python3 -m rollout_bench.pipeline.smoke --gpu 0 --workdir /tmp/smoke \
    > /tmp/smoke.log 2>&1
  say "$label rc=$?"
}
fa4() {
  say "F start"
  local sites=""
  wait_for fa4 && sites="sites={fa4: /tmp/site-fa4}"
  PYTHONPATH=${sites:+/tmp/site-fa4:}/tmp/site-core:$PWD/src python3 -m pytest -m gpu -q -rA -p no:cacheprovider \
    tests/test_engine_fa4_gpu.py > /tmp/pytest_fa4.log 2>&1
  say "F test rc=$?"
  run_profile F /tmp/p prefill 900 profile=prefill ${sites:+"$sites"}
}
# E runs from here, before the steps' loop: first in STEPS, and never with S or P (one smoke workdir, one GPU)
if step E && { [ "${STEPS%% *}" != E ] || step S || step P; }; then
  say "E must come first in STEPS, without S or P (got: $STEPS)"; say DONE; exit 2
fi
step P && { gpu_tests & }
step E && { (SITE=/tmp/site-core; smoke E) & }
[ "${CORE_ONLY:-0}" = 1 ] && SITE=/tmp/site-core || wait_for vllm
# the steps in the order named (P F H: the prefill profile before the headline, where the budget may cut the last)
for s in $STEPS; do
  case $s in
    P) smoke; wait ;;
    E) wait ;;
    S) smoke ;;
    H) say "H start"; run_profile H /tmp/w headline "" profile=headline ;;
    F) fa4 ;;
    T) gpu_tests ;;
    *) say "unknown step $s" ;;
  esac
done
say DONE
