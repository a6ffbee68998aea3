// `mha`: the engine from the command line, with no GLFW or ImGui linked — the proof that the
// engine stands alone. GL comes only through mha_gpu (--backend gpu|auto), whose libepoxy loads
// libEGL/libGL on the first GPU forward. Subcommands live one per file (compute.cpp, ...).
#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "errors.hpp"

int main(int argc, char** argv) {
  CLI::App app{"mha: multi-head attention, stage by stage, equal to torch.nn.MultiheadAttention"};
  app.require_subcommand(1);
  auto run_compute = mha::cli::add_compute(app);
  auto run_bench = mha::cli::add_bench(app);
  auto run_export = mha::cli::add_export(app);
  auto run_model_info = mha::cli::add_model_info(app);
  auto run_gpu_check = mha::cli::add_gpu_check(app);
  CLI11_PARSE(app, argc, argv);
  try {
    if (app.got_subcommand("compute")) return run_compute();
    if (app.got_subcommand("bench")) return run_bench();
    if (app.got_subcommand("export")) return run_export();
    if (app.got_subcommand("model-info")) return run_model_info();
    if (app.got_subcommand("gpu-check")) return run_gpu_check();
  } catch (const mha::Error& e) {
    std::fprintf(stderr, "mha: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mha: error: %s\n", e.what());
    return 3;
  }
  return 1;
}
