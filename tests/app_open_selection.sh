#!/usr/bin/env bash
# Opening a scenario over another keeps the selection it saved: the Llama-style preset opens on head
# 5 of 8, and a saved GQA scenario on its head, query, key and batch item, with the inspector or the
# Mask view drawn while the previous (smaller) result is still on screen.
#   usage: app_open_selection.sh MHA_STUDIO SOURCE_DIR OUT_DIR
set -euo pipefail
app=$1 src=$2 out=$3
rm -rf "$out" && mkdir -p "$out"
cd "$src"
export XDG_CONFIG_HOME="$out/config"
python3 - "$out/gqa_selected.json" <<'PY'
import json, sys
s = json.load(open("assets/presets/gqa.json"))
s["sizes"]["batch"] = 5
s["view"] = {"tab": "heads", "sel_head": 6, "sel_query": 7, "sel_key": 5, "batch_index": 4}
json.dump(s, open(sys.argv[1], "w"))
PY
sed "s#OUT/#$out/#g" tests/scripts/open_selection.txt >"$out/open_selection.txt"
log=$out/open_selection.log
xvfb-run -a -s '-screen 0 1280x720x24' bash -c '"$@" >"$0" 2>&1; echo $? >"$0.rc"' "$log" "$app" \
  --script "$out/open_selection.txt" || true
[ "$(cat "$log.rc" 2>/dev/null || echo 99)" = 0 ] || { cat "$log"; exit 1; }
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def dump(name):
    return json.load(open(f"{out}/{name}.json"))
for name, tab, panel in (("rope_inspector", "Heads", "inspector"), ("rope_mask", "Mask", None)):
    d = dump(name)
    r = d["result"]
    assert r["tab"] == tab and r["dims"]["H"] == 8 and r["stage"] == "scores_without_rope", (name, r)
    if panel:
        assert r["side_panels"][panel], (name, r["side_panels"])
    assert d["view"]["sel_head"] == 5 and r["selected"]["head"] == 5, (name, d["view"], r["selected"])
for name, tab in (("gqa_mask", "Mask"), ("gqa_inspector", "Heads")):
    d = dump(name)
    r = d["result"]
    assert r["tab"] == tab and r["dims"]["H"] == 8 and r["dims"]["N"] == 5, (name, r["dims"])
    assert r["side_panels"]["inspector"], (name, r["side_panels"])
    assert r["selected"] == {"head": 6, "query": 7, "key": 5}, (name, r["selected"])
    assert d["view"]["batch_index"] == 4, (name, d["view"])
print("open keeps the saved selection: model_gqa_rope on head 5 of 8; a GQA scenario on head 6, query 7, "
      "key 5, batch item 4, over the Heads view with the inspector and over the Mask view")
PY
