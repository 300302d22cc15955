#!/bin/bash
# install.sh REPO GROUP SITE: the carried batches of GROUP (stashed in /tmp/wh/GROUP) into SITE.
cd "$1"
PYTHONPATH=src python3 -m rollout_bench.deploy.wheelhouse install /tmp/wh/$2 --target $3 > /tmp/install_$2.log 2>&1 && touch $3/.installed
echo "install $2 rc=$?"; tail -2 /tmp/install_$2.log
