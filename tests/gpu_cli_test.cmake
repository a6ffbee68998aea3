# The GPU path from the command line. Run as: cmake -DMHA=<mha> [-DMODE=self_check -DOUT=<dir>] -P gpu_cli_test.cmake
# Default: `mha compute --backend gpu` where no OpenGL 4.3 context can be had (Mesa told to offer
# 3.3 only) must still exit 0 with the CPU's result, and say that the GPU path fell back and why.
# MODE=self_check: `mha gpu-check` trusts this driver (exit 0), refuses one whose softmax is
# perturbed (MHA_GPU_PERTURB=softmax, exit 1) naming the case, stage and index, exits 2 on usage
# errors; and `mha compute --backend gpu` on the perturbed driver computes on the CPU and says why,
# in its summary and in trace.json.

function(expect_all text what)
  foreach(want IN LISTS ARGN)
    string(FIND "${text}" "${want}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "expected \"${want}\" in ${what}:\n${text}")
    endif()
  endforeach()
endfunction()

set(compute_args compute --torch-seed 0 --batch 2 --tgt-len 5 --embed-dim 8 --num-heads 2 --causal --backend gpu)

if(NOT MODE)
  set(ENV{MESA_GL_VERSION_OVERRIDE} "3.3")
  execute_process(COMMAND ${MHA} ${compute_args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mha compute --backend gpu without GL 4.3 exited ${rc}:\n${out}\n${err}")
  endif()
  expect_all("${out}" "the output of mha compute --backend gpu"
             "cpu backend)" "GPU path fell back to cpu: " "OpenGL 4.3" "output (2, 5, 8):")
  return()
endif()

if(NOT MODE STREQUAL "self_check")
  message(FATAL_ERROR "unknown MODE ${MODE}")
endif()

# 1. This driver passes: every case, every stage, and the verdict.
execute_process(COMMAND ${MHA} gpu-check RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mha gpu-check exited ${rc} (expected 0, trusted):\n${out}\n${err}")
endif()
expect_all("${out}" "mha gpu-check's output" "GL vendor:" "GL renderer:" "GL version:" "launch sizes: TILE=16, LOCAL_SIZE=256"
           "case tiles:" "case gqa_bias_kv:" "case row_stats:" "attn_weights         max |diff|" "row_lse"
           "verdict: trusted")
execute_process(COMMAND ${MHA} gpu-check --tile 8 --local-size 96 RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mha gpu-check --tile 8 --local-size 96 exited ${rc}:\n${out}")
endif()
expect_all("${out}" "mha gpu-check --tile 8 --local-size 96" "launch sizes: TILE=8, LOCAL_SIZE=96" "verdict: trusted")

# 2. Usage errors exit 2 and name the argument.
foreach(bad "--tile;x" "--local-size;0" "--tile;2000" "--bogus")
  execute_process(COMMAND ${MHA} gpu-check ${bad} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  list(GET bad 0 arg)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "${arg}")
    message(FATAL_ERROR "mha gpu-check ${bad}: exit ${rc} (expected 2 naming ${arg}):\n${out}\n${err}")
  endif()
endforeach()

# 3. A driver whose softmax is 1e-5 off in one weight is refused, with the case, stage and index.
set(ENV{MHA_GPU_PERTURB} "softmax")
execute_process(COMMAND ${MHA} gpu-check RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "mha gpu-check with MHA_GPU_PERTURB=softmax exited ${rc} (expected 1, refused):\n${out}\n${err}")
endif()
expect_all("${out}" "mha gpu-check's output on a perturbed driver"
           "attn_weights         max |diff| 1e-05      MISMATCH: index 1 = [0, 0, 0, 1]"
           "verdict: refused: GPU self-check failed on "
           "case tiles, stage attn_weights, index 1 = [0, 0, 0, 1] of (2, 2, 133, 263): got ")

# 4. ... and mha compute --backend gpu computes on the CPU there, and says why.
file(REMOVE_RECURSE "${OUT}")
execute_process(COMMAND ${MHA} ${compute_args} --out ${OUT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mha compute --backend gpu on a perturbed driver exited ${rc}:\n${out}\n${err}")
endif()
expect_all("${out}" "mha compute's summary on a perturbed driver" "cpu backend)"
           "GPU path fell back to cpu: GPU self-check failed on " "case tiles, stage attn_weights")
file(READ "${OUT}/trace.json" trace)
string(JSON reason GET "${trace}" gpu_fallback_reason)
expect_all("${reason}" "trace.json's gpu_fallback_reason" "GPU self-check failed on " "case tiles, stage attn_weights, index 1")
