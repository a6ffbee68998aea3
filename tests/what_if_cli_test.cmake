# `mha compute` with the what-ifs of the scores' scale (--temperature, --no-scale) on a module and at
# one layer of a GPT-2, and the CPU path it takes by default (the app's: the reference path for the
# course notebook).
file(REMOVE_RECURSE ${OUT})
set(MODEL ${SRC}/tests/fixtures/gpt2/f32)
set(SEED42 --torch-seed 42 --batch 3 --tgt-len 4 --embed-dim 8 --num-heads 2 --no-bias)
include(${CMAKE_CURRENT_LIST_DIR}/cli_expect.cmake)

function(read_json_number file key var)
  file(READ ${file} text)
  string(JSON value GET "${text}" ${key})
  set(${var} "${value}" PARENT_SCOPE)
endfunction()

# The default path is the app's: reference for the notebook; --backend cpu still asks for Eigen.
expect_ok("compute, no --backend" compute ${SEED42} --out ${OUT}/default)
read_json_number(${OUT}/default/trace.json backend backend)
if(NOT backend STREQUAL "reference" OR NOT OUT_TEXT MATCHES "reference backend")
  message(FATAL_ERROR "the notebook without --backend ran on ${backend}, not the reference path:\n${OUT_TEXT}")
endif()
expect_ok("compute --backend cpu" compute ${SEED42} --backend cpu --out ${OUT}/cpu)
read_json_number(${OUT}/cpu/trace.json backend backend)
if(NOT backend STREQUAL "cpu")
  message(FATAL_ERROR "--backend cpu ran on ${backend}")
endif()
# Larger sizes take the Eigen path, as in the app.
expect_ok("compute, large" compute --torch-seed 1 --batch 2 --tgt-len 64 --embed-dim 128 --num-heads 4)
if(NOT OUT_TEXT MATCHES "cpu backend")
  message(FATAL_ERROR "L = 64, E = 128 did not run on the Eigen path:\n${OUT_TEXT}")
endif()

# A module: q divided by √d_k·T, or by T with --no-scale; said in the summary and in trace.json.
expect_ok("compute --temperature 3" compute ${SEED42} --temperature 3 --out ${OUT}/t3)
read_json_number(${OUT}/t3/trace.json what_if_score_divisor divisor)
if(NOT divisor MATCHES "^6(\\.0+)?$" OR NOT OUT_TEXT MATCHES "WHAT-IF, not torch: q divided by 6 ")
  message(FATAL_ERROR "--temperature 3 at d_k = 4: expected q / 6, got ${divisor}:\n${OUT_TEXT}")
endif()
expect_ok("compute --no-scale" compute ${SEED42} --no-scale --out ${OUT}/noscale)
read_json_number(${OUT}/noscale/trace.json what_if_score_divisor divisor)
if(NOT divisor MATCHES "^1(\\.0+)?$")
  message(FATAL_ERROR "--no-scale: expected q / 1, got ${divisor}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/t3/attn_weights.npy ${OUT}/default/attn_weights.npy
                RESULT_VARIABLE same)
if(same EQUAL 0)
  message(FATAL_ERROR "--temperature 3 wrote torch's attention weights")
endif()
expect_ok("compute --temperature 1" compute ${SEED42} --temperature 1 --out ${OUT}/t1)
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/t1/attn_weights.npy ${OUT}/default/attn_weights.npy
                RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  message(FATAL_ERROR "--temperature 1 is torch's computation, but its weights differ")
endif()
expect_refused("temperature 0" "--temperature must be a finite number above 0" compute ${SEED42} --temperature 0)

# A model: at --layer 1 of 3, the layers before it are torch's, the ones after it and the prediction follow.
file(READ ${MODEL}/expected/text.txt TEXT)
expect_ok("compute --model" compute --model ${MODEL} --text "${TEXT}" --out ${OUT}/model)
set(torch_text "${OUT_TEXT}")
expect_ok("compute --model --temperature" compute --model ${MODEL} --text "${TEXT}" --layer 1 --temperature 3
          --out ${OUT}/model_t3)
if(NOT OUT_TEXT MATCHES "WHAT-IF, not torch: layer 1's q divided by")
  message(FATAL_ERROR "compute --model --temperature does not say so:\n${OUT_TEXT}")
endif()
string(REGEX MATCH "next token, top 5:.*" torch_top "${torch_text}")
string(REGEX MATCH "next token, top 5:.*" what_if_top "${OUT_TEXT}")
if(torch_top STREQUAL what_if_top)
  message(FATAL_ERROR "the next-token prediction did not follow the what-if at layer 1:\n${OUT_TEXT}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/model_t3/attn_weights.npy
                        ${OUT}/model/layer_1/attn_weights.npy RESULT_VARIABLE same)
if(same EQUAL 0)
  message(FATAL_ERROR "layer 1's weights did not change with --temperature 3 there")
endif()
read_json_number(${OUT}/model_t3/trace.json what_if_score_divisor divisor)
if(NOT divisor GREATER 0)
  message(FATAL_ERROR "layer 1's trace.json does not record the what-if")
endif()
expect_ok("compute --model --no-scale, layer 2" compute --model ${MODEL} --text "${TEXT}" --layer 2 --no-scale
          --out ${OUT}/model_noscale)
expect_refused("a what-if at every layer" "--temperature and --no-scale apply at one layer" compute --model ${MODEL}
               --text "${TEXT}" --temperature 2)
