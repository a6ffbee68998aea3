#!/usr/bin/env bash
# The scripted UI end to end under Xvfb: the scripts in tests/scripts/ run through the real app, and
# their dumps are checked; bad scripts stop with exit 2 and the line.
#   usage: app_script_test.sh MHA_STUDIO SOURCE_DIR OUT_DIR
set -euo pipefail
app=$1 src=$2 out=$3
rm -rf "$out" && mkdir -p "$out"
cd "$src"
export XDG_CONFIG_HOME="$out/config"  # the remembered window and layout: this test's own
# The app under Xvfb; returns the app's own exit status (xvfb-run's cleanup can fail on its own).
in_x() {  # in_x LOG ARGS...
  local log=$1 rc
  shift
  xvfb-run -a -s '-screen 0 1280x720x24' bash -c '"$@" >"$0" 2>&1; echo $? >"$0.rc"' "$log" "$app" "$@" || true
  rc=$(cat "$log.rc" 2>/dev/null || echo 99)
  return "$rc"
}
run() {  # run SCRIPT: the script with OUT replaced by the output folder
  sed "s#OUT/#$out/#g" "tests/scripts/$1" >"$out/$1"
  in_x "$out/$1.log" --script "$out/$1"
}
run paint_compare_undo.txt || { cat "$out/paint_compare_undo.txt.log"; exit 1; }
run views_keys_pins.txt || { cat "$out/views_keys_pins.txt.log"; exit 1; }
python3 -c "
import json, sys
s = json.load(open('assets/presets/cat_sat_mat.json'))
s.setdefault('view', {})['hidden_heads'] = [1, 3]
json.dump(s, open(sys.argv[1], 'w'))" "$out/hidden_heads.json"
for s in every_view.txt padded_batch.txt mask_drag_compare_undo.txt; do
  run "$s" || { cat "$out/$s.log"; exit 1; }
done
run projector.txt || { cat "$out/projector.txt.log"; exit 1; }
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def result(name):
    return json.load(open(f"{out}/projector_{name}.json"))["result"]
for name in ("undo", "open", "model"):  # the window survives undo, open and a model switch
    r = result(name)
    w = r["window"]
    assert r["tab"] == "Mask" and r["presenter"] and w["font_scale"] == 2 and w["colormap"] == "magma", (name, r)
assert result("open")["query_tokens"][:2] != result("undo")["query_tokens"][:2]  # it did open
r = result("pipeline")  # Left in the Pipeline steps the Pipeline's own stage, not the Heads view's
assert r["tab"] == "Pipeline" and r["window"]["pipeline_stage"] != "attn_weights", r
assert r["stage"] == "attn_weights", r
r = result("reshape")
assert r["tab"] == "Reshape" and r["window"]["reshape_step"] == 2, r
r = result("focus")  # F: the view alone
assert r["window"]["focus"] and r["side_panels"] == {"controls": False, "inspector": False}, r
assert not result("unfocus")["window"]["focus"]
print("scripted UI: presenter mode, the font and the view survive undo, open and a model switch; keys step each view")
PY
# Check my implementation: the student's file runs in the Check view (with torch: the verdict; without
# it, the reason and the Debian package).
cat >"$out/check.txt" <<SCRIPT
check tests/check/mistake_split_without_transpose.py
dump-state $out/check_mistake.json
check tests/check/correct_keep.py
dump-state $out/check_correct.json
SCRIPT
in_x "$out/check.log" --no-autosave --script "$out/check.txt" || { cat "$out/check.log"; exit 1; }
python3 - "$out" <<'PY'
import json, subprocess, sys
out = sys.argv[1]
has_torch = subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0
m = json.load(open(f"{out}/check_mistake.json"))["result"]
c = json.load(open(f"{out}/check_correct.json"))["result"]
assert m["tab"] == "Check" and not m["check"]["running"], m
if has_torch:
    assert m["check"]["verdict"] == "mistakes" and m["check"]["mistakes"] == ["split_without_transpose"], m["check"]
    assert not any(k["ok"] for k in m["check"]["cases"]), m["check"]
    assert c["check"]["verdict"] == "correct" and c["check"]["mask_convention"] == "keep", c["check"]
    assert all(k["ok"] for k in c["check"]["cases"]) and c["check"]["cases"], c["check"]
    print("scripted UI: the Check view names a split without transpose, and passes the course's answer")
else:
    assert "python3-torch" in m["check"]["error"], m["check"]
    print("scripted UI: without torch the Check view names python3-torch")
PY
# --tab takes any case; an unknown view is refused with the names.
printf 'dump-state %s/tab_heads.json\n' "$out" >"$out/tab_heads.txt"
in_x "$out/tab_heads.log" --no-autosave --tab "token LINES" --script "$out/tab_heads.txt" || { cat "$out/tab_heads.log"; exit 1; }
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['result']; assert r['tab'] == 'Token lines', r" "$out/tab_heads.json"
rc=0; in_x "$out/tab_bad.log" --no-autosave --tab bertviz --script "$out/tab_heads.txt" || rc=$?
[ "$rc" = 2 ] && grep -q 'no view "bertviz"; the views are Pipeline, Reshape, Heads' "$out/tab_bad.log" ||
  { echo "--tab bertviz: expected exit 2 naming the views, got $rc"; cat "$out/tab_bad.log"; exit 1; }
# L = 2048: the Heads view draws the weights overview; the weights themselves are never computed.
cat >"$out/large.json" <<'JSON'
{"format": "mha-studio-scenario", "version": 1, "name": "large causal",
 "sizes": {"batch": 1, "tgt_len": 2048, "src_len": 2048, "embed_dim": 64, "num_heads": 8},
 "mask": {"preset": "causal"}, "view": {"tab": "heads"}}
JSON
run large_heads.txt || { cat "$out/large_heads.txt.log"; exit 1; }
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for n in ("large_0.json", "large_1.json"):
    r = json.load(open(f"{out}/{n}"))["result"]
    assert r["valid"] and r["tab"] == "Heads" and r["stage"] == "attn_weights", r
    assert r["attn_weights"] == "overview", (n, r["attn_weights"])
    assert r["weights_overview"] == {"block": 8, "columns": 256}, r["weights_overview"]
assert not json.load(open(f"{out}/large_0.json"))["result"]["errors"]
r = json.load(open(f"{out}/large_2.json"))["result"]
assert r["valid"] and r["tab"] == "Token lines" and r["attn_weights"] == "computed", r
r = json.load(open(f"{out}/large_3.json"))["result"]
assert r["valid"] and r["attn_weights"] == "kept" and "weights_overview" not in r, r
print("scripted UI: at L = 2048 the Heads view draws every head from the weights overview")
PY
# The scripts' open goes through File > Open's path: what they opened is in Recent, newest first.
python3 - "$out" <<'PY'
import json, os, sys
recent = json.load(open(f"{sys.argv[1]}/config/mha-studio/recent.json"))["recent"]
assert any(p.endswith("assets/presets/cat_sat_mat.json") for p in recent), recent
assert all(os.path.isabs(p) for p in recent), recent
print("scripted UI: opened files are in Recent:", len(recent))
PY
# A driver whose softmax is off (MHA_GPU_PERTURB): the self-check refuses it and the user sees why.
MHA_GPU_PERTURB=softmax run gpu_refused.txt || { cat "$out/gpu_refused.txt.log"; exit 1; }
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
r = json.load(open(f"{out}/gpu_refused.json"))["result"]
assert r["backend"] == "gpu" and r["valid"] and r["computed_by"] != "gpu", r
assert "self-check" in r["gpu_fallback_reason"] or "OpenGL 4.3" in r["gpu_fallback_reason"], r
n = json.load(open(f"{out}/gpu_not_asked.json"))["result"]
assert n["computed_by"] != "gpu" and n["gpu_fallback_reason"] == "", n
print("scripted UI: a refused GPU driver computes on the CPU and says why:", r["gpu_fallback_reason"][:100])
PY
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
load = lambda n: json.load(open(f"{out}/{n}"))
before, painted, undone = load("0.json"), load("1.json"), load("2.json")
c = painted["result"]["compare"]
# The painted cell (query 3, key 1) is the whole effect: only row 3 changes, most at key 1.
assert c["mode"] == 1 and c["comparable"], c
assert c["rows_changed"] == [3], c
assert c["at"][2] == 3 and c["at"][3] == 1, c
assert c["max_abs_diff"] > 0, c
for d in (before, painted, undone): d.pop("result")
assert painted != before, "the paint changed nothing"
# Undo restores the work; the view (here Compare's mode) stays as it is on screen.
assert undone["view"]["compare_mode"] == 1, undone["view"]
for d in (before, undone): d.pop("view")
assert undone == before, "undo did not restore the original scenario"
hover = load("hover.json")["result"]
assert hover["tab"] == "Heads" and hover["hovered"] == {"query": 2, "key": 4}, hover
assert hover["selected"]["head"] == 1 and hover["stage"] == "context", hover
focus = load("focus.json")["result"]
assert focus["side_panels"] == {"controls": False, "inspector": False}, focus
pins = load("pins.json")
r = pins["result"]
assert pins["sizes"]["num_heads"] == 2 and r["dims"]["L"] == 7, r
assert r["pins"] == ["causal", "window"] and r["compare"]["mode"] == 3, r
assert r["compare"]["max_abs_diff"] > 0, r
print("scripted UI: paint/compare/undo, hover, keys, focus, controls, pins: ok")
PY
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
load = lambda n: json.load(open(f"{out}/{n}"))
# Every view: its tab is the one shown, with a result, and its screenshot was written.
for name, tab in [("overview", "Overview"), ("token_lines", "Token lines"), ("pipeline", "Pipeline"),
                  ("reshape", "Reshape"), ("large_l", "Large L"), ("complexity", "Complexity"),
                  ("what_if", "Heads"), ("inspector", "Heads"), ("mask", "Mask"), ("compare", "Compare"),
                  ("attention_file", "Attention file")]:
    r = load(f"view_{name}.json")["result"]
    assert r["tab"] == tab and r["valid"] and not r["errors"], (name, r)
    if os.path.exists(f"{out}/view_{name}.png"):
        assert os.path.getsize(f"{out}/view_{name}.png") > 10000, name
tl = load("view_token_lines.json")["result"]
assert tl["hovered"] == {"query": 2, "key": 3}, tl
# The what-if controls are reached by set, and set back to torch's values they leave no what_if.
w = load("view_what_if.json")
assert w["what_if"] == {"temperature": 4, "scale_by_sqrt_dk": False}, w.get("what_if")
assert "what_if" not in load("view_torch_again.json")
# The inspector follows the hover; ] collapses it.
i = load("view_inspector.json")["result"]
assert i["hovered"] == {"query": 1, "key": 2} and i["side_panels"]["inspector"], i
assert not load("view_no_inspector.json")["result"]["side_panels"]["inspector"]
c = load("view_compare.json")["result"]["compare"]
assert c["mode"] == 1 and c["comparable"] and c["max_abs_diff"] > 0, c
assert load("view_backend.json")["result"]["backend"] == "cpu"
hh = load("view_hidden_heads.json")
assert hh["view"]["hidden_heads"] == [1, 3], hh["view"]
assert hh["result"]["visible_heads"] == [0, 2], hh["result"]
# padded_batch opens on an item with padding.
p = load("padded.json")
assert p["result"]["padded_keys"], p["result"]
assert p["view"]["batch_index"] > 0, p["view"]
# A multi-cell drag: one edit, exactly the dragged rows, one undo back.
before, dragged, undone = load("drag_0.json"), load("drag_1.json"), load("drag_2.json")
c = dragged["result"]["compare"]
assert c["mode"] == 1 and c["comparable"] and c["max_abs_diff"] > 0, c
assert c["rows_changed"] == [1, 2, 3, 4], c
cells = dragged["mask"]["cells"]
S = cells["shape"][1]
blocked = {k for k, x in enumerate(cells["data"]) if x == "-inf"}
causal = {i * S + j for i in range(cells["shape"][0]) for j in range(S) if j > i}
assert blocked - causal == {S, 2 * S, 3 * S, 4 * S} and causal <= blocked, sorted(blocked - causal)
assert dragged["result"]["can_undo"]
for d in (before, dragged, undone): d.pop("result"), d.pop("view")  # undo restores the work, not the view
assert undone == before, "one undo did not restore the state before the drag"
print("scripted UI: every view, what-if, backend, hidden heads, padded batch, mask drag: ok")
PY
# The layout is remembered: hide the controls in one run, the next run opens without them.
printf 'key [\n' >"$out/hide.txt"
printf 'dump-state %s\n' "$out/layout.json" >"$out/dump.txt"
in_x "$out/hide.log" --script "$out/hide.txt" || { cat "$out/hide.log"; exit 1; }
in_x "$out/dump.log" --script "$out/dump.txt" || { cat "$out/dump.log"; exit 1; }
python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))['result']
assert r['side_panels'] == {'controls': False, 'inspector': True}, r['side_panels']
c = json.load(open(sys.argv[2]))
assert c['layout_chosen'] and not c['show_controls'] and c['width'] == 1280, c
print('layout remembered across runs: ok')" "$out/layout.json" "$out/config/mha-studio/window.json"
# Bad scripts: exit 2 and the line.
bad() {  # bad NAME TEXT EXPECTED
  printf '%b' "$2" >"$out/$1"
  rc=0
  in_x "$out/$1.log" --script "$out/$1" || rc=$?
  [[ $rc == 2 ]] || { echo "FAIL: $1 exited $rc, expected 2"; cat "$out/$1.log"; exit 1; }
  grep -q "$3" "$out/$1.log" || { echo "FAIL: $1 does not say '$3'"; cat "$out/$1.log"; exit 1; }
}
bad unknown.txt "tab Heads\n\npaint 1 2\n" "unknown.txt:3: unknown action \"paint\""
bad args.txt "undo\nmask-paint 1\n" "args.txt:2: mask-paint takes 2 to 3 arguments"
bad drag.txt "mask-drag 0 0 1\n" "drag.txt:1: mask-drag takes 4 arguments"
bad backend.txt "set backend fast\n" "backend.txt:1: backend: expected auto, cpu or gpu"
bad value.txt "set num_heads many\n" "value.txt:1: num_heads: expected an integer"
bad control.txt "undo\nset heads 2\n" "control.txt:2: no control \"heads\""
bad tab.txt "tab Nowhere\n" "tab.txt:1: no tab \"Nowhere\""
bad pin.txt "compare a b\n" "pin.txt:1: no pin \"a\""
echo "bad scripts: exit 2 with the line"
