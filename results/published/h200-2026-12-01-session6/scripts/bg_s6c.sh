#!/bin/bash
# Replaces bg_s6.sh after its flex learn run: the core run took all 16 CPUs per train job (GPU_JOB_THREADS =
# cores / gpu budget), so its hf_generate seeds would have run one after another. Here: the three reference
# seeds at once (--set-threads train=4), then, once vLLM's learn run has ended, the smoke run alone.
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
export WHEELS=
cd /tmp/w/small
M=results/train/qwen3-small-warm
say "L3 start"
bash workflow/scripts/offline_gpu_host.sh $M/hf_generate/steps100-seed3407.json $M/hf_generate/steps100-seed3408.json $M/hf_generate/steps100-seed3409.json --cores 16 --set-threads train=4 --resources gpu=8 --configfile .carry/ws6_learn_short.yaml --config profile=gpu --keep-going --rerun-triggers mtime --rerun-incomplete --nolock > /tmp/learn_ref.log 2>&1
rc=$?; say "L3 ref rc=$rc"
while pgrep -f "rollout_bench train --backend vllm" > /dev/null; do sleep 5; done
say "S start"
cd /tmp/rb
PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth bash workflow/scripts/offline_gpu_host.sh smoke --gpu 0 --workdir /tmp/smoke > /tmp/smoke.log 2>&1
rc=$?; say "S smoke rc=$rc"
say DONE
