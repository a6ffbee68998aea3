#!/usr/bin/env bash
# The app under random edits for SECONDS under Xvfb (its own XDG dirs; a soak skips the autosave); fails when
# RSS grew by more than BOUND_MB from the end of the warm-up to the end. Frame times and stalls
# are reported, not asserted (the machine may be shared).   usage: app_soak.sh MHA_STUDIO SECONDS BOUND_MB OUT_DIR
set -euo pipefail
app=$1 seconds=$2 bound=$3 out=$4
rm -rf "$out" && mkdir -p "$out/config" "$out/state"
export XDG_CONFIG_HOME=$out/config XDG_STATE_HOME=$out/state
xvfb-run -a -s '-screen 0 1280x720x24' "$app" --soak "$seconds" --soak-report "$out/soak.json"
growth=$(sed -n 's/^ *"rss_growth_mb": *\([-0-9.e+]*\).*/\1/p' "$out/soak.json")
edits=$(sed -n 's/^ *"edits": *\([0-9]*\).*/\1/p' "$out/soak.json")
[[ -n $growth && -n $edits ]] || { echo "FAIL: no report"; exit 1; }
((edits > 20)) || { echo "FAIL: only $edits edits in $seconds s"; exit 1; }
if awk -v g="$growth" -v b="$bound" 'BEGIN { exit !(g > b) }'; then
  echo "FAIL: RSS grew by $growth MB after the warm-up (bound $bound MB)"
  exit 1
fi
echo "RSS growth after warm-up: $growth MB (bound $bound MB), $edits edits"
