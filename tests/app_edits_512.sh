#!/usr/bin/env bash
# The real app at 512 tokens under Xvfb: a scenario with L = S = 512 opened, 40 seeded random edits
# through the same path as a user's, then its state dumped and the app closed. Run by ctest
# (app_edits_512) and, built with ASan + UBSan and with TSan, by tools/test_sanitizers.sh.
#   usage: app_edits_512.sh MHA_STUDIO OUT_DIR
set -euo pipefail
app=$1 out=$2
rm -rf "$out" && mkdir -p "$out"
cat >"$out/l512.json" <<'JSON'
{"format": "mha-studio-scenario", "version": 1, "name": "512 tokens",
 "sizes": {"batch": 1, "tgt_len": 512, "src_len": 512, "embed_dim": 64, "num_heads": 4},
 "mask": {"preset": "causal"}}
JSON
xvfb-run -a -s '-screen 0 1280x720x24' "$app" --scenario "$out/l512.json" --no-autosave --edits 40 \
  --soak-seed 3 --dump-state "$out/after.json" --exit-after-dump >"$out/app.log" 2>&1 ||
  { echo "FAIL: the app exited with an error"; cat "$out/app.log"; exit 1; }
[[ -s $out/after.json ]] || { echo "FAIL: no state dump"; cat "$out/app.log"; exit 1; }
echo "512 tokens, 40 edits: $(wc -c <"$out/after.json") bytes of scenario dumped"
