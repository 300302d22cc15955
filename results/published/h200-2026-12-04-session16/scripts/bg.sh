#!/bin/bash
# Session 16's second lease, one step after another, each alone on the GPU. The checkout is main + the split-K
# decode GEMMs (engine/skinny_gemm.py, tuned by the autotune pass at B = 8); .carry/main/ is main's src and config.
#   V  the change's GPU tests (and the engine's): on failure the rest runs main's code, and no smoke run
#   S  the smoke run on the change; on failure the rows after it run main's code
#   M  the model directories
#   Q  Qwen3-4B: autotune (B = 8, 64, 256), flex and vLLM at B = 8 and 64, the decode profile (B = 8, 64)
#   N  the decode profile at B = 8 again, replaying the same autotune record without its GEMM tiles
#   W  issue 21: Llama-3.2-3B, then Gemma-4 E2B, flex and vLLM, the sweep at B = 16, 32, 128, 256
#   X  the same two models at B = 8 and 64 again, so that each model's sweep is one run
#   Y  the rest of Qwen3-4B's sweep, flex and vLLM without LoRA
LOG=/tmp/bg.log
say() { echo "$(date -u +%H:%M:%S) $*" >> $LOG; }
export WHEELS=
rm -rf /tmp/w && mkdir -p /tmp/w && cp -r Snakefile rules workflow config src envs profiles pyproject.toml tests .carry /tmp/w/
while ! { [ -f /tmp/site-vllm/.installed ] && [ -f /tmp/site-unsloth/.installed ]; }; do sleep 2; done
cd /tmp/w
main_code() { say "switching to main's code: $1"; rm -rf src config && cp -r .carry/main/src .carry/main/config .; }
say "V start"
# (test_gemm_bench, test_engine_gpu and test_step_profile passed on this code at 18:16, /tmp/pytest_gpu.log; only
# test_skinny_gemm's engine test failed, for building an unfused engine: fixed)
PYTHONPATH=/tmp/w/src:/tmp/site timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_skinny_gemm.py \
  > /tmp/pytest_gpu2.log 2>&1
rc=$?; say "V rc=$rc"
if [ $rc = 0 ]; then
  say "S start"
  (cd /tmp/rb && PYTHONPATH=/tmp/site-vllm:/tmp/site-unsloth timeout 900 bash workflow/scripts/offline_gpu_host.sh smoke \
    --gpu 0 --workdir /tmp/smoke > /tmp/smoke.log 2>&1); rc=$?; say "S rc=$rc"
  [ $rc = 0 ] || main_code "smoke failed"
else
  main_code "GPU tests failed"
fi
G=results/generate; L=llama-3.2-3b; E=gemma-4-e2b; Q=qwen3-4b
sm() {
  local name=$1; shift; say "$name start"
  PYTHONPATH=/tmp/site-vllm bash workflow/scripts/offline_gpu_host.sh "$@" --cores 16 --resources gpu=1 \
    --config profile=gpu --keep-going > /tmp/sm_$name.log 2>&1; say "$name rc=$?"
}
sm M results/assets/models/{$Q,$L,$E}
sm Q results/autotune/$Q/decode_opts.json $G/$Q/{flex/graphs,vllm/default}/{sweep/bs8,greedy/bs64}.json \
  results/decode_profile/$Q/decode_step.json
say "N start"
PYTHONPATH=/tmp/site:/tmp/w/src python3 - <<'PY' >> $LOG 2>&1
import json, pathlib
rec = json.loads(pathlib.Path("results/autotune/qwen3-4b/decode_opts.json").read_text())
for r in rec["by_batch"].values():
    r["best"].pop("GEMM_TILES", None)
out = pathlib.Path("results/autotune_notiles/qwen3-4b/decode_opts.json")
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps(rec))
print({b: r["best"] for b, r in rec["by_batch"].items()})
PY
PYTHONPATH=/tmp/site:/tmp/w/src timeout 300 python3 -m rollout_bench decode-profile --model $Q \
  --model-dir results/assets/models/$Q --batch-sizes 8 \
  --workload '{"prompt_tokens": [128, 256], "max_new_tokens": 512, "dtype": "bfloat16"}' \
  --autotune results/autotune_notiles/$Q/decode_opts.json --out results/decode_profile_notiles/$Q/decode_step.json \
  > /tmp/prof_notiles.log 2>&1; say "N rc=$?"
sm W $G/$L/{flex/graphs,vllm/default}/sweep/bs{16,32,128,256}.json
sm W2 $G/$E/{flex/graphs,vllm/default}/sweep/bs{16,32,128,256}.json
sm X $G/{$L,$E}/{flex/graphs,vllm/default}/sweep/bs8.json $G/{$L,$E}/{flex/graphs,vllm/default}/greedy/bs64.json
sm Y $G/$Q/{flex/graphs,vllm/default}/sweep/bs{16,32,128,256}.json
say DONE
