#!/bin/bash
# One call: install core (bare wheels in .lean), the learner's warm start, then the learn case, then pack.
T0=$SECONDS
LOG=/tmp/bg.log; say() { echo "$(date -u +%H:%M:%S) +$((SECONDS-T0))s $*" | tee -a $LOG; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .lean/*.whl && touch /tmp/site/.installed
say "core installed"
export WHEELS= SITE=/tmp/site
mkdir -p /tmp/w && cp -r Snakefile rules workflow config src envs profiles pyproject.toml .carry /tmp/w/ && cd /tmp/w
say "W start"
timeout 400 bash workflow/scripts/offline_gpu_host.sh results/assets/models/qwen3-small-warm --cores 16 --resources gpu=8 \
    --configfile .carry/session.yaml --config profile=gpu > /tmp/w_small.log 2>&1; say "W rc=$?"
left=$((560 - (SECONDS - T0)))
say "L start, ${left}s left"
timeout $left bash workflow/scripts/offline_gpu_host.sh results/tables/train.md \
    --cores 16 --resources gpu=8 --configfile .carry/session.yaml --config profile=gpu --keep-going \
    > /tmp/learn.log 2>&1; say "L rc=$?"
bash .carry/pack.sh
say DONE
