#!/usr/bin/env bash
# Install and run, on an air-gapped GPU host whose python3 already has torch, transformers and peft
# (e.g. the H200 image): the README's offline recipe after build and carry. Installs the carried
# wheelhouses into a private target once, then calls snakemake, or the GPU smoke run when the first
# argument is `smoke`.
#   bash workflow/scripts/offline_gpu_host.sh --cores 8 --resources gpu=1 [targets]
#   bash workflow/scripts/offline_gpu_host.sh smoke [--gpu 0]
# WHEELS: the wheelhouses to install, space-separated (default: every .wheelhouse/<group>/ carried
# here); a folder of bare .whl files without a manifest installs as it is. SITE: the target.
set -euo pipefail
SITE=${SITE:-/tmp/site}
if [ -z "${WHEELS+x}" ]; then
  WHEELS=$(for d in .wheelhouse/*/; do [ -f "$d/manifest.json" ] && printf '%s ' "${d%/}"; done || true)
fi
if [ ! -f "$SITE/.installed" ] && [ -n "${WHEELS// /}" ]; then
  for house in $WHEELS; do
    if [ -f "$house/manifest.json" ]; then  # reassembled from its parts, sha256-checked, pip --no-index
      PYTHONPATH="$PWD/src" python3 -m rollout_bench.host.wheelhouse install "$house" --target "$SITE"
    else
      python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$house"/*.whl
    fi
  done
  touch "$SITE/.installed"
fi
# rules call `python -m ...`; some images only have python3 (a wrapper, not a symlink: a venv's
# interpreter reached through a symlink elsewhere loses its site-packages)
mkdir -p /tmp/rb-bin && printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/rb-bin/python
chmod +x /tmp/rb-bin/python
export PATH="/tmp/rb-bin:$PATH" PYTHONPATH="$SITE:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ "${1:-}" = smoke ]; then
  shift
  exec python3 -m rollout_bench.pipeline.smoke "$@"
fi
exec python3 -m snakemake "$@"
