#!/bin/bash
# replay the step-45 dump under the SDPA variants, from a copy of the carried src (the checkout is rewritten each call)
rm -rf /tmp/r2 && mkdir /tmp/r2 && cp -r src /tmp/r2/
cd /tmp/w
M=results/train/qwen3-small-warm
WL=$(python3 -c "import json;print(json.dumps(json.load(open('$M/flex/steps100-seed3407.json'))['workload']))")
D=$(ls /tmp/nan/*.pt | head -1)
PYTHONPATH=/tmp/site:/tmp/r2/src python3 -m rollout_bench.diagnostics.nan_replay $D --backend flex --workload "$WL" --model-dir results/assets/models/qwen3-small-warm --adapter results/assets/lora/qwen3-small-warm-r32 --dataset results/assets/dataset-learnable --variants as_run,sdpa_efficient,sdpa_no_cudnn,sdpa_math --out /tmp/nan_replay2.json > /tmp/nan_replay2.log 2>&1
echo "$(date -u +%H:%M:%S) R2 rc=$?" >> /tmp/bg.log
