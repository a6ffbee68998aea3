#!/usr/bin/env bash
# Every preset's numbers and figure, byte for byte: `mha compute --scenario P --out DIR` (every file
# it writes) and `mha export --scenario P` (the PNG) for each assets/presets/*.json, hashed with
# SHA-256 and compared with tests/goldens/presets.sha256. Run by ctest (presets_golden); with
# --write it writes the golden file instead (tools/gen_goldens.sh).
#   usage: presets_golden.sh MHA PRESETS_DIR GOLDEN_FILE WORK_DIR [--write]
set -euo pipefail
mha=$1 presets=$2 golden=$3 work=$4 mode=${5:-check}
rm -rf "$work" && mkdir -p "$work/out"
# The baseline kernels: the GPT-2 presets' Conv1D products round differently in the AVX2 and AVX-512
# copies, and the bytes must not depend on the CPU the test runs on (every x86-64 CPU runs sse2).
# The teaching presets run the reference path and give the same bytes on every copy. Nothing
# written holds a time or a path, so every file is compared: the .npy files, trace.json, the PNG.
export MHA_CPU=sse2
for p in "$presets"/*.json; do
  name=$(basename "$p" .json)
  "$mha" compute --scenario "$p" --out "$work/out/$name/" >"$work/$name.compute.log" 2>&1 ||
    { echo "FAIL: mha compute --scenario $p"; cat "$work/$name.compute.log"; exit 1; }
  "$mha" export --scenario "$p" --out "$work/out/$name.png" >"$work/$name.export.log" 2>&1 ||
    { echo "FAIL: mha export --scenario $p"; cat "$work/$name.export.log"; exit 1; }
done
(cd "$work/out" && find . -type f | LC_ALL=C sort | xargs sha256sum) >"$work/presets.sha256"
if [[ $mode == --write ]]; then
  cp "$work/presets.sha256" "$golden"
  echo "wrote $golden: $(wc -l <"$golden") files"
  exit 0
fi
if ! diff -u "$golden" "$work/presets.sha256" >"$work/diff.txt"; then
  echo "FAIL: these preset outputs differ from $golden (if the numbers changed on purpose, run"
  echo "tools/gen_goldens.sh and say why in the commit):"
  cat "$work/diff.txt"
  exit 1
fi
echo "presets golden: $(wc -l <"$golden") files byte-identical"
