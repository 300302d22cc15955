#!/bin/bash
# Next session's plan (written in session 13; copy over bg.sh): check out fresh-rounds in the synced tree first.
# S: the smoke run (fresh-rounds touches generation.py: every GPU job's harness), alone on the GPU; then, one job at a
# time, the rows session 13 did not reach: the 4B's greedy pair (this run's anchor, with prompts of their own per round),
# the decode profiles (issue 19's 4B breakdown), Gemma-4 E2B on the other backends (issue 21 deliver 2), the
# families' vLLM skip records and the rest of their sweep.
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
export WHEELS=
R=/tmp/rb
rm -rf /tmp/w && mkdir -p /tmp/w && cp -r Snakefile rules workflow config src envs profiles pyproject.toml .carry /tmp/w/
installed() { [ -f /tmp/site-vllm/.installed ] && [ -f /tmp/site-unsloth/.installed ]; }
while ! installed; do sleep 2; done
say "S start"
(cd $R && PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth timeout 900 bash workflow/scripts/offline_gpu_host.sh smoke --gpu 0 \
  --workdir /tmp/smoke > /tmp/smoke.log 2>&1); say "S rc=$?"
cd /tmp/w
G=results/generate; L=llama-3.2-3b; E=gemma-4-e2b; Q=qwen3-4b
sm() {
  local name=$1; shift; say "$name start"
  PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth bash workflow/scripts/offline_gpu_host.sh "$@" --cores 16 --resources gpu=1 \
    --config profile=gpu --keep-going > /tmp/sm_$name.log 2>&1; say "$name rc=$?"
}
sm Q $G/$Q/{flex/graphs,vllm/default}/greedy/bs64.json
sm D results/decode_profile/{$Q,$L,$E}/decode_step.json
sm E $G/$E/{hf_generate/default,hf_static/default,transformers_cb/paged_sdpa,cb_sync/eager,unsloth/default}/greedy/bs64.json \
     $G/$E/vllm/default/{lora/bs64,sweep/bs8}.json
sm F $G/{$L,$E}/{flex/graphs,vllm/default}/greedy/bs64.json $G/$L/{flex/graphs,vllm/default}/{lora/bs64,sweep/bs8}.json
sm S256 $G/{$L,$E}/{flex/graphs,vllm/default}/sweep/bs256.json
sm S $G/{$L,$E}/{flex/graphs,vllm/default}/sweep/bs{16,32,128}.json
say DONE
