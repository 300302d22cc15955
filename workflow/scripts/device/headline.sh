#!/bin/bash
# The plan of a headline session, run by launch.sh from /tmp/rb:
#   T  the GPU tests (pytest -m gpu) and S the smoke run, beside each other once the core group is installed
#      (neither is timed; vLLM's jobs in S say skipped unless its group was installed by then)
#   H  the headline profile, alone on the GPU, once T and S are done and vLLM is installed; then its tables
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
[ -f .carry/commit.env ] && . .carry/commit.env
export PYTHONUNBUFFERED=1 VLLM_HOST_IP=127.0.0.1 VLLM_ENABLE_V1_MULTIPROCESSING=0
say "plan start at ${ROLLOUT_BENCH_GIT_COMMIT:-?} dirty=${ROLLOUT_BENCH_GIT_DIRTY:-?}"
while [ ! -f /tmp/site-core/.installed ]; do sleep 2; done
mkdir -p /tmp/rb-bin && printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/rb-bin/python && chmod +x /tmp/rb-bin/python
export PATH="/tmp/rb-bin:$PATH"
say "T start"
(PYTHONPATH=/tmp/site-core:$PWD/src python3 -m pytest -m gpu -q -rA -p no:cacheprovider tests > /tmp/pytest_gpu.log 2>&1
 say "T rc=$?") &
# vLLM's group only once installed whole: a package half-written by its install would fail the jobs that import it
VP=$([ -f /tmp/site-vllm/.installed ] && echo /tmp/site-vllm:)
say "S start (${VP:-without vllm})"
(PYTHONPATH=$VP/tmp/site-core:$PWD/src timeout 900 python3 -m rollout_bench.pipeline.smoke --gpu 0 --workdir /tmp/smoke \
   > /tmp/smoke.log 2>&1; say "S rc=$?") &
wait
while [ ! -f /tmp/site-vllm/.installed ]; do sleep 2; done
say "H start"
rm -rf /tmp/w && mkdir -p /tmp/w && cp -r Snakefile rules workflow config src envs profiles pyproject.toml /tmp/w/
cd /tmp/w
t0=$(date +%s)
PYTHONPATH=/tmp/site-vllm:/tmp/site-core:$PWD/src python3 -m snakemake --cores 16 --resources gpu=1 \
  --config profile=headline --keep-going > /tmp/headline.log 2>&1
rc=$?
say "H rc=$rc wall=$(( $(date +%s) - t0 ))s"
echo "$(( $(date +%s) - t0 ))" > /tmp/headline_wall_s
say DONE
