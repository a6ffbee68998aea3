#!/usr/bin/env bash
# Every shipped lesson walked through the real app under Xvfb (--script): each step's setup applies
# without an error, each task's check is false before its solution and true after, undo takes a
# solution back, a lesson left resumes at its step; broken lesson files are refused with exit 2,
# naming the file, the step and the rule. SHOTS=1 also saves every step at 1280x720 with presenter
# font 2x and at 1920x1080 (to look at).
#   usage: app_lessons_test.sh MHA_STUDIO MHA SOURCE_DIR OUT_DIR
set -euo pipefail
app=$1 cli=$2 src=$3 out=$4
rm -rf "$out" && mkdir -p "$out"
cd "$src"
export XDG_CONFIG_HOME="$out/config"  # the remembered window: this test's own
in_x() {  # in_x LOG ARGS...: the app's own exit status
  local log=$1 rc
  shift
  xvfb-run -a -s '-screen 0 1920x1080x24' bash -c '"$@" >"$0" 2>&1; echo $? >"$0.rc"' "$log" "$app" "$@" || true
  rc=$(cat "$log.rc" 2>/dev/null || echo 99)
  return "$rc"
}

# One script walks every lesson: a dump per step before and after its solution.
python3 - "$out" "${SHOTS:-0}" <<'PY'
import glob, json, os, sys
out, shots = sys.argv[1], sys.argv[2] == "1"
lines = []
for path in sorted(glob.glob("assets/lessons/*.json")):
    name = os.path.splitext(os.path.basename(path))[0]
    lesson = json.load(open(path))
    lines.append(f"lesson {name}")
    for k, step in enumerate(lesson["steps"]):
        lines.append(f"dump-state {out}/{name}_{k}_before.json")
        if shots:
            lines += ["set presenter true", "set font_scale 2", f"screenshot {out}/{name}_{k}_f2.png",
                      "set presenter false", "set font_scale 1"]
        if "task" in step:
            lines += ["lesson-solve", f"dump-state {out}/{name}_{k}_after.json"]
        if k + 1 < len(lesson["steps"]):
            lines.append("lesson-next")
# Undo takes a solution back (the masks lesson's causal mask is an edit), and a lesson left resumes.
lines += ["lesson 4_masks 1", "lesson-solve", "undo", f"dump-state {out}/undo.json",
          "lesson 1_attention_one_head 2", "lesson 2_many_heads", "lesson 1_attention_one_head",
          f"dump-state {out}/resume.json", "lesson-back", f"dump-state {out}/back.json",
          "key ctrl+right", "key ctrl+right", "key ctrl+left", f"dump-state {out}/keys.json"]
open(f"{out}/walk.txt", "w").write("\n".join(lines) + "\n")
PY
size=(--width 1280 --height 720)
in_x "$out/walk.log" "${size[@]}" --no-autosave --script "$out/walk.txt" || { cat "$out/walk.log"; exit 1; }
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
def result(f):
    return json.load(open(f))["result"]
tasks = 0
for path in sorted(glob.glob("assets/lessons/*.json")):
    name = os.path.splitext(os.path.basename(path))[0]
    lesson = json.load(open(path))
    for k, step in enumerate(lesson["steps"]):
        r = result(f"{out}/{name}_{k}_before.json")
        where = f"{name} step {k + 1}"
        assert r["lesson"]["name"] == name and r["lesson"]["step"] == k, (where, r["lesson"])
        assert r["lesson"]["steps"] == len(lesson["steps"]), where
        assert "lesson" not in r["errors"] and "file" not in r["errors"], (where, r["errors"])
        if "task" not in step:
            assert r["lesson"]["task"] is None, where
            continue
        tasks += 1
        assert r["lesson"]["task"] == step["task"]["instruction"], where
        assert r["lesson"]["task_done"] is False, where + ": the task is done before its solution"
        a = result(f"{out}/{name}_{k}_after.json")
        assert a["lesson"]["task_done"] is True, (where + ": the solution does not do the task", a["errors"])
assert tasks >= 6, tasks
u = result(f"{out}/undo.json")
assert u["lesson"]["step"] == 1 and u["lesson"]["task_done"] is False, u["lesson"]
r = result(f"{out}/resume.json")
assert r["lesson"]["name"] == "1_attention_one_head" and r["lesson"]["step"] == 2, r["lesson"]
b = result(f"{out}/back.json")
assert b["lesson"]["step"] == 1, b["lesson"]
k = result(f"{out}/keys.json")  # Ctrl+Right twice, Ctrl+Left once
assert k["lesson"]["step"] == 2 and k["stage"] == "scores", (k["lesson"], k["stage"])
print(f"lessons: every step applies, {tasks} tasks false before their solution and true after")
PY

# Broken lesson files: refused at start with exit 2, the file, the step and the rule named.
good='{"title": "t", "steps": [{"title": "a", "narration": "n"}, '
refuse() {  # refuse NAME JSON EXPECTED...
  local name=$1 json=$2
  shift 2
  printf '%s' "$json" >"$out/$name.json"
  if in_x "$out/$name.log" "${size[@]}" --no-autosave --lesson "$out/$name.json" --frames 1 --screenshot "$out/$name.png"; then
    echo "broken lesson $name was accepted"; exit 1
  fi
  [ "$(cat "$out/$name.log.rc")" = 2 ] || { echo "$name: exit $(cat "$out/$name.log.rc"), not 2"; cat "$out/$name.log"; exit 1; }
  for want in "$out/$name.json" "$@"; do
    grep -qF -- "$want" "$out/$name.log" || { echo "$name: no \"$want\" in:"; cat "$out/$name.log"; exit 1; }
  done
}
refuse not_json '{"title": ' "not JSON"
refuse no_steps '{"title": "t", "steps": []}' '"steps" must be a non-empty list'
refuse bad_action "$good"'{"title": "b", "narration": "n", "setup": ["screenshot x.png"]}]}' \
  "step 2:" "a lesson's lines may use open, tab, set"
refuse unknown_action "$good"'{"title": "b", "narration": "n", "setup": ["sett num_heads 2"]}]}' \
  "step 2:" 'unknown action "sett"'
refuse arg_count "$good"'{"title": "b", "narration": "n", "setup": ["mask-preset"]}]}' \
  "step 2:" "mask-preset takes 1 argument"
refuse bad_check "$good"'{"title": "b", "narration": "n", "task": {"instruction": "i", "check": {"heads": 2}, "solution": ["set num_heads 2"]}}]}' \
  "step 2:" 'check "heads" is not something a check reads'
refuse no_solution "$good"'{"title": "b", "narration": "n", "task": {"instruction": "i", "check": {"num_heads": 2}}}]}' \
  "step 2:" '"solution" must hold the script lines'
refuse no_narration "$good"'{"title": "b"}]}' "step 2:" '"narration" is missing'
refuse unknown_field "$good"'{"title": "b", "narration": "n", "naration": "x"}]}' "step 2:" 'unknown field "naration"'
refuse bad_point "$good"'{"title": "b", "narration": "n", "point_at": "Heds"}]}' "step 2:" 'point_at "Heds"'
refuse open_quote "$good"'{"title": "b", "narration": "n", "setup": ["set sentence \"the cat"]}]}' \
  "step 2:" "a quote is not closed"
refuse bad_value "$good"'{"title": "b", "narration": "n", "setup": ["set num_heads two"]}]}' \
  "step 2:" "expected an integer"
in_x "$out/no_lesson.log" "${size[@]}" --no-autosave --lesson no_such_lesson --frames 1 --screenshot "$out/x.png" && exit 1
grep -q 'no lesson "no_such_lesson"; the lessons are 1_attention_one_head' "$out/no_lesson.log" || { cat "$out/no_lesson.log"; exit 1; }

# The command line lists them all; a broken file in a folder is named and exits 2.
"$cli" lesson-list >"$out/list.txt"
[ "$(wc -l <"$out/list.txt")" = "$(ls assets/lessons/*.json | wc -l)" ] || { cat "$out/list.txt"; exit 1; }
grep -q '^2_many_heads  *Many heads  *8 steps$' "$out/list.txt" || { cat "$out/list.txt"; exit 1; }
mkdir -p "$out/bad_dir" && cp "$out/no_narration.json" "$out/bad_dir/"
if "$cli" lesson-list --dir "$out/bad_dir" 2>"$out/list_bad.txt"; then echo "lesson-list accepted a broken lesson"; exit 1; fi
grep -q 'step 2: "narration" is missing' "$out/list_bad.txt" || { cat "$out/list_bad.txt"; exit 1; }
echo "app_lessons: ok"
