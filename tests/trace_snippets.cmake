# The PyTorch formulas the app shows for every stage run as written in torch and give the app's numbers
# (tests/trace_snippets.py): plain MHA, GQA, MQA, add_zero_attn, add_bias_kv with key padding, the
# zero policy for fully masked rows, and the temperature what-if of a scenario. Skipped without
# Debian's python3-torch.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${PYTHON} -c "import torch, numpy" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message("skipped: ${PYTHON} cannot import torch and numpy (bash tools/install_deps.sh --torch)")
  return()  # ctest reads "skipped:" (SKIP_REGULAR_EXPRESSION): cmake_language(EXIT) needs CMake 3.29
endif()

file(WRITE ${OUT}/what_if.json
  "{\"format\": \"mha-studio-scenario\", \"version\": 1, \"sizes\": {\"batch\": 2, \"tgt_len\": 5, "
  "\"embed_dim\": 16, \"num_heads\": 4, \"num_kv_heads\": 2}, \"seed\": 7, "
  "\"what_if\": {\"temperature\": 2.5, \"scale_by_sqrt_dk\": false}, \"mask\": {\"preset\": \"causal\"}}\n")

set(cases
  "notebook|--torch-seed 42 --batch 3 --tgt-len 4 --embed-dim 8 --num-heads 2 --causal"
  "gqa|--torch-seed 1 --batch 2 --tgt-len 5 --embed-dim 16 --num-heads 4 --num-kv-heads 2 --causal"
  "mqa|--torch-seed 2 --batch 2 --tgt-len 3 --src-len 6 --embed-dim 12 --num-heads 3 --num-kv-heads 1"
  "zero_attn|--torch-seed 3 --batch 1 --tgt-len 4 --embed-dim 8 --num-heads 2 --causal --add-zero-attn"
  "zero_policy|--torch-seed 4 --batch 1 --tgt-len 4 --embed-dim 8 --num-heads 2 --causal --fully-masked zero"
  "bias_kv|--inputs ${SRC}/tests/fixtures/bias_kv_zero_attn --num-heads 2 --add-zero-attn"
  "what_if|--scenario ${OUT}/what_if.json")
foreach(c ${cases})
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(parts UNIX_COMMAND "${args}")
  execute_process(COMMAND ${MHA} compute ${parts} --backend reference --out ${OUT}/${name}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: mha compute failed (${rc}): ${err}")
  endif()
  set(weights ${OUT}/${name})
  if(name STREQUAL "bias_kv")
    set(weights ${SRC}/tests/fixtures/bias_kv_zero_attn)
  endif()
  execute_process(COMMAND ${PYTHON} ${SRC}/tests/trace_snippets.py ${OUT}/${name} ${weights}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: the shown formulas do not reproduce the app (${rc}):\n${out}${err}")
  endif()
  message("${name}:\n${out}")
endforeach()
