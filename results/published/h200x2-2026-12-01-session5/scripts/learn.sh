#!/bin/bash
# the GRPO learn case on the 27M learner's warm start, from /tmp/w/small (its assets), all backends at once on GPU1
cp .carry/ws_learn.yaml /tmp/w/small/.carry/
cd /tmp/w/small
LOG=/tmp/bg.log; say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
export WHEELS=
M=results/train/qwen3-small-warm
C="--cores 16 --resources gpu=1 --configfile .carry/ws_learn.yaml --config profile=gpu --keep-going --rerun-triggers mtime"
say "L start"
( CUDA_VISIBLE_DEVICES=1 bash workflow/scripts/offline_gpu_host.sh $M/hf_generate/steps40-seed3407.json $M/hf_generate/steps40-seed3408.json $M/hf_generate/steps40-seed3409.json $M/flex/steps40-seed3407.json $M/transformers_cb/steps40-seed3407.json $C > /tmp/learn_core.log 2>&1; echo "$(date -u +%H:%M:%S) L core rc=$?" >> $LOG ) &
sleep 20
for g in vllm unsloth; do
  ( CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site-$g bash workflow/scripts/offline_gpu_host.sh $M/$g/steps40-seed3407.json $C --nolock > /tmp/learn_$g.log 2>&1; echo "$(date -u +%H:%M:%S) L $g rc=$?" >> $LOG ) &
done
wait
