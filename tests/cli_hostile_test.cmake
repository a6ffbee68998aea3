# `mha` on hostile input, end to end: sizes of 0 or past the limits refused with the option's name
# (never taken for "default"), files in --inputs that nothing reads named in a warning, key.npy
# without value.npy refused, --out over an input refused, a user's folder not replaced, an earlier
# run's folder replaced whole.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
include(${CMAKE_CURRENT_LIST_DIR}/cli_expect.cmake)
set(SEED compute --torch-seed 1 --batch 1 --tgt-len 3 --embed-dim 4 --num-heads 2)

# Zero and negative sizes: refused, naming the option and the range.
expect_refused("--src-len 0" "--src-len 0: src_len \\(S\\) must be from 1 to 1048576" ${SEED} --src-len 0)
expect_refused("--kdim 0" "--kdim 0: kdim must be from 1" ${SEED} --kdim 0)
expect_refused("--num-heads 0" "--num-heads 0: num_heads \\(H\\) must be from 1"
               compute --torch-seed 1 --batch 1 --tgt-len 3 --embed-dim 4 --num-heads 0)
expect_refused("--batch -2" "--batch -2: batch \\(N\\) must be from 1"
               compute --torch-seed 1 --batch -2 --tgt-len 3 --embed-dim 4 --num-heads 2)
expect_refused("--tgt-len past the limit" "--tgt-len 2000000: tgt_len \\(L\\) must be from 1 to 1048576"
               compute --torch-seed 1 --batch 1 --tgt-len 2000000 --embed-dim 4 --num-heads 2)
expect_refused("bench --sgemm huge" "--sgemm 1000000: sgemm n must be from 1 to 16384" bench --sgemm 1000000)

# --inputs: a mask under a name nothing reads is named; key.npy without value.npy is refused.
file(MAKE_DIRECTORY ${OUT}/inputs)
foreach(f query key value in_proj_weight out_proj.weight attn_mask)
  file(COPY ${SRC}/tests/fixtures/notebook_causal_per_batch/${f}.npy DESTINATION ${OUT}/inputs)
endforeach()
file(RENAME ${OUT}/inputs/attn_mask.npy ${OUT}/inputs/attn-mask.npy)
expect_ok("--inputs with attn-mask.npy" compute --inputs ${OUT}/inputs --num-heads 2)
if(NOT OUT_TEXT MATCHES "warning: [^\n]*attn-mask\\.npy is not read")
  message(FATAL_ERROR "no warning for attn-mask.npy:\n${OUT_TEXT}")
endif()
file(REMOVE ${OUT}/inputs/value.npy)
expect_refused("key.npy without value.npy" "key\\.npy is there but value\\.npy is not" compute --inputs ${OUT}/inputs --num-heads 2)
file(REMOVE ${OUT}/inputs/key.npy)
expect_ok("neither key.npy nor value.npy" compute --inputs ${OUT}/inputs --num-heads 2)
if(NOT OUT_TEXT MATCHES "self-attention, key = value = query")
  message(FATAL_ERROR "self-attention from query.npy alone is not said:\n${OUT_TEXT}")
endif()

# --out over an input: refused, and the input is untouched.
file(SHA256 ${OUT}/inputs/query.npy before)
expect_refused("--out = --inputs" "it is, or holds, the input" compute --inputs ${OUT}/inputs --num-heads 2 --out ${OUT}/inputs)
file(SHA256 ${OUT}/inputs/query.npy after)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "--out over --inputs changed query.npy")
endif()
expect_refused("--out = --scenario" "it is, or holds, the input"
               compute --scenario ${SRC}/assets/presets/cat_sat_mat.json --out ${SRC}/assets/presets/)

# A folder of the user's is refused; an earlier run's is replaced whole.
file(WRITE ${OUT}/mine/notes.txt "keep me")
expect_refused("--out a user's folder" "not an earlier run's output" ${SEED} --out ${OUT}/mine)
if(NOT EXISTS ${OUT}/mine/notes.txt)
  message(FATAL_ERROR "--out deleted a user's folder")
endif()
expect_ok("first run" ${SEED} --out ${OUT}/run)
file(WRITE ${OUT}/run/stray.npy "from the first run")
expect_ok("second run" compute --torch-seed 2 --batch 1 --tgt-len 3 --embed-dim 4 --num-heads 2 --out ${OUT}/run)
if(EXISTS ${OUT}/run/stray.npy OR NOT EXISTS ${OUT}/run/trace/q_heads.npy)
  message(FATAL_ERROR "the second run did not replace the folder whole")
endif()
file(GLOB leftovers ${OUT}/.*)
if(leftovers)
  message(FATAL_ERROR "temp files or staging folders left: ${leftovers}")
endif()

# mha export: --out over any input refused (scenario, --inputs, --attention, --font), the input
# untouched; --out DIR/ replaces an earlier export's folder whole and refuses a user's folder.
set(EXPORT_SEED export --torch-seed 1 --batch 1 --tgt-len 3 --embed-dim 4 --num-heads 2)
file(COPY ${SRC}/assets/presets/cat_sat_mat.json DESTINATION ${OUT}/exp)
file(SHA256 ${OUT}/exp/cat_sat_mat.json before)
expect_refused("export --out = --scenario" "it is, or holds, the input"
               export --scenario ${OUT}/exp/cat_sat_mat.json --format png --out ${OUT}/exp/cat_sat_mat.json)
expect_refused("export --out DIR/ holding --scenario" "it is, or holds, the input"
               export --scenario ${OUT}/exp/cat_sat_mat.json --out ${OUT}/exp/)
file(SHA256 ${OUT}/exp/cat_sat_mat.json after)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "export --out over --scenario changed it")
endif()
expect_refused("export --out = --inputs/query.npy" "it is, or holds, the input"
               export --inputs ${OUT}/inputs --num-heads 2 --format csv --out ${OUT}/inputs/query.npy)
expect_ok("a forward to draw" ${SEED} --out ${OUT}/fwd)
expect_refused("export --out = --attention" "it is, or holds, the input"
               export --attention ${OUT}/fwd/attn_weights.npy --format png --out ${OUT}/fwd/attn_weights.npy)
file(COPY ${SRC}/assets/fonts/DejaVuSans.ttf DESTINATION ${OUT}/exp)
expect_refused("export --out = --font" "it is, or holds, the input"
               ${EXPORT_SEED} --font ${OUT}/exp/DejaVuSans.ttf --format png --out ${OUT}/exp/DejaVuSans.ttf)
expect_refused("export --out a user's folder" "not an earlier run's output" ${EXPORT_SEED} --out ${OUT}/mine/)
if(NOT EXISTS ${OUT}/mine/notes.txt)
  message(FATAL_ERROR "export --out deleted a user's folder")
endif()
expect_ok("first export" ${EXPORT_SEED} --out ${OUT}/figs/)
file(WRITE ${OUT}/figs/stray.png "from the first export")
expect_ok("second export" ${EXPORT_SEED} --format csv --out ${OUT}/figs/)
if(EXISTS ${OUT}/figs/stray.png OR EXISTS ${OUT}/figs/attn_weights_b0_head0.png
   OR NOT EXISTS ${OUT}/figs/attn_weights_b0_head0.csv OR NOT EXISTS ${OUT}/figs/index.json)
  message(FATAL_ERROR "the second export did not replace the folder whole")
endif()
# A failure half-way (a bad --batch-index is found only when drawing) leaves the folder as it was.
expect_refused("export that fails" "batch" ${EXPORT_SEED} --batch-index 5 --out ${OUT}/figs/)
if(NOT EXISTS ${OUT}/figs/attn_weights_b0_head0.csv)
  message(FATAL_ERROR "a failed export damaged the earlier export's folder")
endif()
# Not a terminal here: no progress line on stderr, and --quiet is accepted.
execute_process(COMMAND ${MHA} ${EXPORT_SEED} --quiet --out ${OUT}/figs/ RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0 OR err MATCHES "exporting|\\[#")
  message(FATAL_ERROR "export to a pipe printed progress (${rc}): ${err}")
endif()
execute_process(COMMAND ${MHA} ${SEED} --quiet RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0 OR NOT err STREQUAL "")
  message(FATAL_ERROR "compute --quiet printed on stderr (${rc}): ${err}")
endif()
file(GLOB leftovers ${OUT}/.* ${OUT}/figs/.*)
if(leftovers)
  message(FATAL_ERROR "temp files or staging folders left by export: ${leftovers}")
endif()
