#!/usr/bin/env bash
# Regenerates tests/goldens/presets.sha256, the SHA-256 of every file `mha compute --scenario` and
# `mha export --scenario` write for each preset in assets/presets/ (checked by the ctest
# presets_golden). Run it only when the numbers or the figures change on purpose (a new preset, a
# changed default, a drawing change), check the diff of the golden file, and say in the commit
# why the bytes changed.
#   bash tools/gen_goldens.sh [BUILD_DIR]      (default build/, made with tools/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[[ -x $build/mha ]] || { echo "gen_goldens.sh: no $build/mha; build it first (tools/build.sh)"; exit 2; }
bash tests/presets_golden.sh "$build/mha" assets/presets tests/goldens/presets.sha256 \
  "$build/presets_golden" --write
git --no-pager diff --stat -- tests/goldens/presets.sha256 || true
