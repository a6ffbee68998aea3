#!/usr/bin/env bash
# Installs what is missing, then configures and builds into build/ (Release, portable flags).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
# Under CI a compiler warning is an error: the build stays warning-free.
werror=OFF
[[ "${CI:-}" == "true" ]] && werror=ON
cmake --preset default -DMHA_WERROR="$werror" >/dev/null
cmake --build --preset default -j"$(nproc)" "$@"
