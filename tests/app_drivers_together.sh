#!/usr/bin/env bash
# The soak's random edits (--edits) and the latency replay (--frame-stats, at 16, 512 and 2048
# tokens) in one run of the real app under Xvfb: both drive the app through actions, as a user's
# clicks do, so neither can leave the other a stale pointer. Run by ctest (app_drivers_together) and,
# built with ASan + UBSan and with TSan, by tools/test_sanitizers.sh.
#   usage: app_drivers_together.sh MHA_STUDIO OUT_DIR
set -euo pipefail
app=$1 out=$2
rm -rf "$out" && mkdir -p "$out"
# The app's own exit status (xvfb-run's cleanup of its temporary folder can fail on its own).
xvfb-run -a -s '-screen 0 1280x720x24' bash -c '"$@" >"$0" 2>&1; echo $? >"$0.rc"' "$out/app.log" \
  "$app" --no-autosave --edits 20 --soak-seed 5 --frame-stats "$out/frame_stats.json" || true
[[ $(cat "$out/app.log.rc" 2>/dev/null) == 0 ]] ||
  { echo "FAIL: the app exited with an error"; cat "$out/app.log"; exit 1; }
sizes=$(grep -c '"p95_ms"' "$out/frame_stats.json" || true)
[[ $sizes == 3 ]] || { echo "FAIL: $sizes sizes in the report, expected 3"; cat "$out/app.log"; exit 1; }
cat "$out/app.log"
