#!/bin/bash
# Next session (prepared 2026-12-01): on branch nan-guard checked out in /work/main. From a copy in /tmp/rb, core site
# in /tmp/site (launch like launch_s6.sh). One GPU:
#  1. the 27M learner's warm start (ws6_small.yaml), then
#  2. flex seed 3407 of the learn case with ROLLOUT_BENCH_NAN_DUMP: it met a NaN gradient at step 28 on 2026-12-01
#     (~20 s of training); then the replay of the dump under the kernel variants;
#  3. the smoke run (vllm + unsloth sites), alone on the GPU.
cd "$1"
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
export WHEELS=
cp -r Snakefile rules workflow config src envs profiles pyproject.toml .carry /tmp/w/ 2>/dev/null || { mkdir -p /tmp/w && cp -r Snakefile rules workflow config src envs profiles pyproject.toml .carry /tmp/w/; }
cd /tmp/w
say "W start"
bash workflow/scripts/offline_gpu_host.sh results/assets/models/qwen3-small-warm --cores 8 --resources gpu=8 --configfile .carry/ws6_small.yaml --config profile=gpu > /tmp/w_small.log 2>&1
rc=$?; say "W rc=$rc"
M=results/train/qwen3-small-warm
export ROLLOUT_BENCH_NAN_DUMP=/tmp/nan
bash workflow/scripts/offline_gpu_host.sh $M/flex/steps100-seed3407.json --cores 16 --resources gpu=8 --configfile .carry/ws6_learn.yaml --config profile=gpu --keep-going > /tmp/learn_flex.log 2>&1
rc=$?; say "L flex rc=$rc"
unset ROLLOUT_BENCH_NAN_DUMP
D=$(ls /tmp/nan/*.pt 2>/dev/null | head -1)
if [ -n "$D" ]; then
  WL=$(PYTHONPATH=src python3 -c "import json;print(json.dumps(json.load(open('$M/flex/steps100-seed3407.json'))['workload']))")
  PYTHONPATH=/tmp/site:src python3 -m rollout_bench.diagnostics.nan_replay $D --backend flex --workload "$WL" --model-dir results/assets/models/qwen3-small-warm --adapter results/assets/lora/qwen3-small-warm-r32 --dataset results/assets/dataset-learnable --out /tmp/nan_replay.json > /tmp/nan_replay.log 2>&1
  rc=$?; say "R replay rc=$rc"
fi
cd "$1"
say "S start"
PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth bash workflow/scripts/offline_gpu_host.sh smoke --gpu 0 --workdir /tmp/smoke > /tmp/smoke.log 2>&1
rc=$?; say "S smoke rc=$rc"
say DONE
