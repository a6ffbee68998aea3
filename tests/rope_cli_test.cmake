# `mha export --figure rope` (and --stage scores_without_rope, the Heads view's name for it) on the
# shipped Llama-style model: one head's scores without and with the rotation and their mean by
# distance, as PNG (its size as the summary says), SVG (a filled path a cell) and PDF (the labels as
# text, read back with pdftotext where poppler-utils is installed); a scenario file with a model
# draws it too; what the figure cannot draw is refused with exit 2 and the reason.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(MODEL ${SRC}/assets/models/fortunes-llama-4x8)
set(TEXT "the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy")
include(${CMAKE_CURRENT_LIST_DIR}/cli_expect.cmake)

# PNG: the file's IHDR holds the size the summary reports.
expect_ok("export --figure rope" export --model ${MODEL} --layer 1 --text "${TEXT}" --figure rope --head 5
          --out ${OUT}/rope.png)
if(NOT OUT_TEXT MATCHES "RoPE figure ([0-9]+)×([0-9]+), head 5, colour range -([0-9.]+) to ([0-9.]+)")
  message(FATAL_ERROR "export --figure rope: unexpected summary: ${OUT_TEXT}")
endif()
set(width ${CMAKE_MATCH_1})
set(height ${CMAKE_MATCH_2})
if(NOT CMAKE_MATCH_3 STREQUAL CMAKE_MATCH_4)
  message(FATAL_ERROR "the RoPE figure's colour range is not symmetric about 0: ${OUT_TEXT}")
endif()
file(READ ${OUT}/rope.png magic LIMIT 4 HEX)
file(READ ${OUT}/rope.png ihdr OFFSET 16 LIMIT 8 HEX)
string(SUBSTRING ${ihdr} 0 8 w_hex)  # the 8 bytes: width, then height
string(SUBSTRING ${ihdr} 8 8 h_hex)
math(EXPR png_w "0x${w_hex}")
math(EXPR png_h "0x${h_hex}")
file(SIZE ${OUT}/rope.png png_bytes)
if(NOT magic STREQUAL "89504e47" OR NOT png_w EQUAL width OR NOT png_h EQUAL height OR png_bytes LESS 20000)
  message(FATAL_ERROR "rope.png: magic ${magic}, ${png_w}×${png_h} (summary ${width}×${height}), ${png_bytes} bytes")
endif()

# SVG through the view's stage name: a filled path for each cell of both 26 × 26 maps (and the colorbar's).
expect_ok("export --stage scores_without_rope" export --model ${MODEL} --layer 1 --text "${TEXT}"
          --stage scores_without_rope --head 5 --out ${OUT}/rope.svg)
file(READ ${OUT}/rope.svg svg)
string(REGEX MATCHALL "fill-rule:nonzero" cells "${svg}")
list(LENGTH cells n_cells)
if(NOT svg MATCHES "^<\\?xml[^\n]*\n<svg" OR NOT svg MATCHES "</svg>\n$" OR n_cells LESS 1352)
  message(FATAL_ERROR "rope.svg is not the figure: ${n_cells} filled paths, fewer than 2 × 26 × 26 cells")
endif()

# PDF: the text is the embedded font's, so the labels read back.
expect_ok("export --figure rope --format pdf" export --model ${MODEL} --layer 1 --text "${TEXT}" --figure rope
          --head 5 --format pdf --out ${OUT}/rope_pdf.out)
file(READ ${OUT}/rope_pdf.out pdf LIMIT 5)
if(NOT pdf MATCHES "^%PDF-")
  message(FATAL_ERROR "--format pdf did not write a PDF")
endif()
find_program(PDFTOTEXT pdftotext)
if(PDFTOTEXT)
  execute_process(COMMAND ${PDFTOTEXT} ${OUT}/rope_pdf.out - OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  foreach(label "layer 1 head 5: scores without and with RoPE" "reads K/V head 1 of 2" "without RoPE"
                "with RoPE \\(the model's\\)" "mean score by distance" "distance i - j" "quick")
    if(NOT rc EQUAL 0 OR NOT text MATCHES "${label}")
      message(FATAL_ERROR "the PDF's text lacks /${label}/ (pdftotext rc=${rc}):\n${text}")
    endif()
  endforeach()
else()
  message(STATUS "pdftotext (poppler-utils) not found: the PDF's labels are not read back")
endif()

# The Llama-style preset (a scenario with a model) draws the same head.
expect_ok("export --scenario model_gqa_rope --figure rope" export --scenario ${SRC}/assets/presets/model_gqa_rope.json
          --figure rope --head 5 --out ${OUT}/preset.png)
if(NOT OUT_TEXT MATCHES "RoPE figure [0-9]+×[0-9]+, head 5")
  message(FATAL_ERROR "export --scenario --figure rope: ${OUT_TEXT}")
endif()

# Refusals.
set(ARGS export --model ${MODEL} --layer 1 --text "the quick brown fox" --figure rope)
expect_refused("a GPT-2 model has no rotation" "rotary" export --model ${SRC}/tests/fixtures/gpt2/f32 --text "the cat"
               --figure rope --out ${OUT}/x.png)
expect_refused("all heads" "one head: give --head I" ${ARGS} --head all --out ${OUT}/x.png)
expect_refused("a head past H" "--head 8: the layer has heads 0 to 7" ${ARGS} --head 8 --out ${OUT}/x.png)
expect_refused("a folder" "one image" ${ARGS} --out ${OUT}/folder/)
expect_refused("CSV" "not csv" ${ARGS} --out ${OUT}/x.csv)
expect_refused("a fixed colour range" "symmetric about 0" ${ARGS} --vmax 3 --out ${OUT}/x.png)
expect_refused("a difference map" "no difference map" ${ARGS} --minus-head 1 --out ${OUT}/x.png)
expect_refused("the stage with --figure reshape" "leave out --figure reshape" export --model ${MODEL} --text "a b"
               --stage scores_without_rope --figure reshape --out ${OUT}/x.png)
if(EXISTS ${OUT}/x.png OR EXISTS ${OUT}/x.csv OR EXISTS ${OUT}/folder)
  message(FATAL_ERROR "a refused export wrote a file")
endif()
message(STATUS "mha export --figure rope: ${width}×${height} PNG, ${n_cells}-path SVG, PDF; refusals exit 2")
