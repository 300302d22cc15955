#!/bin/bash
# Install core (stashed in /tmp/wh/core) into /tmp/site; run bg.sh from a private copy in /tmp/rb.
bash .carry/install.sh "$PWD" core /tmp/site; tail -2 /tmp/install_core.log
rm -rf /tmp/rb && mkdir /tmp/rb && cp -r Snakefile rules workflow config src envs profiles pyproject.toml tests .carry /tmp/rb/
cd /tmp/rb && (setsid nohup bash .carry/bg.sh > /tmp/bg.out 2>&1 < /dev/null &)
sleep 5; cat /tmp/bg.log; nvidia-smi --query-gpu=index,name,memory.used --format=csv; nproc; python3 -c "import torch;print(torch.__version__)"
