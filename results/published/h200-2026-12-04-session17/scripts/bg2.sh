#!/bin/bash
# Session 17, lease 2 (a fresh machine: lease 1 went back with Llama's flex sweep half done, bg1.sh). Core only.
#   M  Gemma-4 E2B's model directory
#   E  Gemma-4 E2B: its autotune pass (B = 64, 256: .carry/at.yaml) and flex at B = 32, 128, 256, then 16
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
rm -rf /tmp/w && mkdir -p /tmp/w && cp -r Snakefile rules workflow config src envs profiles pyproject.toml tests .carry /tmp/w/
cd /tmp/w
G=results/generate; E=gemma-4-e2b
sm() {
  local name=$1; shift; say "$name start"
  bash workflow/scripts/offline_gpu_host.sh "$@" --cores 16 --resources gpu=1 \
    --config profile=gpu --keep-going --configfile .carry/at.yaml > /tmp/sm_$name.log 2>&1; say "$name rc=$?"
}
sm M results/assets/models/$E
sm E $G/$E/flex/graphs/sweep/bs{32,128,256}.json
sm E16 $G/$E/flex/graphs/sweep/bs16.json
say DONE
