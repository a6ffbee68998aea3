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
