#!/bin/bash
# the smoke's GRPO vLLM job by hand, in variants, on the GPU at once. Round 1 (07:16) ran
#   run A 16 "" & run B 16 ', "attention_backend": "TRITON_ATTN"' & run C 64 "" &
# without MASTER_PORT (A and C lost the rendezvous port to B: EADDRINUSE); round 2 (07:17) is this file.
cd /tmp/smoke && export PYTHONPATH=/tmp/site:/tmp/rb/src:/tmp/site-vllm:/tmp/site-unsloth PYTHONUNBUFFERED=1 PATH=/tmp/rb-bin:$PATH
W='{"data_seed": 3407, "dataset": "synthetic", "device": "cuda", "dtype": "bfloat16", "frozen": false, "ignore_eos": false, "importance_sampling": true, "is_clip_max": 3.0, "is_clip_min": null, "is_mode": "token_truncate", "learning_rate": 5e-06, "lora_alpha": 64, "lora_rank": 32, "max_new_tokens": NEW, "model": "qwen3-tiny-hd64", "num_generations": 4, "optim": "adamw_torch", "options": {"engine_kwargs": {"kv_cache_memory_bytes": 1073741824EXTRA}, "gpu_memory_utilization": 0.1}, "per_device_train_batch_size": 4, "prompts_per_step": 1, "sampling": {"min_p": 0.5, "seed": 3407, "temperature": 0.1, "top_k": 5, "top_p": 0.97}, "sampling_preset": "equivalence", "seed": 3407}'
run() { export MASTER_PORT=$4; local wl=${W/NEW/$2}; wl=${wl/EXTRA/$3}
  timeout 240 python3 -m rollout_bench train --backend vllm --model qwen3-tiny-hd64 --workload "$wl" --model-dir results/assets/models/qwen3-tiny-hd64 --adapter results/assets/lora/qwen3-tiny-hd64-r32 --dataset results/assets/dataset --steps 2 --out /tmp/vx_$1.json > /tmp/vx_$1.log 2>&1; echo "$1 rc=$?"; }
run A 16 "" 29611 & run C 64 "" 29622 & run D 512 "" 29633 &
wait
for v in A C D; do echo "== $v"; grep -v "Loading\|^\s*$\|Warning\|warn" /tmp/vx_$v.log | tail -4 | cut -c1-400; done
mkdir -p /tmp/pack2 && cp /tmp/vx_* /tmp/pack2/ && tar czf $OUT/vx.tgz -C /tmp pack2
