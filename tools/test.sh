#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test (ctest prints the summary).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
ctest --preset default
