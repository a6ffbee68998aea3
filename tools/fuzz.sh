#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang, ASan + UBSan) and runs each for SECONDS
# (default 60), starting from the seeds in tests/fuzz/corpus/<target>/. Prints executions and
# crashes per target; exits 1 if any target crashed (reproducers under build-fuzz/crashes/<target>/).
#   bash tools/fuzz.sh [SECONDS] [TARGET...]     e.g. bash tools/fuzz.sh 600 npy scenario
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
((${#targets[@]})) || targets=(npy safetensors scenario text cli tokenizer tokenizer_files model_config font)

command -v clang++ >/dev/null || { echo "fuzz.sh: needs clang (bash tools/install_deps.sh --sanitizers)"; exit 2; }
cmake --preset fuzz >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}"

failed=0
printf '%-16s %12s %10s %8s\n' target executions exec/s crashes
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t crashes=build-fuzz/crashes/$t log=build-fuzz/fuzz_$t.log
  rm -rf "$crashes"
  mkdir -p "$work" "$crashes"
  # Crashes, leaks, timeouts (10 s a input) and out-of-memory (2 GB) all count as failures.
  rc=0
  build-fuzz/fuzz_"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  found=$(find "$crashes" -type f | wc -l)
  printf '%-16s %12s %10s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "$found"
  if ((rc != 0 || found > 0)); then
    failed=1
    echo "fuzz_$t failed (exit $rc); log: $log"
    grep -m3 -E "ERROR|SUMMARY|Test unit written" "$log" || true
  fi
done
exit "$failed"
