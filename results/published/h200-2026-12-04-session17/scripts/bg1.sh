#!/bin/bash
# Session 17, one lease. The checkout is main + GRPO's flex rollout replaying the autotune record.
#   M  the model directories of Llama-3.2-3B and Gemma-4 E2B (CPU work: while the wheelhouses are carried)
#   S  the smoke run on this checkout; beside it (nothing timed there) Gemma-4's vLLM jobs, which vLLM 0.26 skips
#   L  issue 21: Llama-3.2-3B, its autotune pass, flex and vLLM over the rest of the sweep (B = 16, 32, 128, 256)
#   E  Gemma-4 E2B, its autotune pass, flex over the same sizes
# L and E each alone on the GPU, one job at a time. The autotune pass tunes B = 64 and 256 only (.carry/at.yaml):
# the only entries a job of B >= 16 replays (the B = 8 entry and its GEMM tiles serve B <= 8), to fit the budget.
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
rm -rf /tmp/w && mkdir -p /tmp/w && cp -r Snakefile rules workflow config src envs profiles pyproject.toml tests .carry /tmp/w/
cd /tmp/w
G=results/generate; L=llama-3.2-3b; E=gemma-4-e2b
sm() {
  local name=$1; shift; say "$name start"
  PYTHONPATH=/tmp/site-vllm bash workflow/scripts/offline_gpu_host.sh "$@" --cores 16 --resources gpu=1 \
    --config profile=gpu --keep-going --configfile .carry/at.yaml > /tmp/sm_$name.log 2>&1; say "$name rc=$?"
}
sm M results/assets/models/{$L,$E}
while ! { [ -f /tmp/site-vllm/.installed ] && [ -f /tmp/site-unsloth/.installed ]; }; do sleep 2; done
say "S start"
(cd /tmp/rb && PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth timeout 900 bash workflow/scripts/offline_gpu_host.sh smoke \
  --gpu 0 --workdir /tmp/smoke > /tmp/smoke.log 2>&1; echo "$(date -u +%H:%M:%S) S rc=$?" >> $LOG) &
sm V $G/$E/vllm/default/sweep/bs{16,32,128,256}.json
wait
sm L $G/$L/{flex/graphs,vllm/default}/sweep/bs{16,32,128,256}.json
sm E $G/$E/flex/graphs/sweep/bs{16,32,128,256}.json
say DONE
