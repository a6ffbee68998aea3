# `mha compute --model --ablate`: head knock-outs from the command line. The "before" column is the
# plain forward's top-5; a knock-out in an early layer moves later heads' patterns, one in the last
# layer moves none; --ablate-all-but is the complement; the modes differ; --out records the what-if;
# every refusal exits 2 naming the option.
file(REMOVE_RECURSE ${OUT})
set(MODEL ${SRC}/tests/fixtures/gpt2/f32)
file(READ ${MODEL}/expected/text.txt TEXT)

include(${CMAKE_CURRENT_LIST_DIR}/cli_expect.cmake)

function(require text pattern what)
  if(NOT text MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: expected /${pattern}/ in:\n${text}")
  endif()
endfunction()

# The top-k lines of a plain run: "  TOKEN  P %".
expect_ok("plain" compute --model ${MODEL} --text "${TEXT}")
string(REGEX MATCHALL "\n  [^\n]+ %" plain_lines "${OUT_TEXT}")
list(LENGTH plain_lines n)
if(NOT n EQUAL 5)
  message(FATAL_ERROR "the plain run's top-5 has ${n} lines:\n${OUT_TEXT}")
endif()

expect_ok("--ablate 0.1" compute --model ${MODEL} --text "${TEXT}" --ablate 0.1)
set(zero_text "${OUT_TEXT}")
require("${zero_text}" "KNOCK-OUT, a what-if, not torch: head 0.1 zeroed" "--ablate 0.1")
require("${zero_text}" "next token, top 5 before -> after" "--ablate 0.1")
# The left column is the plain forward's, line for line.
string(REGEX MATCHALL "\n  [^\n]+ %  +->" before_lines "${zero_text}")
list(LENGTH before_lines n)
if(NOT n EQUAL 5)
  message(FATAL_ERROR "--ablate prints ${n} before/after lines:\n${zero_text}")
endif()
foreach(i RANGE 4)
  list(GET plain_lines ${i} p)
  list(GET before_lines ${i} b)
  string(STRIP "${p}" p)
  string(REGEX REPLACE " +->$" "" b "${b}")
  string(STRIP "${b}" b)
  if(NOT p STREQUAL b)
    message(FATAL_ERROR "before column line ${i} is '${b}', the plain run says '${p}'")
  endif()
endforeach()
# A head of layer 0: the heads of layers 1 and 2 read a changed residual stream.
require("${zero_text}" "heads after layer 0 whose pattern changed \\(max \\|dw\\| >= 0.001\\): \n  1\\.[0-3]  max \\|dw\\| [0-9.]+\n"
        "--ablate 0.1 lists later heads")
if(zero_text MATCHES "\n  0\\.[0-3]  max")
  message(FATAL_ERROR "a head of the knocked-out layer is listed as changed:\n${zero_text}")
endif()

# The last layer: no later heads.
expect_ok("--ablate 2.0,2.3" compute --model ${MODEL} --text "${TEXT}" --ablate 2.0,2.3)
require("${OUT_TEXT}" "heads 2.0,2.3 zeroed" "--ablate 2.0,2.3")
require("${OUT_TEXT}" "later layers: none \\(layer 2 is the last\\)" "--ablate 2.0,2.3")

# All but head 1 of layer 0 is heads 0, 2 and 3 knocked out.
expect_ok("--ablate-all-but" compute --model ${MODEL} --text "${TEXT}" --ablate 0.1 --ablate-all-but)
require("${OUT_TEXT}" "heads 0.0,0.2,0.3 zeroed" "--ablate-all-but")
string(REGEX REPLACE "^.*before -> after" "" all_but "${OUT_TEXT}")
expect_ok("--ablate 0.0,0.2,0.3" compute --model ${MODEL} --text "${TEXT}" --ablate 0.0,0.2,0.3)
string(REGEX REPLACE "^.*before -> after" "" listed "${OUT_TEXT}")
if(NOT all_but STREQUAL listed)
  message(FATAL_ERROR "--ablate 0.1 --ablate-all-but differs from --ablate 0.0,0.2,0.3:\n${all_but}\n${listed}")
endif()

# Mean-ablation is another what-if: the after column moves.
expect_ok("--ablate-mode mean" compute --model ${MODEL} --text "${TEXT}" --ablate 0.1 --ablate-mode mean)
require("${OUT_TEXT}" "head 0.1 mean-ablated" "--ablate-mode mean")
string(REGEX REPLACE "^.*before -> after" "" mean_after "${OUT_TEXT}")
string(REGEX REPLACE "^.*before -> after" "" zero_after "${zero_text}")
if(mean_after STREQUAL zero_after)
  message(FATAL_ERROR "zero and mean knock-outs print the same:\n${mean_after}")
endif()

# --out: the stages are the knocked-out forward's, and trace.json says so.
expect_ok("--ablate --out" compute --model ${MODEL} --text "${TEXT}" --ablate 0.1 --layer 0 --out ${OUT}/l0)
file(READ ${OUT}/l0/trace.json meta)
foreach(key "\"knockouts\": \"0.1\"" "\"ablation\": \"zero\"" "\"next_token_top_k_before_knockouts\""
        "what-if, not torch: head 0.1 zeroed")
  string(FIND "${meta}" "${key}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "trace.json lacks ${key}")
  endif()
endforeach()

# Refusals.
expect_refused("head outside" "--ablate 3.0: the model has 3 layers of 4 heads" compute --model ${MODEL} --text a --ablate 3.0)
expect_refused("head index outside" "--ablate 0.4: the model has 3 layers of 4 heads" compute --model ${MODEL} --text a --ablate 0.4)
expect_refused("not layer.head" "--ablate: \"1\" is not layer.head" compute --model ${MODEL} --text a --ablate 1)
expect_refused("trailing comma" "--ablate: \"\" is not layer.head" compute --model ${MODEL} --text a --ablate 0.1,)
expect_refused("bad mode" "--ablate-mode is zero or mean" compute --model ${MODEL} --text a --ablate 0.1 --ablate-mode half)
expect_refused("all-but alone" "--ablate-all-but needs --ablate" compute --model ${MODEL} --text a --ablate-all-but)
expect_refused("without a model" "goes with --model" compute --torch-seed 1 --batch 1 --tgt-len 2 --embed-dim 4 --num-heads 2 --ablate 0.1)
