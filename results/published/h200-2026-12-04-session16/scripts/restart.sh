#!/bin/bash
# Stop the running bg.sh and what it started, keep its log and results aside, start bg.sh again from this checkout.
pkill -f "bash .carry/bg.sh"; pkill -f snakemake; pkill -f rollout_bench; sleep 3
mv /tmp/bg.log /tmp/bg_first.log; [ -d /tmp/w ] && mv /tmp/w /tmp/w_first
rm -rf /tmp/rb && mkdir /tmp/rb && cp -r Snakefile rules workflow config src envs profiles pyproject.toml tests .carry /tmp/rb/
cd /tmp/rb && (setsid nohup bash .carry/bg.sh > /tmp/bg.out 2>&1 < /dev/null &)
sleep 2; cat /tmp/bg_first.log; echo ---; cat /tmp/bg.log; nvidia-smi --query-gpu=memory.used --format=csv,noheader
