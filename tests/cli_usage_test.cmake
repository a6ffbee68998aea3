# The command-line conventions of both programs: --version prints "<name> <version>" and exits 0;
# every usage error exits 2 with one line of reason and the usage line; `mha help CMD` prints the
# command's options. Run with -DMHA=... -DSTUDIO=... (may be empty) -DVERSION=...
include(${CMAKE_CURRENT_LIST_DIR}/cli_expect.cmake)

expect_ok("mha --version" --version)
if(NOT OUT_TEXT STREQUAL "mha ${VERSION}\n")
  message(FATAL_ERROR "mha --version printed '${OUT_TEXT}', expected 'mha ${VERSION}'")
endif()

# Reason on the first line, the usage line (naming the command) on the second.
set(usage "^mha: error: [^\n]+\nusage: mha ")
expect_refused("no subcommand" "${usage}compute\\|bench\\|export")
expect_refused("unknown subcommand" "no command 'frobnicate'\nusage: mha compute" frobnicate)
expect_refused("unknown option" "${usage}compute \\[OPTIONS\\].*mha help compute" compute --bogus)
expect_refused("missing value" "--batch.*missing\nusage: mha compute" compute --batch)
expect_refused("bad number" "Could not convert: --batch = x\nusage: mha compute" compute --batch x)
expect_refused("bad choice" "--backend.*\nusage: mha compute" compute --torch-seed 1 --backend fast)
expect_refused("unknown option of export" "${usage}export \\[OPTIONS\\]" export --nope 1)
expect_refused("help on no command" "no command 'nope'" help nope)

expect_ok("mha help compute" help compute)
if(NOT OUT_TEXT MATCHES "--torch-seed" OR NOT OUT_TEXT MATCHES "--num-heads")
  message(FATAL_ERROR "mha help compute lacks compute's options:\n${OUT_TEXT}")
endif()
set(compute_help "${OUT_TEXT}")
expect_ok("mha compute --help" compute --help)
if(NOT OUT_TEXT STREQUAL compute_help)
  message(FATAL_ERROR "mha help compute and mha compute --help differ")
endif()
expect_ok("mha help" help)
if(NOT OUT_TEXT MATCHES "compute" OR NOT OUT_TEXT MATCHES "gpu-check" OR NOT OUT_TEXT MATCHES "--version")
  message(FATAL_ERROR "mha help does not list the commands:\n${OUT_TEXT}")
endif()

# mha-studio parses before it opens a window, so none of this needs a display.
if(STUDIO)
  set(MHA ${STUDIO})
  expect_ok("mha-studio --version" --version)
  if(NOT OUT_TEXT STREQUAL "mha-studio ${VERSION}\n")
    message(FATAL_ERROR "mha-studio --version printed '${OUT_TEXT}'")
  endif()
  set(usage "^mha-studio: error: [^\n]+\nusage: mha-studio \\[OPTIONS\\]")
  expect_refused("mha-studio unknown option" "${usage}" --bogus)
  expect_refused("mha-studio bad number" "Could not convert: --frames = x\nusage: mha-studio" --frames x)
  expect_refused("mha-studio bad choice" "${usage}" --backend fast)
endif()
