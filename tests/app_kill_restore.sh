#!/usr/bin/env bash
# No lost work: the real app under Xvfb makes 40 random edits (views included), autosaves them
# after its quiet second and dumps its scenario; we kill -9 it, relaunch with the same XDG dirs and
# check the restored scenario equals the dump.   usage: app_kill_restore.sh MHA_STUDIO OUT_DIR
set -euo pipefail
app=$1 out=$2
rm -rf "$out" && mkdir -p "$out/config" "$out/state"
export XDG_CONFIG_HOME=$out/config XDG_STATE_HOME=$out/state
autosave=$out/state/mha-studio/autosave.json

xvfb-run -a -s '-screen 0 1280x720x24' "$app" --edits 40 --soak-seed 7 --dump-state "$out/before.json" \
  >"$out/first.log" 2>&1 &
runner=$!
for _ in $(seq 600); do [[ -s $out/before.json ]] && break; sleep 0.1; done
[[ -s $out/before.json ]] || { echo "FAIL: no state dump within 60 s"; cat "$out/first.log"; exit 1; }
pid=$(pgrep -f -- "^$app .*--dump-state $out/before.json" || true)
[[ -n $pid ]] || { echo "FAIL: the app exited before it was killed"; cat "$out/first.log"; exit 1; }
kill -9 "$pid"
wait "$runner" 2>/dev/null || true
ls "$autosave".tmp 2>/dev/null && { echo "FAIL: a temp file was left next to the autosave"; exit 1; }

# The dump is written only after the debounced autosave: that file is what a relaunch restores.
xvfb-run -a -s '-screen 0 1280x720x24' "$app" --dump-state "$out/after.json" --exit-after-dump \
  >"$out/second.log" 2>&1
if ! cmp -s "$out/before.json" "$out/after.json"; then
  echo "FAIL: the relaunched app does not show the edits made before kill -9"
  diff "$out/before.json" "$out/after.json" | head -20
  exit 1
fi
echo "restored after kill -9: $(wc -c <"$out/after.json") bytes of scenario, same as before the kill"
