#!/bin/bash
# poll.sh SECONDS: wait up to SECONDS for bg.sh to finish, then show where things stand
end=$((SECONDS + ${1:-60}))
while [ $SECONDS -lt $end ] && ! grep -q ${2:-DONE} /tmp/bg.log 2>/dev/null; do sleep 5; done
cat /tmp/bg.log; tail -3 /tmp/smoke.log 2>/dev/null; tail -2 /tmp/gpu_tests.log 2>/dev/null
grep -h "steps.*done\|Finished job\|Error in rule" /tmp/learn.log 2>/dev/null | tail -5
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
