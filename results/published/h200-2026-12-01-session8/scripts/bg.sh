#!/bin/bash
# From /tmp/rb (a copy of the checkout), core in /tmp/site. One GPU:
#   the learner's warm start (/tmp/w) | the GPU tests | the smoke run once vllm + unsloth are installed;
#   then, on the warm start, the learn case (all five backends, three reference seeds, band, compares, tables)
#   and two flex learning-rate probes beside it (seed 3407, lr 2e-4 and 1e-3).
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
export WHEELS=  # core is installed (/tmp/site/.installed); vllm and unsloth go on PYTHONPATH below
R=/tmp/rb
mkdir -p /tmp/w && cp -r Snakefile rules workflow config src envs profiles pyproject.toml .carry /tmp/w/
cd /tmp/w
say "W start"
( bash workflow/scripts/offline_gpu_host.sh results/assets/models/qwen3-small-warm --cores 8 --resources gpu=8 \
    --configfile .carry/session.yaml --config profile=gpu > /tmp/w_small.log 2>&1; say "W rc=$?" ) &
WPID=$!
( cd $R && say "T start" && PYTHONPATH=/tmp/site:$R/src timeout 900 python3 -m pytest -m gpu tests/ -q -p no:cacheprovider \
    -o addopts="" -rs > /tmp/gpu_tests.log 2>&1; say "T rc=$?" ) &
installed() { [ -f /tmp/site-vllm/.installed ] && [ -f /tmp/site-unsloth/.installed ]; }
( while ! installed; do sleep 3; done; cd $R && say "S start" && \
  PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth bash workflow/scripts/offline_gpu_host.sh smoke --gpu 0 --workdir /tmp/smoke \
    > /tmp/smoke.log 2>&1; say "S rc=$?" ) &
wait $WPID
while ! installed; do sleep 3; done
[ -d results/assets/models/qwen3-small-warm ] || { say "no warm model: no learn case"; wait; say DONE; exit; }
say "L start"
( PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth bash workflow/scripts/offline_gpu_host.sh results/tables/train.md \
    --cores 16 --resources gpu=8 --configfile .carry/session.yaml --config profile=gpu --keep-going \
    > /tmp/learn.log 2>&1; say "L rc=$?" ) &
LPID=$!
sleep 20  # the learn case's assets (adapter) first
for lr in 2e-4 1e-3; do
  ( WL=$(PYTHONPATH=/tmp/site:src python3 .carry/probe_workload.py $lr) && \
    PYTHONPATH=/tmp/site:src python3 -m rollout_bench train --backend flex --model qwen3-small-warm --workload "$WL" \
      --model-dir results/assets/models/qwen3-small-warm --adapter results/assets/lora/qwen3-small-warm-r32 \
      --dataset results/assets/dataset-learnable --steps 100 --max-wall-s 450 --out /tmp/probe_flex_lr$lr.json \
      > /tmp/probe_flex_lr$lr.log 2>&1; say "P lr=$lr rc=$?" ) &
done
wait
say DONE
