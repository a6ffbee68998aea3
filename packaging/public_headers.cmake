# Copies the public headers to OUT/mha/ for installation, each quoted include rewritten to the
# installed name: "tensor.hpp" -> <mha/tensor.hpp>, "model/gpt2.hpp" -> <mha/model/gpt2.hpp>.
# engine/ keeps its folders; export/ and render/ headers sit beside mha.hpp, as their quoted
# includes already assume. Run as: cmake -DOUT=dir -DHEADERS="root:relpath|..." -P public_headers.cmake
string(REPLACE "|" ";" headers "${HEADERS}")
file(REMOVE_RECURSE ${OUT}/mha)
foreach(entry IN LISTS headers)
  string(REGEX MATCH "^(.*):([^:]+)$" _ "${entry}")
  set(root "${CMAKE_MATCH_1}")
  set(rel "${CMAKE_MATCH_2}")
  file(READ "${root}/${rel}" text)
  string(REGEX REPLACE "#include \"([^\"]+)\"" "#include <mha/\\1>" text "${text}")
  file(WRITE "${OUT}/mha/${rel}" "${text}")
endforeach()
file(WRITE ${OUT}/stamp "")
