// The forward problem `mha compute` and `mha export` share: the options that describe it (an
// --inputs folder of .npy files, --torch-seed with sizes, or an app --scenario file) and the engine
// inputs they build.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mha.hpp"

namespace mha::cli {

struct ForwardArgs {
  std::string inputs_dir, weights_file;
  std::string scenario_file;  // the app's JSON (docs/scenario.md): sizes, sentence, seed, mask, edits
  std::optional<std::uint64_t> torch_seed;
  std::int64_t batch = 0, tgt_len = 0, src_len = 0, embed_dim = 0, num_heads = 0, num_kv_heads = 0;
  std::int64_t kdim = 0, vdim = 0;
  bool backend_given = false;  // --backend on the command line (a scenario otherwise picks as the app)
  bool no_bias = false, add_zero_attn = false, seq_first = false, causal = false;
  std::string dtype = "float32", fully_masked = "nan", backend = "cpu", mask_layout = "torch",
              mask_convention = "torch";
};

// Registers the options above on `cmd`.
void add_forward_options(CLI::App* cmd, ForwardArgs& a);
// Throws ConfigError/FileError for a missing or contradictory choice of inputs; returns whether
// the forward runs in double (--dtype float64, or a float64 query.npy).
bool check_forward_args(const ForwardArgs& a);

// "reference", "cpu", "gpu", "auto" -> Backend.
Backend parse_backend(const std::string& name);
// The GPU path on a headless EGL context, made on first use; null when mha is built without mha_gpu.
DeviceForward* gpu_device();

template <class T>
struct Problem {
  Config config;
  Weights<T> weights;
  Inputs<T> inputs;
  Options options;
  std::string source;                                 // where the inputs came from, for the summary
  std::vector<std::string> query_tokens, key_tokens;  // a scenario's sentence(s); empty otherwise
};
template <class T>
Problem<T> build_problem(const ForwardArgs& a);

}  // namespace mha::cli
