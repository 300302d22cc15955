#!/bin/bash
# stash.sh GROUP/BATCH [GROUP/BATCH ...] [install GROUP ...]: copy carried batches (and their manifests) to
# /tmp/wh/GROUP; `install GROUP` then installs that group into /tmp/site-GROUP in the background, from a copy of
# src (each call rewrites the synced checkout).
mode=stash
kit=$(dirname "$0")
for a in "$@"; do
  if [ "$a" = install ]; then mode=install; continue; fi
  if [ $mode = stash ]; then
    g=${a%%/*}; mkdir -p /tmp/wh/$g && cp -r .wheelhouse/$a /tmp/wh/$g/ && cp .wheelhouse/$g/manifest.json /tmp/wh/$g/
  else
    rm -rf /tmp/inst-$a && mkdir /tmp/inst-$a && cp -r src "$kit" /tmp/inst-$a/
    # fa4: nvidia-cutlass-dsl's .pth must work from PYTHONPATH (h200-2026-12-06-prefill-fa4: No module named 'cutlass')
    pth=""; [ "$a" = fa4 ] && pth=--pth
    (cd /tmp/inst-$a && setsid nohup bash -c "PYTHONPATH=src python3 -m rollout_bench.host.wheelhouse install /tmp/wh/$a --target /tmp/site-$a $pth > /tmp/install_$a.log 2>&1 && touch /tmp/site-$a/.installed; echo \"\$(date -u +%H:%M:%S) install $a rc=\$?\" >> /tmp/bg.log" > /dev/null 2>&1 < /dev/null &)
  fi
done
du -sh /tmp/wh/* 2>/dev/null | tr '\n' ' '; echo; tail -4 /tmp/bg.log 2>/dev/null
true
