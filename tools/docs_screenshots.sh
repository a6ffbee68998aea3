#!/usr/bin/env bash
# Screenshots of every view for docs/images/views/: at 1280x720 with the presenter font at 2x (a
# projector) and at 1920x1080, taken by the scripted UI (docs/scripting.md) under Xvfb.
#   bash tools/docs_screenshots.sh [BUILD_DIR]      (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
app=${1:-build}/mha-studio
out=docs/images/views
mkdir -p "$out"
XDG_CONFIG_HOME=$(mktemp -d)  # the default window and layout, not this user's remembered ones
export XDG_CONFIG_HOME
shoot() {  # shoot SIZE W H PRESENTER_LINES
  local size=$1 w=$2 h=$3 present=$4 dir="$out/$1" script
  mkdir -p "$dir"
  script=$(mktemp)
  {
    for pair in "model_induction overview Overview" "model_induction token_lines Token lines" \
                "cat_sat_mat pipeline Pipeline" "cat_sat_mat reshape Reshape" "cat_sat_mat heads Heads" \
                "padded_batch mask Mask" "cat_sat_mat complexity Complexity" "cat_sat_mat large_l Large L" \
                "cat_sat_mat attention_file Attention file"; do
      read -r preset file tab <<<"$pair"
      echo "open assets/presets/$preset.json"
      printf '%b' "$present"
      echo "tab \"$tab\""
      [[ $file == token_lines ]] && echo 'hover "Token lines" 9 8'
      echo "screenshot $dir/$file.png"
      echo "unhover"
    done
    echo "open assets/presets/cat_sat_mat.json"
    printf '%b' "$present"
    echo "mask-paint 3 1 block"
    echo "compare previous live"
    echo "screenshot $dir/compare.png"
  } >"$script"
  xvfb-run -a -s "-screen 0 ${w}x${h}x24" "$app" --width "$w" --height "$h" --script "$script"
  rm -f "$script"
}
shoot 1280x720-font2x 1280 720 'set presenter true\nset font_scale 2\n'
shoot 1920x1080 1920 1080 ''
ls "$out"/*/
