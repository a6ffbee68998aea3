#!/usr/bin/env bash
# The soak's random edits (--edits) and the latency replay (--frame-stats, at 16, 512 and 2048
# tokens) in one run of the real app under Xvfb, the soak editing alongside for the whole replay:
# it keeps the size the replay loaded, edits there after every second landed result (so about half
# as often as the replay), and its edit budget outlasts the replay, whose end closes the app. Both drive the app through
# actions, as a user's clicks do, so neither can leave the other a stale pointer. Run by ctest
# (app_drivers_together) and, built with ASan + UBSan and with TSan, by tools/test_sanitizers.sh.
#   usage: app_drivers_together.sh MHA_STUDIO OUT_DIR
set -euo pipefail
app=$1 out=$2
rm -rf "$out" && mkdir -p "$out"
start=$SECONDS
# The app's own exit status (xvfb-run's cleanup of its temporary folder can fail on its own).
xvfb-run -a -s '-screen 0 1280x720x24' bash -c '"$@" >"$0" 2>&1; echo $? >"$0.rc"' "$out/app.log" \
  "$app" --no-autosave --edits 1000000 --soak-seed 5 --frame-stats "$out/frame_stats.json" || true
[[ $(cat "$out/app.log.rc" 2>/dev/null) == 0 ]] ||
  { echo "FAIL: the app exited with an error"; cat "$out/app.log"; exit 1; }
sizes=$(grep -c '"goal_p95_ms"' "$out/frame_stats.json" || true)
[[ $sizes == 3 ]] || { echo "FAIL: $sizes sizes in the report, expected 3"; cat "$out/app.log"; exit 1; }
# The soak prints each edit it makes beyond teaching sizes: it must have edited at both large sizes
# at least half as often as the replay times edits there (12 and 6).
for want in 512:6 2048:3; do
  L=${want%:*} min=${want#*:}
  n=$(grep -c "^soak: edit [0-9]* at L=$L " "$out/app.log" || true)
  ((n >= min)) || { echo "FAIL: $n soak edits at L=$L, expected at least $min"; cat "$out/app.log"; exit 1; }
  echo "soak edits at L=$L: $n"
done
grep -v '^soak: edit' "$out/app.log" || true
echo "drivers together: $((SECONDS - start)) s"
