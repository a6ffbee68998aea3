#!/usr/bin/env bash
# Install, relocate, run: installs the build to a prefix, copies the prefix elsewhere and runs the
# copy with the source-tree fallback off (MHA_NO_SOURCE_FALLBACK=1), so every file it reads must
# come from the install. Then: the fontconfig fallback for a missing font, the desktop entry and
# AppStream metainfo validators, the examples/ project and every public header built against the
# installed package, and `cpack -G DEB` listed with dpkg-deb.
#   install_test.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in desktop-file-validate appstreamcli dpkg-deb cpack; do
  command -v "$tool" >/dev/null || fail "$tool is missing (bash tools/install_deps.sh installs it)"
done

echo "== install and relocate"
cmake --install "$build" --prefix "$work/staged" >"$work/install.log"
cp -a "$work/staged" "$work/moved"
rm -rf "$work/staged"
p=$work/moved
export MHA_NO_SOURCE_FALLBACK=1
unset MHA_ASSETS_DIR
cd "$work"

"$p/bin/mha" --version | grep -qx "mha [0-9.]*" || fail "installed mha --version"
seed=(--torch-seed 42 --batch 1 --tgt-len 5 --embed-dim 8 --num-heads 2 --causal --head all)
formats=(png svg)
"$p/bin/mha" help export | grep -q pdf && formats+=(pdf)
for fmt in "${formats[@]}"; do
  "$p/bin/mha" export "${seed[@]}" --out "fig.$fmt" 2>err.txt || fail "installed mha export $fmt: $(cat err.txt)"
  ! grep -q "not found" err.txt || fail "installed mha export $fmt looked outside the install: $(cat err.txt)"
  case $fmt in
    png) head -c 4 fig.png | od -An -tx1 | grep -q "89 50 4e 47" || fail "fig.png is not a PNG" ;;
    svg) grep -q "</svg>" fig.svg || fail "fig.svg is not an SVG" ;;
    pdf) head -c 5 fig.pdf | grep -q "%PDF-" || fail "fig.pdf is not a PDF" ;;
  esac
  echo "exported fig.$fmt"
done
# A preset that names the shipped model: found under the install's share/mha-studio/models.
"$p/bin/mha" compute --scenario "$p/share/mha-studio/presets/model_induction.json" --out scen >/dev/null 2>err.txt ||
  fail "installed mha compute --scenario (model preset): $(cat err.txt)"
# mha check runs its Python helper from the install (the run needs torch: exit 0, or 2 saying so).
rc=0
"$p/bin/mha" check "$src/tests/check/correct_keep.py" >check.txt 2>&1 || rc=$?
{ [ $rc = 0 ] || { [ $rc = 2 ] && grep -q "cannot import torch" check.txt; }; } ||
  fail "installed mha check: exit $rc: $(cat check.txt)"

echo "== a missing font falls back to fontconfig's"
mv "$p/share/mha-studio/fonts" "$p/share/mha-studio/fonts.away"
if fc-match -f '%{file}' "DejaVu Sans" 2>/dev/null | grep -q .; then
  "$p/bin/mha" export "${seed[@]}" --out nofont.png 2>err.txt || fail "export without the shipped font: $(cat err.txt)"
  grep -q "using the system font .*(fontconfig)" err.txt || fail "no fallback message: $(cat err.txt)"
  echo "$(cat err.txt)"
else
  echo "fontconfig offers no font here: fallback not exercised"
fi
mv "$p/share/mha-studio/fonts.away" "$p/share/mha-studio/fonts"

if [[ -x $p/bin/mha-studio ]]; then
  echo "== installed mha-studio"
  "$p/bin/mha-studio" --version | grep -qx "mha-studio [0-9.]*" || fail "installed mha-studio --version"
  command -v xvfb-run >/dev/null || fail "xvfb-run is missing"
  XDG_STATE_HOME=$work/state xvfb-run -a -s '-screen 0 1280x720x24' "$p/bin/mha-studio" --no-autosave \
    --tab Heads --screenshot "$work/studio.png" >out.txt 2>err.txt || fail "mha-studio --screenshot: $(cat err.txt)"
  head -c 4 studio.png | od -An -tx1 | grep -q "89 50 4e 47" || fail "studio.png is not a PNG"
  ! grep -q "not found\|no assets folder" err.txt out.txt || fail "mha-studio looked outside the install"
  cat out.txt
fi

echo "== desktop entry, metainfo, man pages, licences"
for f in share/doc/mha-studio/LICENSE share/doc/mha-studio/THIRD_PARTY_NOTICES.md; do
  [[ -s $p/$f ]] || fail "$f not installed"
done
if [[ -x $p/bin/mha-studio ]]; then
  desktop-file-validate "$p"/share/applications/*.desktop
  appstreamcli validate --no-net "$p"/share/metainfo/*.metainfo.xml
  for f in share/icons/hicolor/scalable/apps/io.github.mhastudio.MhaStudio.svg \
           share/icons/hicolor/48x48/apps/io.github.mhastudio.MhaStudio.png; do
    [[ -s $p/$f ]] || fail "$f not installed"
  done
fi
if command -v scdoc >/dev/null; then
  for m in mha mha-studio; do grep -q "^.TH" "$p/share/man/man1/$m.1" || fail "man page $m.1 not installed"; done
fi

echo "== the examples project and every public header against the installed package"
cmake -S "$src/examples/engine_package" -B example -DCMAKE_PREFIX_PATH="$p" >example.log || fail "$(cat example.log)"
cmake --build example -j2 >>example.log 2>&1 || fail "example build: $(tail -30 example.log)"
example/attention_heads heads.png | tee example.txt
grep -q "attn_weights (3, 2, 4, 4)" example.txt || fail "example output"
mkdir -p headers
{
  echo 'cmake_minimum_required(VERSION 3.22)'
  echo 'project(mha_headers LANGUAGES CXX)'
  echo 'set(CMAKE_CXX_STANDARD 17)'
  echo 'find_package(MhaStudio REQUIRED)'
  echo 'add_library(all_headers OBJECT all.cpp)'
  echo 'target_link_libraries(all_headers PRIVATE mha::engine mha::io mha::render mha::export)'
} >headers/CMakeLists.txt
(cd "$p/include" && find mha -name '*.hpp' | sort | sed 's/.*/#include <&>/') >headers/all.cpp
[[ $(wc -l <headers/all.cpp) -gt 10 ]] || fail "too few public headers installed"
cmake -S headers -B headers/build -DCMAKE_PREFIX_PATH="$p" >headers.log && cmake --build headers/build >>headers.log 2>&1 ||
  fail "public headers: $(tail -30 headers.log)"
echo "$(wc -l <headers/all.cpp) public headers compile together as <mha/...>"

echo "== cpack -G DEB"
cpack -G DEB -B deb --config "$build/CPackConfig.cmake" >cpack.log 2>&1 || fail "cpack: $(tail -20 cpack.log)"
deb=$(ls deb/*.deb)
dpkg-deb -c "$deb" | awk '{print $6}' >deb.txt
for f in ./usr/bin/mha ./usr/share/mha-studio/fonts/DejaVuSans.ttf ./usr/share/applications/ \
         ./usr/share/metainfo/ ./usr/share/doc/mha-studio/LICENSE ./usr/include/mha/mha.hpp; do
  grep -qF "$f" deb.txt || fail "$f not in $deb"
done
echo "$deb: $(wc -l <deb.txt) entries; Depends: $(dpkg-deb -f "$deb" Depends)"
echo "install test passed"
