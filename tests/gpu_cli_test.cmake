# `mha compute --backend gpu` where no OpenGL 4.3 context can be had (Mesa told to offer 3.3 only):
# it must still exit 0 with the CPU's result, and say that the GPU path fell back and why.
# Run as: cmake -DMHA=<mha> -P gpu_cli_test.cmake
set(ENV{MESA_GL_VERSION_OVERRIDE} "3.3")
execute_process(COMMAND ${MHA} compute --torch-seed 0 --batch 2 --tgt-len 5 --embed-dim 8 --num-heads 2
                        --causal --backend gpu
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mha compute --backend gpu without GL 4.3 exited ${rc}:\n${out}\n${err}")
endif()
foreach(want "cpu backend)" "GPU path fell back to cpu: " "OpenGL 4.3" "output (2, 5, 8):")
  string(FIND "${out}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "expected \"${want}\" in the output of mha compute --backend gpu:\n${out}")
  endif()
endforeach()
