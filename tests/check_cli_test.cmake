# `mha check` without torch: tensors computed elsewhere checked against a scenario (the right output,
# the concatenated heads without out_proj, a wrong shape), the scenario as a PyTorch test file, and
# the refusals (no Python, a Python without torch, missing arguments), each with its exit status.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(SCENARIO ${SRC}/assets/presets/causal_lm.json)

function(expect_run rc_want pattern)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL ${rc_want} OR NOT "${out}${err}" MATCHES "${pattern}")
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "${cmd}\nexpected exit ${rc_want} and /${pattern}/, got exit ${rc}:\n${out}${err}")
  endif()
endfunction()

# The engine's own output for the scenario, and its trace (concat: the heads before out_proj).
expect_run(0 "wrote" ${MHA} compute --scenario ${SCENARIO} --out ${OUT}/ref --quiet)

expect_run(0 "\"verdict\": \"correct\"" ${MHA} check --scenario ${SCENARIO} --output ${OUT}/ref/output.npy
           --attn-weights ${OUT}/ref/attn_weights.npy --json)
expect_run(0 "verdict: correct" ${MHA} check --scenario ${SCENARIO} --output ${OUT}/ref/output.npy)
expect_run(1 "\"mistakes\": \\[[ \n]*\"no_output_projection\"" ${MHA} check --scenario ${SCENARIO}
           --output ${OUT}/ref/trace/concat.npy --json)
expect_run(1 "no_output_projection: no output projection; fix: return self.W_o\\(context\\)" ${MHA} check
           --scenario ${SCENARIO} --output ${OUT}/ref/trace/concat.npy)
expect_run(2 "--output holds \\(1, 8, 10, 10\\), expected \\(1, 10, 64\\)" ${MHA} check --scenario ${SCENARIO}
           --output ${OUT}/ref/attn_weights.npy)

# Copy as PyTorch: a test file; grouped-query heads have no torch module, so none is written.
expect_run(0 "wrote ${OUT}/test_causal.py" ${MHA} check --scenario ${SCENARIO} --emit-test ${OUT}/test_causal.py)
file(READ ${OUT}/test_causal.py py)
if(NOT py MATCHES "nn.MultiheadAttention\\(E, H, bias=True, batch_first=True\\)" OR NOT py MATCHES "expected = t\\(\\[")
  message(FATAL_ERROR "the emitted test lacks the module or the expected output:\n${py}")
endif()
expect_run(2 "no grouped-query heads" ${MHA} check --scenario ${SRC}/assets/presets/gqa.json --emit-test ${OUT}/gqa.py)

# Refusals.
expect_run(2 "give your Python file" ${MHA} check)
expect_run(2 "--scenario needs --output" ${MHA} check --scenario ${SCENARIO})
expect_run(2 "no such file" ${MHA} check ${OUT}/missing.py)
expect_run(2 "no Python at /nonexistent/python3.*mha check --scenario" ${MHA} check
           ${SRC}/tests/check/correct_keep.py --python /nonexistent/python3)
expect_run(2 "expected NAME=ROLE" ${MHA} check ${SRC}/tests/check/correct_keep.py --map W_q=query)
# A Python whose site packages (torch, numpy) are out of reach: exit 2, naming python3-torch and the
# torch-free path.
file(WRITE ${OUT}/python_without_torch "#!/bin/sh\nexec ${PYTHON} -S \"$@\"\n")
file(CHMOD ${OUT}/python_without_torch PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
expect_run(2 "cannot import torch.*python3-torch.*--scenario S.json --output OUT.npy" ${MHA} check
           ${SRC}/tests/check/correct_keep.py --python ${OUT}/python_without_torch)
expect_run(2 "\"kind\": \"no_torch\"" ${MHA} check ${SRC}/tests/check/correct_keep.py
           --python ${OUT}/python_without_torch --json)
