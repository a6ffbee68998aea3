#!/usr/bin/env bash
# Opens the real app in a real window under Xvfb on every preset (Heads view) and the mask editor,
# saves a screenshot of each and checks it is not blank (png_check).
set -euo pipefail
app=$1 assets=$2 out=$3
check="$(dirname "$app")/png_check"
mkdir -p "$out"
run() {  # name preset tab
  xvfb-run -a -s "-screen 0 1280x720x24" "$app" --scenario "$assets/presets/$2.json" --tab "$3" \
    --screenshot "$out/$1.png" --frames 6 --no-autosave
  "$check" "$out/$1.png" 64
}
for p in "$assets"/presets/*.json; do
  name=$(basename "$p" .json)
  run "$name-heads" "$name" Heads
done
run causal_lm-mask causal_lm Mask
run course_notebook-reshape course_notebook Reshape
run course_notebook-pipeline course_notebook Pipeline
