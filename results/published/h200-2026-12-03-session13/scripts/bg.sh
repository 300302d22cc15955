#!/bin/bash
# Session 13 (one nvidia-h200): issue 21's rows, flex and vLLM on Llama-3.2-3B and Gemma-4 E2B (random weights, the gpu
# profile as committed), one Snakemake invocation after another in priority order, each job alone on the GPU
# (gpu=1, jobs_per_gpu 1): the budget may end at any step, and every poll packs what is done. Then the decode profile
# of the three models (issue 19's 4B among them), the rest of the sweep, the 4B's greedy pair as the run's anchor.
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
export WHEELS=  # core is installed (/tmp/site/.installed); vllm goes on PYTHONPATH once installed
rm -rf /tmp/w && mkdir -p /tmp/w && cp -r Snakefile rules workflow config src envs profiles pyproject.toml .carry /tmp/w/
cd /tmp/w
G=results/generate; L=llama-3.2-3b; E=gemma-4-e2b
sm() {  # sm NAME TARGET...
  local name=$1; shift; say "$name start"
  PYTHONPATH=/tmp/site-vllm bash workflow/scripts/offline_gpu_host.sh "$@" --cores 16 --resources gpu=1 \
    --config profile=gpu --keep-going > /tmp/sm_$name.log 2>&1; say "$name rc=$?"
}
vllm_ready() { while [ ! -f /tmp/site-vllm/.installed ]; do sleep 2; done; }
sm F1 $G/$L/flex/graphs/greedy/bs64.json $G/$E/flex/graphs/greedy/bs64.json
vllm_ready
sm V1 $G/$L/vllm/default/greedy/bs64.json $G/$E/vllm/default/greedy/bs64.json
sm F2 $G/{$L,$E}/flex/graphs/lora/bs64.json $G/{$L,$E}/flex/graphs/sweep/bs8.json
sm V2 $G/{$L,$E}/vllm/default/lora/bs64.json $G/{$L,$E}/vllm/default/sweep/bs8.json
sm D results/decode_profile/{qwen3-4b,$L,$E}/decode_step.json
sm S256 $G/{$L,$E}/{flex/graphs,vllm/default}/sweep/bs256.json
sm Q $G/qwen3-4b/{flex/graphs,vllm/default}/greedy/bs64.json
sm S $G/{$L,$E}/{flex/graphs,vllm/default}/sweep/bs{16,32,128}.json
say DONE
