#!/bin/bash
# stash.sh GROUP/BATCH [GROUP/BATCH ...] [install GROUP ...]: copy carried batches (and their manifests) to
# /tmp/wh/GROUP; `install GROUP` then installs that group into /tmp/site-GROUP in the background, from a
# copied src (each call rewrites the synced checkout).
mode=stash
for a in "$@"; do
  if [ "$a" = install ]; then mode=install; continue; fi
  if [ $mode = stash ]; then
    g=${a%%/*}; mkdir -p /tmp/wh/$g && cp -r .wheelhouse/$a /tmp/wh/$g/ && cp .wheelhouse/$g/manifest.json /tmp/wh/$g/
  else
    rm -rf /tmp/inst-$a && mkdir /tmp/inst-$a && cp -r src .carry /tmp/inst-$a/
    (setsid nohup bash /tmp/inst-$a/.carry/install.sh /tmp/inst-$a $a /tmp/site-$a > /tmp/inst-$a.out 2>&1 < /dev/null &)
  fi
done
du -sh /tmp/wh/* 2>/dev/null | tr '\n' ' '; echo; tail -4 /tmp/bg.log 2>/dev/null
true  # the tail above fails before bg.log exists: `stash.sh ... && launch.sh` must not stop on it
