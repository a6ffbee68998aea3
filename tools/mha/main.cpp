// `mha`: the engine from the command line, with no GLFW or ImGui linked — the proof that the
// engine stands alone. GL comes only through mha_gpu (--backend gpu|auto), whose libepoxy loads
// libEGL/libGL on the first GPU forward. Subcommands live one per file (compute.cpp, ...).
// Exit status: 0 done, 2 a refused command line or input, 3 an unexpected failure.
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "cli_usage.hpp"
#include "commands.hpp"
#include "errors.hpp"
#include "model_cache.hpp"

int main(int argc, char** argv) {
  CLI::App app{"mha: multi-head attention, stage by stage, equal to torch.nn.MultiheadAttention", "mha"};
  app.require_subcommand(1);
  mha::platform::add_version_flag(app);
  auto run_compute = mha::cli::add_compute(app);
  auto run_bench = mha::cli::add_bench(app);
  auto run_export = mha::cli::add_export(app);
  auto run_model_info = mha::cli::add_model_info(app);
  auto run_gpu_check = mha::cli::add_gpu_check(app);
  auto run_check = mha::cli::add_check(app);
  auto run_lesson_list = mha::cli::add_lesson_list(app);
  auto run_lesson_export = mha::cli::add_lesson_export(app);
  // `mha help [COMMAND]`: the same text as `mha [COMMAND] --help`.
  CLI::App* help = app.add_subcommand("help", "Print the options of a command (or the list of commands)");
  std::string help_topic;
  help->add_option("command", help_topic,
                   "compute, bench, export, model-info, gpu-check, check, lesson-list or lesson-export");
  if (const int status = mha::platform::parse_command_line(app, argc, argv); status >= 0) return status;
  // Bare model names in scenarios resolve under the data folder this program found (installed or
  // the source tree's), as in the app.
  if (const std::string assets = mha::platform::assets_dir(); !assets.empty())
    mha::studio::set_models_dir(assets + "/models");
  if (help->parsed()) {
    if (help_topic.empty()) {
      std::cout << mha::platform::help_text(app, "mha");
      return 0;
    }
    for (const CLI::App* sub : app.get_subcommands({}))
      if (sub->get_name() == help_topic && sub != help) {
        std::cout << mha::platform::help_text(*sub, "mha " + help_topic);
        return 0;
      }
    return mha::platform::usage_error(app, app, "no command '" + help_topic + "'");
  }
  try {
    if (app.got_subcommand("compute")) return run_compute();
    if (app.got_subcommand("bench")) return run_bench();
    if (app.got_subcommand("export")) return run_export();
    if (app.got_subcommand("model-info")) return run_model_info();
    if (app.got_subcommand("gpu-check")) return run_gpu_check();
    if (app.got_subcommand("check")) return run_check();
    if (app.got_subcommand("lesson-list")) return run_lesson_list();
    if (app.got_subcommand("lesson-export")) return run_lesson_export();
  } catch (const mha::Error& e) {
    std::fprintf(stderr, "mha: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mha: error: %s\n", e.what());
    return 3;
  }
  return 1;
}
