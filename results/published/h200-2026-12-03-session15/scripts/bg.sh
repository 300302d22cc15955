#!/bin/bash
# Session 15's plan. Before the first call, in /work/main (on decode-kvwrite, rebased on main):
#   rm -rf .carry/main .carry/split && mkdir -p .carry/main .carry/split
#   git archive main src | tar x -C .carry/main; git archive decode-split src | tar x -C .carry/split
#   cp -r results/published/h200-2026-12-03-session14/runs/autotune .carry/main/autotune   (main's own picks, H200)
# S: the smoke run on decode-kvwrite (it changes every flex decode and prefill step), alone on the GPU.
# A/B/C: the decode profile with main's code (A), decode-split's (B) and decode-kvwrite's (C), each replaying the
#   same options (main's autotune picks of session 14), on the same host and models: what each change buys.
#   A and B on the 4B only (the issue's model); C on all three (Gemma-4's sliding window takes the new layout too).
# Then, one Snakemake invocation at a time on decode-kvwrite: the 4B pair at B = 64 and 8 (flex and vLLM),
# Gemma-4 E2B's remaining backends (issue 21 deliver 2), the families with prompts of their own, the sweep.
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
sm M results/assets/models/{$Q,$L,$E}
WL='{"prompt_tokens": [128, 256], "max_new_tokens": 512, "dtype": "bfloat16"}'
prof() {  # prof CODE SRC MODEL
  say "$1 $3 start"
  PYTHONPATH=$2:/tmp/site python3 -m rollout_bench decode-profile --model $3 \
    --model-dir results/assets/models/$3 --workload "$WL" --batch-sizes 8,64 \
    --autotune .carry/main/autotune/$3/decode_opts.json \
    --out results/decode_profile_$1/$3/decode_step.json > /tmp/prof_$1_$3.log 2>&1; say "$1 $3 rc=$?"
}
prof main /tmp/w/.carry/main/src $Q; prof split /tmp/w/.carry/split/src $Q; prof kvwrite /tmp/w/src $Q
prof kvwrite /tmp/w/src $L; prof kvwrite /tmp/w/src $E
grep -q "S rc=0" $LOG || { say "smoke failed: stopping before the rows"; say DONE; exit 0; }
sm Q $G/$Q/{flex/graphs,vllm/default}/{greedy/bs64,sweep/bs8}.json
sm E $G/$E/{hf_generate/default,transformers_cb/paged_sdpa,cb_sync/eager}/greedy/bs64.json $G/$E/vllm/default/lora/bs64.json
sm F $G/{$L,$E}/{flex/graphs,vllm/default}/greedy/bs64.json $G/$L/{flex/graphs,vllm/default}/{lora/bs64,sweep/bs8}.json
sm W $G/{$Q,$L,$E}/{flex/graphs,vllm/default}/sweep/bs{16,32,128,256}.json
say DONE
