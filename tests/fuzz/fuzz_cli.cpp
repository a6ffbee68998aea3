// libFuzzer target: the `mha compute` / `mha export` command line. The input is split into
// arguments (one per line), parsed by the CLI's own option table, checked, and when the sizes are
// small the problem is built and the forward run. CLI11 errors and mha::Error are answers (the CLI
// prints them and exits 2); a crash or a sanitizer report is a bug.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "errors.hpp"
#include "problem.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"mha"};
  std::string cur;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += char(data[i]);
    }
  }
  if (!cur.empty()) args.push_back(cur);
  if (args.size() > 64) return 0;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());

  // The option table is built once (building it was two thirds of each run) and cleared between
  // inputs; the options write into `a`, which starts each input from the defaults.
  static mha::cli::ForwardArgs a;
  static CLI::App& app = []() -> CLI::App& {
    static CLI::App table{"fuzz"};
    mha::cli::add_forward_options(&table, a);
    return table;
  }();
  a = mha::cli::ForwardArgs{};
  app.clear();
  try {
    app.parse(int(argv.size()), argv.data());
  } catch (const CLI::Error&) {
    return 0;
  }
  // Folders of the fuzzer's choosing would read the machine's files: only generated inputs.
  if (!a.inputs_dir.empty() || !a.weights_file.empty() || !a.scenario_file.empty()) return 0;
  try {
    const bool f64 = mha::cli::check_forward_args(a);
    const double work =
        double(a.batch) * double(a.tgt_len) * double(a.embed_dim) *
        double(std::max<std::int64_t>({a.src_len, a.tgt_len, a.kdim, a.vdim, a.embed_dim, 1}));
    // Negative sizes go on to the engine, which must refuse them; big ones are not what we look for.
    if (work > 2e4) return 0;
    if (f64) {
      const auto p = mha::cli::build_problem<double>(a);
      (void)mha::forward(p.config, p.weights, p.inputs, p.options);
    } else {
      const auto p = mha::cli::build_problem<float>(a);
      (void)mha::forward(p.config, p.weights, p.inputs, p.options);
    }
  } catch (const mha::Error&) {
  }
  return 0;
}
