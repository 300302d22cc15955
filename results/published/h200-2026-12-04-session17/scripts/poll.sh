#!/bin/bash
# poll.sh SECONDS [MARK]: wait up to SECONDS for MARK (default DONE) in bg.sh's log, then show where things stand.
# Every poll packs what comes back into $OUT: the machine is given back 30 s after a call returns, and a pack
# call that comes late finds a fresh, empty machine (session 11 lost its whole learn case so, one step before its
# pack call); a budget that runs out mid-run keeps the last poll's snapshot.
end=$((SECONDS + ${1:-60}))
while [ $SECONDS -lt $end ] && ! grep -q "${2:-DONE}" /tmp/bg.log 2>/dev/null; do sleep 5; done
cat /tmp/bg.log; tail -3 /tmp/smoke.log 2>/dev/null
grep -h "steps.*done\|Finished job\|Error in rule" /tmp/learn.log 2>/dev/null | tail -5
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
bash "$(dirname "$0")/pack.sh"  # every poll: a budget that runs out before DONE still leaves the last snapshot
true
