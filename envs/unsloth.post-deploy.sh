#!/usr/bin/env bash
# Snakemake runs this once after creating envs/unsloth.yaml. PyPI's xformers (an Unsloth dependency)
# is a CUDA 12 build that cannot load beside torch 2.11.0+cu130; without it Unsloth uses SDPA.
set -euo pipefail
python -m pip uninstall -y xformers || true
