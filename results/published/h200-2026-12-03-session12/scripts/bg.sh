#!/bin/bash
# From /tmp/rb (a copy of the checkout), core in /tmp/site. One GPU:
#   W: the learner's warm start (in /tmp/w) | S: the smoke run, once vllm + unsloth are installed;
#   then T: the GPU tests of the step profile; then, on the warm start and once S and T are done, L: the learn case
#   (.carry/session.yaml: every backend, the reference's three seeds and its frozen control at once).
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
export WHEELS=  # core is installed (/tmp/site/.installed); vllm and unsloth go on PYTHONPATH below
R=/tmp/rb
rm -rf /tmp/w && mkdir -p /tmp/w && cp -r Snakefile rules workflow config src envs profiles pyproject.toml .carry /tmp/w/
cd /tmp/w
say "W start"
( bash workflow/scripts/offline_gpu_host.sh results/assets/models/qwen3-small-warm --cores 8 --resources gpu=6 \
    --configfile .carry/session.yaml --config profile=gpu > /tmp/w_small.log 2>&1; rc=$?; say "W rc=$rc" ) &
WPID=$!
installed() { [ -f /tmp/site-vllm/.installed ] && [ -f /tmp/site-unsloth/.installed ]; }
( while ! installed; do sleep 2; done; cd $R && say "S start" && \
  PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth timeout 900 bash workflow/scripts/offline_gpu_host.sh smoke --gpu 0 \
    --workdir /tmp/smoke > /tmp/smoke.log 2>&1; rc=$?; say "S rc=$rc"; say "T start"; \
  PYTHONPATH=/tmp/site:$R/src timeout 300 python3 -m pytest -m gpu -q -rA tests/test_step_profile.py \
    > /tmp/gpu_tests.log 2>&1; rc=$?; say "T rc=$rc" ) &
SPID=$!
wait $WPID
[ -d results/assets/models/qwen3-small-warm ] || { say "no warm model: no learn case"; wait; say DONE; exit; }
wait $SPID
say "L start"
PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth bash workflow/scripts/offline_gpu_host.sh results/tables/train.md \
    --cores 16 --resources gpu=8 --configfile .carry/session.yaml --config profile=gpu --keep-going \
    > /tmp/learn.log 2>&1; rc=$?; say "L rc=$rc"
say DONE
