#!/usr/bin/env bash
# Head knock-outs through the scripted UI under Xvfb (tests/scripts/knockout.txt): each step's dump
# says which heads are out, the prediction without and with them, and which heads' patterns moved;
# the K key knocks out the selected head; undo and `knockout none` bring the heads back; a head
# outside the model stops the script with exit 2 and the reason.
#   usage: app_knockout_test.sh MHA_STUDIO SOURCE_DIR OUT_DIR
set -euo pipefail
app=$1 src=$2 out=$3
rm -rf "$out" && mkdir -p "$out"
cd "$src"
export XDG_CONFIG_HOME="$out/config"
in_x() {  # in_x LOG ARGS...: the app's own exit status
  local log=$1 rc
  shift
  xvfb-run -a -s '-screen 0 1280x720x24' bash -c '"$@" >"$0" 2>&1; echo $? >"$0.rc"' "$log" "$app" "$@" || true
  rc=$(cat "$log.rc" 2>/dev/null || echo 99)
  return "$rc"
}
sed "s#OUT/#$out/#g" tests/scripts/knockout.txt >"$out/knockout.txt"
in_x "$out/knockout.log" --script "$out/knockout.txt" || { cat "$out/knockout.log"; exit 1; }
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def dump(k):
    return json.load(open(f"{out}/{k}.json"))
def probs(r):
    return [(t["token"], round(t["probability"], 6)) for t in r]
d0 = dump(0)
r0 = d0["result"]
assert "knockouts" not in d0 and "knockout" not in r0, r0
plain = r0["next_token"]
assert len(plain) == 5, plain

d1 = dump(1)
r1 = d1["result"]
k1 = r1["knockout"]
assert d1["knockouts"] == {"heads": [[0, 0], [0, 1]], "ablation": "zero"}, d1["knockouts"]
assert k1["heads"] == "0.0,0.1" and k1["ablation"] == "zero", k1
assert probs(k1["next_token_before"]) == probs(plain), (k1["next_token_before"], plain)
assert probs(r1["next_token"]) != probs(plain), "knocking out two heads of layer 0 changed nothing"
assert k1["changed_heads"], k1
assert all(not c["head"].startswith("0.") and c["max_abs_diff"] >= 1e-3 for c in k1["changed_heads"]), k1
assert r1["tab"] == "Compare" and r1["can_undo"], r1

r2 = dump(2)["result"]
assert r2["knockout"]["ablation"] == "mean" and r2["knockout"]["heads"] == "0.0,0.1", r2["knockout"]
assert probs(r2["next_token"]) != probs(r1["next_token"]), "mean and zero knock-outs gave the same prediction"

d3 = dump(3)  # layer 1, the second head selected, K
sel = d3["result"]["selected"]["head"]
assert sel == 1, d3["result"]["selected"]
assert d3["knockouts"]["heads"] == [[0, 0], [0, 1], [1, 1]], d3["knockouts"]

d4 = dump(4)  # all of layer 1 but head 0, layer 0's kept
H = d4["result"]["dims"]["H"]
want = [[0, 0], [0, 1]] + [[1, h] for h in range(1, H)]
assert d4["knockouts"] == {"heads": want, "ablation": "zero"}, d4["knockouts"]

assert dump(5)["knockouts"] == d3["knockouts"], "undo did not bring the K knock-out list back"

d6 = dump(6)
assert "knockouts" not in d6 and "knockout" not in d6["result"], d6["result"]
assert probs(d6["result"]["next_token"]) == probs(plain), "with every head back the prediction differs"
print("knock-outs: the prediction moves and comes back; later heads change; K, all-but, undo, none")
PY
# A head outside the model, and a malformed list: exit 2 naming the line.
for bad in "knockout 99.0" "knockout 0"; do
  printf 'open assets/presets/model_induction.json\n%s\n' "$bad" >"$out/bad.txt"
  rc=0
  in_x "$out/bad.log" --script "$out/bad.txt" || rc=$?
  if [ "$rc" != 2 ] || ! grep -q "bad.txt:2:" "$out/bad.log"; then
    echo "'$bad': expected exit 2 naming bad.txt:2, got $rc:"; cat "$out/bad.log"; exit 1
  fi
done
echo "bad knock-outs refused"
