#!/usr/bin/env bash
# Installs the Debian 12 packages MHA Studio needs to build and test. Idempotent: it runs
# `apt-get update` once and installs only when something is missing. --torch adds python3-torch
# (only needed to regenerate the reference fixtures: tools/gen_fixtures.py); --sanitizers adds clang.
set -euo pipefail
pkgs=(cmake g++ make pkg-config libeigen3-dev catch2 nlohmann-json3-dev libcli11-dev
      libimgui-dev libstb-dev libglfw3-dev libepoxy-dev xvfb xauth libgl1-mesa-dri
      python3                        # tests/check_layering.py
      libcairo2-dev libfreetype-dev  # figures: cairo draws PNG, SVG and PDF; FreeType reads the font
      libfontconfig-dev              # the font fallback (platform/data_dir.cpp)
      scdoc desktop-file-utils appstream dpkg-dev file  # man pages; install test: validators, cpack -G DEB
      libegl1-mesa-dev libegl-mesa0  # EGL headers + Mesa's EGL: the GPU path's headless llvmpipe context
      mesa-vulkan-drivers            # lavapipe, for the GPU tests on a second GL implementation (zink)
      poppler-utils)                 # pdftotext, pdfinfo: the lesson handout test reads the PDF it wrote
if [[ "${1:-}" == "--torch" ]]; then pkgs+=(python3-torch python3-numpy libopenblas0-pthread); fi
# --sanitizers: clang with libFuzzer, ASan, UBSan and TSan (tools/test_sanitizers.sh, tools/fuzz.sh).
if [[ "${1:-}" == "--sanitizers" ]]; then pkgs+=(clang libclang-rt-14-dev); fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then exit 0; fi

echo "installing: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
