#!/bin/bash
# poll.sh SECONDS [MARK]: wait up to SECONDS for MARK (default DONE) in the plan's log, then show where things
# stand and pack: the machine goes back soon after a call returns, and a budget that runs out keeps the last pack.
# A machine with no plan log is a fresh one: the one that ran the plan went back (idle past the device's release
# time between two calls) and its work is gone. Say so at once instead of waiting out SECONDS of device time on it
# (2026-12-06: 780 s of a 1,800 s budget went to polls of two such machines).
if [ ! -f /tmp/bg.log ]; then
  echo "NO PLAN HERE: this machine is a fresh one (the last went back, its work lost); relaunch or give_back"
  exit 3
fi
# MARK counts only after the last plan's start: a second launch on the same machine appends to bg.log, and the first
# plan's "H rc=" (or DONE) would end the wait at once (2026-12-07). An install's mark (stash.sh writes it before or
# after the plan's start) counts anywhere in the log.
this_plan() { awk '/ plan \(/ {buf = ""} {buf = buf $0 "\n"} END {printf "%s", buf}' /tmp/bg.log 2>/dev/null; }
mark=${2:-DONE}
seen() { if [[ $mark == install* ]]; then grep -q "$mark" /tmp/bg.log; else this_plan | grep -q "$mark"; fi; }
end=$((SECONDS + ${1:-60}))
while [ $SECONDS -lt $end ] && ! seen; do sleep 5; done
cat /tmp/bg.log; tail -3 /tmp/smoke.log 2>/dev/null; tail -2 /tmp/pytest_gpu.log 2>/dev/null
grep -h "Finished job\|Error in rule" /tmp/headline.log /tmp/prefill.log 2>/dev/null | tail -4
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
bash "$(dirname "$0")/pack.sh"
true
