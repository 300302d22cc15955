#!/bin/bash
# install core (stashed in /tmp/wh/core) and pytest; run bg_s7.sh from a private copy in /tmp/rb
bash .carry/install.sh "$PWD" core /tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site-pytest .carry/pytest-wheels/*.whl && echo "pytest ok"
rm -rf /tmp/rb && mkdir /tmp/rb && cp -r Snakefile rules workflow config src envs profiles pyproject.toml tests .carry /tmp/rb/
cd /tmp/rb && (setsid nohup bash .carry/bg_s7.sh /tmp/rb > /tmp/bg7.out 2>&1 < /dev/null &)
sleep 15; cat /tmp/bg.log; nvidia-smi --query-gpu=index,memory.used --format=csv
