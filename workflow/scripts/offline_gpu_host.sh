#!/usr/bin/env bash
# Run the workflow on an air-gapped GPU host whose python3 already has torch, transformers and peft
# (e.g. the H200 image): install carried wheels into a private target, then call snakemake, or the
# GPU smoke run when the first argument is `smoke`.
#   WHEELS=.carry/gpu bash workflow/scripts/offline_gpu_host.sh --cores 8 --resources gpu=1 [targets]
#   WHEELS=.carry/gpu bash workflow/scripts/offline_gpu_host.sh smoke [--gpu 0]
set -euo pipefail
WHEELS=${WHEELS:-.carry/gpu}
SITE=${SITE:-/tmp/site}
if [ ! -f "$SITE/.installed" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl
  touch "$SITE/.installed"
fi
# rules call `python -m ...`; some images only have python3 (a wrapper, not a symlink: a venv's
# interpreter reached through a symlink elsewhere loses its site-packages)
mkdir -p /tmp/rb-bin && printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/rb-bin/python
chmod +x /tmp/rb-bin/python
export PATH="/tmp/rb-bin:$PATH" PYTHONPATH="$SITE:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ "${1:-}" = smoke ]; then
  shift
  exec python3 -m rollout_bench.smoke "$@"
fi
exec python3 -m snakemake "$@"
