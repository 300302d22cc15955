#!/bin/bash
# Install core (stashed in /tmp/wh/core) into /tmp/site; run bg.sh from a private copy in /tmp/rb.
bash .carry/install.sh "$PWD" core /tmp/site; tail -2 /tmp/install_core.log
rm -rf /tmp/rb && mkdir /tmp/rb && cp -r Snakefile rules workflow config src envs profiles pyproject.toml tests .carry /tmp/rb/
cd /tmp/rb && (setsid nohup bash .carry/bg.sh > /tmp/bg.out 2>&1 < /dev/null &)
sleep 3; cat /tmp/bg.log; nvidia-smi --query-gpu=index,name,memory.used,driver_version --format=csv; nproc; free -g | head -2
python3 -c "import torch, transformers, peft, triton; print(torch.__version__, transformers.__version__, peft.__version__, triton.__version__)"
