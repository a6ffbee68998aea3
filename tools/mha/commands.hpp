// Subcommands of the `mha` command-line tool. Each registers its options on the CLI11 app and
// runs when chosen; errors are thrown as mha::Error and printed by main.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace mha::cli {

// Adds `mha compute`; returns the function that runs it once the command line is parsed.
std::function<int()> add_compute(CLI::App& app);
std::function<int()> add_bench(CLI::App& app);       // `mha bench`: timings, GFLOP/s, peak RSS (bench.cpp)
std::function<int()> add_export(CLI::App& app);      // `mha export`: PNG/SVG/CSV heatmaps (export.cpp)
std::function<int()> add_model_info(CLI::App& app);  // `mha model-info`: a GPT-2 folder (model.cpp)
std::function<int()> add_gpu_check(CLI::App& app);   // `mha gpu-check`: the GPU self-check (gpu_check.cpp)
// `mha check`: a student's implementation run, compared with the engine, its mistake named (check.cpp).
std::function<int()> add_check(CLI::App& app);
std::function<int()> add_lesson_list(CLI::App& app);  // `mha lesson-list`: the lessons (lesson.cpp)
std::function<int()> add_lesson_export(CLI::App& app);  // `mha lesson-export`: a handout (lesson.cpp)

}  // namespace mha::cli
