#!/usr/bin/env bash
# mha-studio FILE: a scenario, attention weights (.npy) or a model folder given as the one positional
# argument opens as --scenario, --attention or Model → Open model folder would; a path that is none
# of these exits 2 before any window opens.
#   app_open_file.sh MHA_STUDIO SOURCE_DIR WORK_DIR
set -euo pipefail
studio=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
export XDG_STATE_HOME=$work/state
run() { xvfb-run -a -s '-screen 0 1280x720x24' "$studio" --no-autosave "$@"; }

# Refusals: exit 2, the reason and the usage line, no display needed.
for bad in "$work/missing.json" "$work"; do
  if "$studio" "$bad" 2>err.txt; then fail "mha-studio $bad was accepted"; else rc=$?; fi
  [[ $rc == 2 ]] && grep -q "^usage: mha-studio" err.txt || fail "mha-studio $bad: rc=$rc $(cat err.txt)"
done

# A scenario: its sizes are the ones the app starts with.
run --dump-state "$work/scenario.json" --exit-after-dump "$src/assets/presets/gqa.json" >/dev/null
want=$(grep -o '"num_kv_heads": *[0-9]*' "$src/assets/presets/gqa.json")
grep -q "$want" "$work/scenario.json" || fail "gqa.json did not open: $(head -c 400 "$work/scenario.json")"

# A model folder (given relative: it opens as a folder, not as a shipped model's name).
cd "$src/assets/models"
run --dump-state "$work/model.json" --exit-after-dump tiny-fortunes >/dev/null
grep -q "\"model\": *\"[^\"]*/assets/models/tiny-fortunes\"" "$work/model.json" || fail "the model folder did not open"

# Attention weights: the Attention file view shows them.
run --screenshot "$work/attention.png" "$src/tests/fixtures/notebook/expected/attn_weights.npy" >/dev/null 2>"$work/err.txt" ||
  fail "mha-studio FILE.npy: $(cat "$work/err.txt")"
[[ -s $work/attention.png ]] || fail "no screenshot with FILE.npy"
echo "mha-studio FILE opens scenarios, model folders and .npy files"
