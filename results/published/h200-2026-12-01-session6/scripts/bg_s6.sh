#!/bin/bash
# Session of 2026-12-01 ~12:00 UTC, nvidia-h200 (one GPU), from /tmp/rb (core site /tmp/site), branch gpu-test
# (main + vllm-alone + gqa-decode + e2b-gate):
#  1. GPU pytest (-m gpu) beside W: the 27M learner's warm start (config's knobs)
#  2. L: the learn case on it: hf_generate seeds 3407-3409 and flex 3407 at once; vllm 3407 beside them once its site is in
#  3. S: the smoke run alone on the GPU (vllm site on PYTHONPATH), after every learn run
cd "$1"
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
export WHEELS=
copy() { rm -rf $1 && mkdir -p $1 && cp -r Snakefile rules workflow config src envs profiles pyproject.toml .carry $1/; }
site_wait() { for i in $(seq 1 240); do [ -f /tmp/site-$1/.installed ] && return 0; sleep 5; done; return 1; }
say "start"
copy /tmp/w/small
( cd /tmp/w/small && bash workflow/scripts/offline_gpu_host.sh results/assets/models/qwen3-small-warm --cores 8 --resources gpu=1 --configfile .carry/ws6_small.yaml --config profile=gpu > /tmp/w_small.log 2>&1; rc=$?; say "W small rc=$rc" ) &
WPID=$!
PYTHONPATH=/tmp/site:/tmp/site-pytest:src python3 -m pytest -q -p no:cacheprovider -m gpu tests/ > /tmp/pytest_gpu.log 2>&1
rc=$?; say "pytest rc=$rc"
wait $WPID
cd /tmp/w/small
M=results/train/qwen3-small-warm
say "L start"
( bash workflow/scripts/offline_gpu_host.sh $M/hf_generate/steps100-seed3407.json $M/hf_generate/steps100-seed3408.json $M/hf_generate/steps100-seed3409.json $M/flex/steps100-seed3407.json --cores 16 --resources gpu=1 --configfile .carry/ws6_learn.yaml --config profile=gpu --keep-going --rerun-triggers mtime > /tmp/learn_core.log 2>&1; rc=$?; say "L core rc=$rc" ) &
LPID=$!
( site_wait vllm || say "L: no vllm site"; sleep 30
  say "L vllm start"
  PYTHONPATH=/tmp/site-vllm bash workflow/scripts/offline_gpu_host.sh $M/vllm/steps100-seed3407.json --cores 16 --resources gpu=1 --configfile .carry/ws6_learn_vllm.yaml --config profile=gpu --keep-going --rerun-triggers mtime --nolock > /tmp/learn_vllm.log 2>&1; rc=$?; say "L vllm rc=$rc" ) &
VPID=$!
wait $LPID $VPID
site_wait vllm || say "S: no vllm site"
say "S start"
cd "$1"
EXTRA=/tmp/site-vllm; [ -f /tmp/site-unsloth/.installed ] && EXTRA=$EXTRA:/tmp/site-unsloth
PYTHONPATH=$EXTRA bash workflow/scripts/offline_gpu_host.sh smoke --gpu 0 --workdir /tmp/smoke > /tmp/smoke.log 2>&1
rc=$?; say "S smoke rc=$rc"
say DONE
