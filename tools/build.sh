#!/usr/bin/env bash
# Installs what is missing, then configures and builds into build/ (Release, portable flags).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j"$(nproc)" "$@"
