#!/bin/bash
# install.sh REPO GROUP SITE: the stashed batches of GROUP (/tmp/wh/GROUP) into SITE, sha256-checked
cd "$1"
PYTHONPATH=src python3 -m rollout_bench.deploy.wheelhouse install /tmp/wh/$2 --target $3 > /tmp/install_$2.log 2>&1 && touch $3/.installed
echo "$(date -u +%H:%M:%S) install $2 rc=$?" >> /tmp/bg.log
