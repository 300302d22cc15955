#!/bin/bash
# stash.sh GROUP BATCH [install]: copy the carried batch (and manifest) to /tmp/wh; with `install`, install the
# group into /tmp/site-GROUP in the background from a copied src (each call rewrites the synced checkout)
mkdir -p /tmp/wh/$1 && cp -r .wheelhouse/$1/$2 /tmp/wh/$1/ && ls /tmp/wh/$1
[ -f .wheelhouse/$1/manifest.json ] && cp .wheelhouse/$1/manifest.json /tmp/wh/$1/
if [ "$3" = install ]; then
  rm -rf /tmp/inst-$1 && mkdir /tmp/inst-$1 && cp -r src .carry /tmp/inst-$1/
  (setsid nohup bash /tmp/inst-$1/.carry/install.sh /tmp/inst-$1 $1 /tmp/site-$1 > /tmp/inst-$1.out 2>&1 < /dev/null &)
fi
cat /tmp/bg.log 2>/dev/null | tail -3
