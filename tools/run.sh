#!/usr/bin/env bash
# Quick start: builds, then opens mha-studio on the default scenario, the course notebook
# (torch.manual_seed(42), N=3, L=S=4, E=8, H=2, bias=False). With no display (a server, CI), it runs
# the app under Xvfb instead and saves a screenshot to out/course_notebook.png.
# Extra arguments go to mha-studio (e.g. --scenario assets/presets/causal_lm.json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh --target mha-studio mha >/dev/null
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]]; then
  exec build/mha-studio --scenario assets/presets/course_notebook.json "$@"
fi
mkdir -p out
echo "no display: running mha-studio under Xvfb and saving a screenshot"
xvfb-run -a -s "-screen 0 1280x720x24" build/mha-studio --scenario assets/presets/course_notebook.json \
  --tab Heads --no-autosave --screenshot out/course_notebook.png --frames 6 "$@"
