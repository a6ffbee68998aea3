// The forward problem `mha compute` and `mha export` share: the options that describe it (an
// --inputs folder of .npy files, --torch-seed with sizes, or an app --scenario file) and the engine
// inputs they build.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/hf_checkpoint.hpp"
#include "mha.hpp"
#include "tokenizer/bpe.hpp"

namespace mha::cli {

struct ForwardArgs {
  std::string inputs_dir, weights_file;
  std::optional<std::string> weights_prefix;  // --prefix: which nn.MultiheadAttention of --weights
  std::string scenario_file;  // the app's JSON (docs/scenario.md): sizes, sentence, seed, mask, edits
  std::optional<std::uint64_t> torch_seed;
  std::int64_t batch = 0, tgt_len = 0, src_len = 0, embed_dim = 0, num_heads = 0, num_kv_heads = 0;
  std::int64_t kdim = 0, vdim = 0;
  bool backend_given = false;  // --backend on the command line (a scenario otherwise picks as the app)
  std::vector<std::string> sizes_given;  // the size options given, each checked against limits.hpp
  bool no_bias = false, add_zero_attn = false, seq_first = false, causal = false;
  std::string dtype = "float32", fully_masked = "nan", backend = "cpu", mask_layout = "torch",
              mask_convention = "torch";
  // The what-if of the scores' scale (not torch): q divided by (√d_k, or 1 with no_scale)·temperature.
  // With --scenario, given ones replace the file's.
  float temperature = 1;
  bool no_scale = false;
  bool what_if_given = false;  // --temperature or --no-scale on the command line
};

// Registers the options above on `cmd`, but for the what-if's.
void add_forward_options(CLI::App* cmd, ForwardArgs& a);
// Registers --temperature and --no-scale (a module's, or with --model the chosen layer's).
void add_what_if_options(CLI::App* cmd, ForwardArgs& a);
// What q is divided by for head size d_k under a's what-if; 0 (torch's √d_k) when none is given.
// Throws ConfigError naming --temperature for one that is not a finite number above 0.
double what_if_divisor(const ForwardArgs& a, std::int64_t d_k);
// Throws ConfigError/FileError for a missing or contradictory choice of inputs, or a size option
// outside limits.hpp (0 included: a size left out takes its default, one given is used as given);
// returns whether the forward runs in double (--dtype float64, or a float64 query.npy).
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
  std::string mask_code;  // a scenario's masks as PyTorch (the mask editor's Copy as PyTorch); else ""
};
template <class T>
Problem<T> build_problem(const ForwardArgs& a);

// Writes output.npy, attn_weights.npy, attn_weights_avg.npy and trace/<stage>.npy under `dir`, and
// returns trace.json's object (sizes, policy, counts, every stage) for the caller to add to and write.
// `on_file(done, total)` is called before each .npy file is written (a progress line).
template <class T>
nlohmann::json write_forward_outputs(const std::filesystem::path& dir, const ForwardResult<T>& r,
                                     const std::function<void(std::size_t, std::size_t)>& on_file = {});
// Writes `j` (indented) atomically; invalid UTF-8 in a string is written as U+FFFD, not refused.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& j);

// A GPT-2 checkpoint and the text to run it on (`mha compute/export/bench --model`).
struct ModelArgs {
  std::string model_dir;  // a Hugging Face GPT-2 folder
  std::string text;       // tokenized by the folder's tokenizer
  std::string token_ids;  // or ids, comma-separated
  std::string layer;      // "all" or a layer number
};
// Registers --model, --text, --token-ids and --layer on `cmd`.
void add_model_options(CLI::App* cmd, ModelArgs& m, const char* layer_help);

struct ModelInput {
  LoadedModel loaded;
  std::optional<BpeTokenizer> tokenizer;  // when the folder has one
  std::vector<std::int32_t> ids;
  std::vector<std::string> tokens;   // a label per id (the tokenizer's display pieces, or the ids)
  std::vector<std::int64_t> layers;  // --layer: one, or every layer for "all"
};
// Loads the model and tokenizes the text; throws ConfigError (naming the option) for a missing or
// contradictory choice, a --layer out of range (naming the number of layers) or a text longer than
// n_positions (naming both). `progress` follows the weights' conversion (may be empty).
ModelInput load_model_input(const ModelArgs& m, const char* default_layer, const LoadProgress& progress = {});

// `mha compute --model`: prints the tokens and the next-token top-5; with --out, writes each chosen
// layer's attention trace as `mha compute` writes one (layer_<i>/ for --layer all).
// quiet: no progress line on stderr.
// what_if: --temperature / --no-scale, applied at the one --layer chosen, the layers after it
// following (ConfigError naming --layer for --layer all).
// knockout: --ablate, --ablate-mode, --ablate-all-but (head knock-outs at any layers, the layers
// after following; prints the top-5 before and after and the later heads whose pattern moved).
struct KnockoutArgs {
  std::string heads;          // --ablate 1.0,1.3: layer.head
  std::string mode = "zero";  // --ablate-mode zero|mean
  bool all_but = false;       // --ablate-all-but: knock out every other head of the layers named
};
// Registers --ablate, --ablate-mode and --ablate-all-but on `cmd`.
void add_knockout_options(CLI::App* cmd, KnockoutArgs& k);
int run_model_compute(const ModelArgs& m, const std::string& out_dir, bool quiet, const ForwardArgs& what_if,
                      const KnockoutArgs& knockout = {});
// Refuses --model together with another source of inputs (--inputs, --torch-seed, --scenario).
void check_model_alone(const ForwardArgs& a);

}  // namespace mha::cli
