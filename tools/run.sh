#!/usr/bin/env bash
# Quick start: builds, then runs the default scenario, the course notebook's case
# (torch.manual_seed(42), N=3, L=S=4, E=8, H=2, bias=False), printing every stage's shape and the
# output, and writing all tensors to out/notebook. Extra arguments go to `mha compute` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh --target mha >/dev/null
if (($# > 0)); then exec build/mha compute "$@"; fi
exec build/mha compute --torch-seed 42 --batch 3 --tgt-len 4 --embed-dim 8 --num-heads 2 --no-bias \
  --out out/notebook
