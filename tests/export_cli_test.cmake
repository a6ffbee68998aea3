# `mha export`'s colours: the app's automatic range by default (weights from 0 to their largest, not
# a fixed 0-1; scores symmetric about 0), --vmin / --vmax fixing one end or both, --row-scale, and
# the bad values refused with exit 2 before anything is written.
#   cmake -DMHA=... -DSRC=... -DOUT=... -P export_cli_test.cmake
include(${CMAKE_CURRENT_LIST_DIR}/cli_expect.cmake)
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(SEED42 --torch-seed 42 --batch 3 --tgt-len 4 --embed-dim 8 --num-heads 2 --no-bias)
set(NUM "-?[0-9.]+(e[-+][0-9]+)?")

# Random-init weights of 4 keys: the range runs from 0 to their largest, well below 1.
expect_ok("mha export (automatic range)" export ${SEED42} --head 0 --out ${OUT}/auto.png)
if(NOT OUT_TEXT MATCHES "colour range 0 to (0\\.[0-9]+)\\)")
  message(FATAL_ERROR "mha export: expected the weights' own range, 0 to their largest, got: ${OUT_TEXT}")
endif()
set(auto_top ${CMAKE_MATCH_1})
# The same range for every head and for the grid: heads share one range, as in the app.
expect_ok("mha export --head 1" export ${SEED42} --head 1 --out ${OUT}/head1.png)
expect_ok("mha export --head all" export ${SEED42} --head all --out ${OUT}/all.png)
if(NOT OUT_TEXT MATCHES "colour range 0 to ${auto_top}\\)")
  message(FATAL_ERROR "mha export --head all: expected the range 0 to ${auto_top}, got: ${OUT_TEXT}")
endif()
# Scores: diverging, symmetric about 0.
expect_ok("mha export --stage scores" export ${SEED42} --stage scores --out ${OUT}/scores.png)
if(NOT OUT_TEXT MATCHES "colour range -(${NUM}) to (${NUM})\\)" OR NOT CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_3)
  message(FATAL_ERROR "mha export --stage scores: expected a range symmetric about 0, got: ${OUT_TEXT}")
endif()
# The course's preset, every head: its own range too.
expect_ok("mha export --scenario course_notebook --head all" export
          --scenario ${SRC}/assets/presets/course_notebook.json --head all --out ${OUT}/course_all.png)
if(NOT OUT_TEXT MATCHES "3 panels, colour range 0 to 0\\.[0-9]+\\)")
  message(FATAL_ERROR "mha export --scenario course_notebook --head all: expected 0 to below 1, got: ${OUT_TEXT}")
endif()

# --vmin / --vmax: both ends fixed, one end fixed (the other automatic).
expect_ok("mha export --vmin 0 --vmax 1" export ${SEED42} --vmin 0 --vmax 1 --out ${OUT}/fixed.png)
if(NOT OUT_TEXT MATCHES "colour range 0 to 1\\)")
  message(FATAL_ERROR "mha export --vmin 0 --vmax 1: expected the range 0 to 1, got: ${OUT_TEXT}")
endif()
file(SHA256 ${OUT}/auto.png auto_sum)
file(SHA256 ${OUT}/fixed.png fixed_sum)
if(auto_sum STREQUAL fixed_sum)
  message(FATAL_ERROR "mha export: the fixed 0-1 range drew the same PNG as the automatic range")
endif()
expect_ok("mha export --vmax 0.75" export ${SEED42} --vmax 0.75 --out ${OUT}/top.svg)
if(NOT OUT_TEXT MATCHES "colour range 0 to 0\\.75\\)")
  message(FATAL_ERROR "mha export --vmax 0.75: expected the range 0 to 0.75, got: ${OUT_TEXT}")
endif()
expect_ok("mha export --vmin 0.1" export ${SEED42} --vmin 0.1 --out ${OUT}/bottom.csv --head 0)
expect_ok("mha export --vmin -0.5 (a negative number)" export ${SEED42} --vmin -0.5 --out ${OUT}/neg.png)
if(NOT OUT_TEXT MATCHES "colour range -0\\.5 to ${auto_top}\\)")
  message(FATAL_ERROR "mha export --vmin -0.5: expected -0.5 to ${auto_top}, got: ${OUT_TEXT}")
endif()
# --row-scale: each row to its own max, the colorbar 0 to 1.
expect_ok("mha export --row-scale" export ${SEED42} --row-scale --head all --out ${OUT}/rows.png)
if(NOT OUT_TEXT MATCHES "colour range 0 to 1 of each row's max\\)")
  message(FATAL_ERROR "mha export --row-scale: expected 0 to 1 of each row's max, got: ${OUT_TEXT}")
endif()

# Refused, exit 2, nothing written.
expect_refused("--vmin abc" "--vmin abc: expected a number" export ${SEED42} --vmin abc --out ${OUT}/bad.png)
expect_refused("--vmax nan" "--vmax nan: expected a finite number" export ${SEED42} --vmax nan --out ${OUT}/bad.png)
expect_refused("--vmax inf" "--vmax inf: expected a finite number" export ${SEED42} --vmax inf --out ${OUT}/bad.png)
expect_refused("--vmin above --vmax" "--vmin 0.5 is not below --vmax 0.2" export ${SEED42} --vmin 0.5 --vmax 0.2
               --out ${OUT}/bad.png)
expect_refused("--vmin equal to --vmax" "--vmin 1 is not below --vmax 1" export ${SEED42} --vmin 1 --vmax 1
               --out ${OUT}/bad.png)
expect_refused("--vmin above the automatic top" "--vmin 5 is not below the automatic top .*give --vmax too"
               export ${SEED42} --vmin 5 --out ${OUT}/bad.png)
expect_refused("--vmax below the automatic bottom" "--vmax -1 is not above the automatic bottom .*give --vmin too"
               export ${SEED42} --vmax -1 --out ${OUT}/bad.png)
expect_refused("--row-scale with --vmax" "--row-scale colours each row" export ${SEED42} --row-scale --vmax 1
               --out ${OUT}/bad.png)
expect_refused("--row-scale of scores" "--stage scores is not attn_weights" export ${SEED42} --row-scale
               --stage scores --out ${OUT}/bad.png)
expect_refused("--vmin with the reshape figure" "are for heatmaps" export ${SEED42} --figure reshape --vmin 0
               --out ${OUT}/bad.png)
if(EXISTS ${OUT}/bad.png)
  message(FATAL_ERROR "a refused mha export wrote ${OUT}/bad.png")
endif()
message(STATUS "export colours: the automatic range 0 to ${auto_top}, --vmin/--vmax, --row-scale and refusals")
