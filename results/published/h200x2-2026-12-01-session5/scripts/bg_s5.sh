#!/bin/bash
# Session of 2026-12-01 ~11:00 UTC, nvidia-h200-x2, in the background from /tmp/rb (core site /tmp/site):
#  GPU1: W: the tiny warm start at the cpu profile's 250 steps (smoke profile), the 27M learner's warm start at
#        lr 1e-3 (config) and 3e-3, each from its own copy; then S: the smoke run with the vllm and unsloth sites.
#  GPU0: GPU pytest (engine, gemma4, smem), then F: the Gemma-4 E2B / Llama-3.2-3B flex rows, then their vLLM rows.
cd "$1"
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
export WHEELS=
copy() { rm -rf $1 && mkdir -p $1 && cp -r Snakefile rules workflow config src envs profiles pyproject.toml .carry $1/; }
site_wait() { for i in $(seq 1 120); do [ -f /tmp/site-$1/.installed ] && return 0; sleep 5; done; return 1; }
say "start"
for v in tiny250 small small_lr3; do copy /tmp/w/$v; done
( cd /tmp/w/tiny250 && CUDA_VISIBLE_DEVICES=1 bash workflow/scripts/offline_gpu_host.sh results/assets/models/qwen3-tiny-warm --cores 4 --resources gpu=1 --configfile .carry/ws_tiny250.yaml --config profile=smoke > /tmp/w_tiny250.log 2>&1; echo "$(date -u +%H:%M:%S) W tiny250 rc=$?" >> $LOG ) &
for v in small small_lr3; do
  ( cd /tmp/w/$v && CUDA_VISIBLE_DEVICES=1 bash workflow/scripts/offline_gpu_host.sh results/assets/models/qwen3-small-warm --cores 4 --resources gpu=1 --configfile .carry/ws_$v.yaml --config profile=gpu > /tmp/w_$v.log 2>&1; echo "$(date -u +%H:%M:%S) W $v rc=$?" >> $LOG ) &
done
(
  site_wait vllm && site_wait unsloth || echo "$(date -u +%H:%M:%S) S: a site is missing" >> $LOG
  say "S start"
  PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth bash workflow/scripts/offline_gpu_host.sh smoke --gpu 1 --workdir /tmp/smoke > /tmp/smoke.log 2>&1
  say "S smoke rc=$?"
) &
CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site:/tmp/site-pytest:src python3 -m pytest -q -p no:cacheprovider tests/test_engine_gpu.py tests/test_engine_gemma4.py tests/test_engine_smem.py > /tmp/pytest_gpu.log 2>&1
say "pytest rc=$?"
copy /tmp/fam
cd /tmp/fam
F="--cores 8 --resources gpu=1 --configfile .carry/fam.yaml --config profile=gpu --keep-going"
T=""; V=""
for m in llama-3.2-3b gemma-4-e2b; do
  for c in greedy/bs64 lora/bs64 sweep/bs8; do T="$T results/generate/$m/flex/graphs/$c.json"; V="$V results/generate/$m/vllm/default/$c.json"; done
done
CUDA_VISIBLE_DEVICES=0 bash /tmp/fam/workflow/scripts/offline_gpu_host.sh $T $F > /tmp/fam_flex.log 2>&1
say "F flex rc=$?"
site_wait vllm || say "F: no vllm site"
CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site-vllm bash /tmp/fam/workflow/scripts/offline_gpu_host.sh $V $F > /tmp/fam_vllm.log 2>&1
say "F vllm rc=$?"
wait
say DONE
