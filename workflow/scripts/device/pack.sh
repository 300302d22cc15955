#!/bin/bash
# Logs and every result but model weights and caches, as one tar in $OUT.
T=/tmp/pack && rm -rf $T && mkdir -p $T
cp /tmp/bg.log /tmp/bg.out /tmp/*.log /tmp/headline_wall_s /tmp/prefill_wall_s $T/ 2>/dev/null
for d in /tmp/w /tmp/p /tmp/smoke; do
  [ -d $d/results ] && mkdir -p $T$d && (cd $d && tar cf - --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' \
    --exclude='results/.gpu_locks*' --exclude='results/.cache' --exclude='results/assets' results) | tar xf - -C $T$d
done
nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv > $T/nvsmi.txt 2>&1
ps aux | grep "[s]nakemake\|[p]ytest\|rollout_bench" | cut -c1-200 > $T/running.txt
tar czf "$OUT/pack.tgz" -C /tmp pack && ls -la "$OUT"
