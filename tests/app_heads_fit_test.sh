#!/usr/bin/env bash
# The Heads view beside the lesson panel at 1280x720 with the presenter font 2x: on every lesson step
# that shows it (and on the RoPE step's solution, the maps without and with RoPE), each map on
# screen is whole inside the view, with cells of 6 px or more, and either at least 2.5 text heights
# on its longer side or cells of half a text height (a map of few tokens). Reads the
# grid as drawn from dump-state's heads_layout. Then the Pipeline, Reshape, √d_k, Complexity and Mask
# views on the same walk: no line past the view's right edge, the √d_k text and the Pipeline's
# Export... on screen, the Pipeline graph's text at 11 px and 0.45 of the body font or more with the
# chosen stage's box in sight; and on every step that shows a view and points at it, its tab in
# sight in the tab bar.
#   usage: app_heads_fit_test.sh MHA_STUDIO SOURCE_DIR OUT_DIR
set -euo pipefail
app=$1 src=$2 out=$3
rm -rf "$out" && mkdir -p "$out"
cd "$src"
export XDG_CONFIG_HOME="$out/config" XDG_STATE_HOME="$out/state"
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
lines = ["set presenter true", "set font_scale 2"]
for path in sorted(glob.glob("assets/lessons/*.json")):
    name = os.path.splitext(os.path.basename(path))[0]
    for k, step in enumerate(json.load(open(path))["steps"]):
        lines += [f"lesson {name} {k}", f"dump-state {out}/{name}_{k}.json"]
        if any(a.split()[:1] == ["tab"] and a.split()[1:] == ["Pipeline"] for a in step.get("setup", [])):
            # The graph follows a stage chosen at its far end (it scrolls sideways in a short view).
            lines += ["set pipeline_stage attn_weights_avg", f"dump-state {out}/{name}_{k}_far.json"]
        solution = step.get("task", {}).get("solution", [])
        if any("scores_without_rope" in s for s in solution):
            lines += ["lesson-solve", f"dump-state {out}/{name}_{k}_rope.json"]
open(f"{out}/walk.txt", "w").write("\n".join(lines) + "\n")
PY
xvfb-run -a -s '-screen 0 1280x720x24' "$app" --width 1280 --height 720 --no-autosave --script "$out/walk.txt" \
  >"$out/walk.log" 2>&1 || { cat "$out/walk.log"; exit 1; }
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
checked = rope = 0
for f in sorted(glob.glob(f"{out}/*.json")):
    r = json.load(open(f))["result"]
    h = r.get("heads_layout")
    if h is None:
        continue
    where = os.path.basename(f)
    assert h["compact"], (where, "a 1280x720 view at 2x is a short one")
    font = h["font"]
    x0, y0, x1, y1 = h["view"]
    maps = h["maps"]
    # The maps on screen at once: every map, or the rows of maps the grid shows whole.
    shown = maps if h["rows_shown"] == 0 and h["cols"] == 0 else maps[: h["cols"] * h["rows_shown"]]
    assert shown, (where, "no map on screen", h)
    for i, m in enumerate(shown):
        a, b, c, d = m["cells"]
        assert a >= x0 - 1 and c <= x1 + 1 and b >= y0 - 1 and d <= y1 + 1, (where, i, "cut off", m, h["view"])
        side = max(c - a, d - b)
        assert m["cell"] >= 6 and (side >= 2.5 * font or m["cell"] >= 0.5 * font), (
            where, i, f"a map {side:.0f} px on its longer side (2.5 text heights: {2.5 * font:.0f}), cells of {m['cell']:.1f} px")
    checked += 1
    rope += where.endswith("_rope.json")
assert checked >= 15 and rope >= 1, (checked, rope)
print(f"heads fit: {checked} lesson steps with the Heads view, every map on screen whole and readable")
PY
# The other views the lessons show fit beside the lesson panel too: no line of Pipeline, Reshape,
# Complexity, Mask or √d_k runs past the view's right edge (dump-state's view_fit), the √d_k text ends
# inside it, the Pipeline's Export... button stays on screen above its map, its graph's labels are
# 11 px or more and the chosen stage's box is inside the graph's part on screen.
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
seen = set()
for f in sorted(glob.glob(f"{out}/*.json")):
    r = json.load(open(f))["result"]
    tab, fit = r["tab"], r["view_fit"]
    where = os.path.basename(f)
    if tab in ("Pipeline", "Reshape", "\u221ad_k", "Heads", "Complexity", "Mask"):
        assert fit["overflow_right"] <= 1, (where, tab, "a line cut at the right edge", fit)
        seen.add(tab)
    if tab == "\u221ad_k":
        assert fit["overflow_bottom"] <= 1, (where, "the text under the plot is cut", fit)
    if tab == "Pipeline":
        p = r["pipeline_layout"]
        x0, y0, x1, y1 = p["view"]
        a, b, c, d = p["export"]
        assert a >= x0 and c <= x1 + 1 and b >= y0 and d <= y1 + 1, (where, "Export... off screen", p)
        # The floor the graph zooms down to, and beside the lesson near half the body font (0.45): a
        # graph squeezed to its floor there is too small to read from the back of a room.
        assert p["label_px"] >= max(11, 0.45 * p["font"]), (
            where, f"graph text {p['label_px']:.1f} px, under 11 px or 0.45 of the body font ({p['font']:.0f} px)")
        gx0, gy0, gx1, gy1 = p["graph_view"]
        a, b, c, d = p["selected_box"]
        assert c > a and a >= gx0 - 1 and c <= gx1 + 1 and b >= gy0 - 1 and d <= gy1 + 1, (
            where, r["window"]["pipeline_stage"], "the chosen stage's box is out of the graph's sight", p)
assert {"Pipeline", "Reshape", "\u221ad_k", "Heads", "Complexity", "Mask"} <= seen, seen
print(f"views fit: {sorted(seen)} on every lesson step that shows them, no line past the right edge")
PY
# A step that shows a view and points at it: the view's tab button is in sight in the (scrolled)
# tab bar, where the lesson's outline lands, not "out of sight".
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
checked = 0
for path in sorted(glob.glob("assets/lessons/*.json")):
    name = os.path.splitext(os.path.basename(path))[0]
    for k, step in enumerate(json.load(open(path))["steps"]):
        tabs = [a.split(None, 1)[1] for a in step.get("setup", []) if a.split()[:1] == ["tab"]]
        if not tabs or step.get("point_at") != tabs[-1]:
            continue
        r = json.load(open(f"{out}/{name}_{k}.json"))["result"]
        assert r["lesson"]["pointer"] == {"drawn": True, "shown": True}, (name, k, tabs[-1], r["lesson"])
        checked += 1
assert checked >= 10, checked
print(f"tabs in sight: {checked} lesson steps point at the view they show, its tab in the bar's sight")
PY
