#!/bin/bash
# launch.sh PLAN [ARGS...]: a private copy of the checkout in /tmp/rb (a call re-syncs the checkout; a file read mid-copy would
# be missing), then PLAN (a script of this kit) there, in the background, in its own session.
plan=${1:?plan script}
rm -rf /tmp/rb && mkdir -p /tmp/rb
cp -r Snakefile rules workflow config src envs profiles pyproject.toml tests /tmp/rb/
[ -d .carry ] && cp -r .carry /tmp/rb/
cd /tmp/rb && (setsid nohup bash "workflow/scripts/device/$plan" "${@:2}" > /tmp/bg.out 2>&1 < /dev/null &)
sleep 2; cat /tmp/bg.log 2>/dev/null
nvidia-smi --query-gpu=index,name,uuid,memory.used,driver_version --format=csv; nproc; free -g | head -2
python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__)"
