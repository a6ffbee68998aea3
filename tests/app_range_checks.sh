#!/usr/bin/env bash
# mha-studio's numbers out of range (engine/limits.hpp) exit 2 with the option and the reason,
# before any window opens (a negative --width tripped an assertion inside GLFW, a negative --soak
# never ended). No display is needed: nothing here gets as far as GLFW. Run by ctest (app_range_checks).
#   usage: app_range_checks.sh MHA_STUDIO
set -uo pipefail
app=$1
fail=0
check() {  # check 'ARGS' 'TEXT THE ERROR MUST HOLD'
  local out rc
  out=$(env -u DISPLAY -u WAYLAND_DISPLAY "$app" --no-autosave $1 2>&1 </dev/null)
  rc=$?
  if [[ $rc != 2 ]] || ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL: mha-studio $1: exit $rc, expected 2 with '$2'; it said: $out"
    fail=1
  else
    echo "ok: mha-studio $1 -> exit 2: $(head -1 <<<"$out")"
  fi
}
check '--width -100' '--width -100: window size must be from 64 to 16384'
check '--width 0' '--width 0: window size must be from 64 to 16384'
check '--width 100000' '--width 100000: window size must be from 64 to 16384'
check '--height -1' '--height -1: window size must be from 64 to 16384'
check '--height 20000' '--height 20000: window size must be from 64 to 16384'
check '--soak -5' '--soak -5: soak seconds must be from 0 to 86400'
check '--soak 1e9' 'soak seconds must be from 0 to 86400'
check '--soak nan' 'soak seconds must be from 0 to 86400'
check '--edits -1' '--edits -1: edits must be from 0 to 10000000'
check '--frames 0' '--frames 0: must be at least 1'
exit $fail
