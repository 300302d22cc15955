#!/bin/bash
# One call: install core (bare wheels in .lean), then the smoke run alone (vllm and unsloth not installed), then pack.
T0=$SECONDS
LOG=/tmp/bg.log; say() { echo "$(date -u +%H:%M:%S) +$((SECONDS-T0))s $*" | tee -a $LOG; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .lean/*.whl && touch /tmp/site/.installed
say "core installed; S start"
export WHEELS= SITE=/tmp/site
timeout 410 bash workflow/scripts/offline_gpu_host.sh smoke --gpu 0 --workdir /tmp/smoke > /tmp/smoke.log 2>&1; say "S rc=$?"
tail -45 /tmp/smoke.log
bash .carry/pack.sh
say DONE
