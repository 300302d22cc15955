#!/bin/bash
# poll.sh SECONDS [MARK]: wait up to SECONDS for MARK (default DONE) in bg.sh's log, then show where things stand.
# Once bg.sh has said DONE, pack what comes back into $OUT in this same call: the machine is given back 30 s
# after a call returns, and a separate pack call that comes late finds a fresh, empty machine (session 11 lost
# its whole learn case so, one step before its pack call).
end=$((SECONDS + ${1:-60}))
while [ $SECONDS -lt $end ] && ! grep -q ${2:-DONE} /tmp/bg.log 2>/dev/null; do sleep 5; done
cat /tmp/bg.log; tail -3 /tmp/smoke.log 2>/dev/null
grep -h "steps.*done\|Finished job\|Error in rule" /tmp/learn.log 2>/dev/null | tail -5
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
grep -q DONE /tmp/bg.log 2>/dev/null && bash "$(dirname "$0")/pack.sh"
true
