// The forward problem shared by `mha compute` and `mha export` (see problem.hpp): .npy inputs and
// weights under torch's names, or torch.manual_seed + torch.rand + nn.MultiheadAttention's default init.
#include "problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <type_traits>

#include "compute.hpp"  // studio/: build_forward(Scenario)
#include "cost.hpp"
#include "errors.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "io/state_dict.hpp"
#include "limits.hpp"
#include "masks.hpp"
#include "torch_rng.hpp"
#ifdef MHA_HAS_GPU
#include "gpu/gpu_backend.hpp"
#endif

namespace fs = std::filesystem;

namespace mha::cli {

namespace {

Array load(const fs::path& dir, const std::string& name) {
  return read_npy((dir / (name + ".npy")).string());
}

template <class T>
Mask<T> to_mask(const Array& a, const char* name, const std::string& convention) {
  Mask<T> m;
  switch (a.dtype) {
    case DType::boolean: m.dtype = MaskDType::boolean; break;
    case DType::u8: m.dtype = MaskDType::uint8; break;
    case DType::f32:
    case DType::f64:
    case DType::f16:
    case DType::bf16: m.dtype = MaskDType::floating; break;
    default:
      throw DtypeError(name, std::string(name) + ": dtype " + dtype_name(a.dtype) +
                                 " is not a mask dtype torch accepts (bool, float; uint8 deprecated)");
  }
  m.values = to_tensor<T>(a);
  if (convention == "keep") return mask_from_keep(m.values);  // 1 = attend -> True = blocked
  return m;
}

// Loads weights from .npy files in `dir` (and/or a safetensors file) under torch's state_dict names.
template <class T>
Weights<T> load_weights(const fs::path& dir, const std::string& safetensors,
                        const std::optional<std::string>& prefix, Config& c) {
  std::vector<std::string> warnings;
  Weights<T> w = read_state_dict<T>(dir.string(), safetensors, prefix, &warnings);
  for (const std::string& line : warnings) std::printf("warning: %s\n", line.c_str());
  // The files decide, as a state_dict does: biases present -> bias=True, bias_k present -> add_bias_kv.
  c.bias = !w.in_proj_bias.empty() || !w.out_proj_bias.empty();
  c.add_bias_kv = !w.bias_k.empty() || !w.bias_v.empty();
  if (w.in_proj_weight.empty() && w.q_proj_weight.empty())
    throw FileError("in_proj_weight",
                    "no projection weights: expected in_proj_weight.npy (or "
                    "q_proj_weight.npy, k_proj_weight.npy, v_proj_weight.npy) in " +
                        dir.string() + (safetensors.empty() ? "" : " or " + safetensors));
  if (w.out_proj_weight.empty())
    throw FileError("out_proj.weight", "no out_proj.weight.npy in " + dir.string() +
                                           (safetensors.empty() ? "" : " or " + safetensors));
  return w;
}

// Names a `.npy` file in an --inputs folder that nothing reads ("mask.npy", "attn-mask.npy"): left
// unnamed, a mask under a wrong name would be ignored and the forward run unmasked. An earlier
// run's outputs (output.npy, attn_weights*.npy) are not inputs either, and are left alone.
void warn_unknown_inputs(const fs::path& dir) {
  std::vector<std::string> known = {
      "query", "key", "value", "attn_mask", "key_padding_mask", "output", "attn_weights", "attn_weights_avg"};
  Weights<float> w;
  for (auto& entry : state_dict(w)) known.push_back(entry.first);
  std::vector<std::string> unknown;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() != ".npy") continue;
    if (std::find(known.begin(), known.end(), p.stem().string()) == known.end())
      unknown.push_back(p.filename().string());
  }
  std::sort(unknown.begin(), unknown.end());
  for (const std::string& name : unknown)
    std::printf(
        "warning: %s: %s is not read (not a name mha compute knows: query, key, value, attn_mask, "
        "key_padding_mask, or an nn.MultiheadAttention state_dict name)\n",
        dir.string().c_str(), name.c_str());
}

}  // namespace

void add_forward_options(CLI::App* cmd, ForwardArgs& a) {
  auto* inputs = cmd->add_option("--inputs", a.inputs_dir, "Folder of .npy files named as torch names them");
  auto* weights =
      cmd->add_option("--weights", a.weights_file,
                      "A .safetensors file with the weights: an nn.MultiheadAttention's state_dict, or a "
                      "bigger model's holding one (e.g. an nn.TransformerEncoderLayer's self_attn)")
          ->needs(inputs);
  cmd->add_option_function<std::string>(
         "--prefix", [&a](const std::string& p) { a.weights_prefix = p; },
         "Which nn.MultiheadAttention of --weights, by its state_dict prefix (e.g. "
         "encoder.layers.0.self_attn.); needed when the file holds several")
      ->needs(weights);
  auto* seed = cmd->add_option("--torch-seed", a.torch_seed, "Generate inputs and weights as torch does")
                   ->excludes(inputs);
  // Each size option records that it was given: 0 is then refused, not taken for "default".
  const auto size = [&](const char* name, std::int64_t& field, const char* help) {
    return cmd->add_option(name, field, help)->each([&a, name](const std::string&) {
      a.sizes_given.push_back(name);
    });
  };
  size("--batch", a.batch, "N (with --torch-seed)")->needs(seed);
  size("--tgt-len", a.tgt_len, "L, query length (with --torch-seed)")->needs(seed);
  size("--src-len", a.src_len, "S, key/value length (default L)")->needs(seed);
  size("--embed-dim", a.embed_dim, "E (with --torch-seed)")->needs(seed);
  size("--kdim", a.kdim, "key feature size (default E; with --torch-seed)")->needs(seed);
  size("--vdim", a.vdim, "value feature size (default E; with --torch-seed)")->needs(seed);
  cmd->add_flag("--no-bias", a.no_bias, "bias=False (with --torch-seed)")->needs(seed);
  cmd->add_flag("--causal", a.causal, "a causal (L, S) bool attn_mask (with --torch-seed)")->needs(seed);
  cmd->add_option("--dtype", a.dtype, "float32 or float64 (with --torch-seed)")
      ->check(CLI::IsMember({"float32", "float64"}))
      ->needs(seed);
  cmd->add_option("--scenario", a.scenario_file,
                  "An app scenario file (JSON, docs/scenario.md; presets in assets/presets/): sizes, "
                  "sentence, seed, mask and edited tensors, computed as the app computes them")
      ->excludes(inputs)
      ->excludes(seed);
  size("--num-heads", a.num_heads, "H, number of heads (required unless --scenario)");
  size("--num-kv-heads", a.num_kv_heads, "G key/value heads, dividing H (GQA; 1 = MQA; default H)");
  cmd->add_flag("--add-zero-attn", a.add_zero_attn, "append a zero key/value row (torch add_zero_attn)");
  cmd->add_flag("--seq-first", a.seq_first, "inputs are (L, N, E): torch's batch_first=False");
  cmd->add_option("--fully-masked", a.fully_masked,
                  "a row with every key blocked gives nan (torch) or zero (the course notebook)")
      ->check(CLI::IsMember({"nan", "zero"}));
  cmd->add_option("--backend", a.backend,
                  "reference (explicit loops), cpu (Eigen), gpu (GLSL compute shaders; falls back to cpu "
                  "with the reason) or auto (gpu above a size threshold on a hardware GPU); default: the "
                  "app's choice, reference up to 2e5 multiply-adds (the course notebook), cpu above")
      ->each([&a](const std::string&) { a.backend_given = true; })
      ->check(CLI::IsMember({"reference", "cpu", "gpu", "auto"}));
  cmd->add_option("--attn-mask-layout", a.mask_layout,
                  "torch: 3-D attn_mask is (N·H, L, S); per_batch: (N, L, S), one mask per batch item")
      ->check(CLI::IsMember({"torch", "per_batch"}));
  cmd->add_option("--mask-convention", a.mask_convention,
                  "torch: attn_mask True/1 = blocked; keep: 1 = attend, 0 = blocked (converted explicitly)")
      ->check(CLI::IsMember({"torch", "keep"}));
}

void add_what_if_options(CLI::App* cmd, ForwardArgs& a) {
  cmd->add_option("--temperature", a.temperature,
                  "What-if, not torch: softmax temperature T > 0, weights = softmax(q·kᵀ / (√d_k·T) + mask) "
                  "(1 = torch); with --model at the --layer chosen, the layers after it following")
      ->each([&a](const std::string&) { a.what_if_given = true; });
  cmd->add_flag("--no-scale", a.no_scale,
                "What-if, not torch: scores not divided by √d_k (with --model at the --layer chosen)")
      ->each([&a](const std::string&) { a.what_if_given = true; });
}

double what_if_divisor(const ForwardArgs& a, std::int64_t d_k) {
  if (!a.what_if_given) return 0;
  if (!(a.temperature > 0) || !std::isfinite(a.temperature))
    throw ConfigError("--temperature",
                      "--temperature must be a finite number above 0, got " + std::to_string(a.temperature));
  const studio::WhatIf w{a.temperature, !a.no_scale};
  return w.active() ? w.divisor(d_k) : 0;
}

Backend parse_backend(const std::string& name) {
  if (name == "reference") return Backend::reference;
  if (name == "gpu") return Backend::gpu;
  if (name == "auto") return Backend::automatic;
  return Backend::eigen;
}

DeviceForward* gpu_device() {
#ifdef MHA_HAS_GPU
  static std::unique_ptr<gpu::GpuBackend> device = gpu::GpuBackend::headless();  // one per process
  return device.get();
#else
  return nullptr;  // the engine then says the GPU backend needs mha_gpu
#endif
}

void check_model_alone(const ForwardArgs& a) {
  if (!a.inputs_dir.empty() || a.torch_seed || !a.scenario_file.empty() || a.num_heads ||
      !a.sizes_given.empty())
    throw ConfigError("--model",
                      "--model brings its own sizes and weights: leave out --inputs, --torch-seed, "
                      "--scenario and the size options");
}

void check_sizes(const ForwardArgs& a) {
  const struct {
    const char* option;
    std::int64_t value;
    const limits::Range& range;
  } sizes[] = {{"--batch", a.batch, limits::kBatch},
               {"--tgt-len", a.tgt_len, limits::kTgtLen},
               {"--src-len", a.src_len, limits::kSrcLen},
               {"--embed-dim", a.embed_dim, limits::kEmbedDim},
               {"--kdim", a.kdim, limits::kKdim},
               {"--vdim", a.vdim, limits::kVdim},
               {"--num-heads", a.num_heads, limits::kNumHeads},
               {"--num-kv-heads", a.num_kv_heads, limits::kNumKvHeads}};
  for (const auto& z : sizes) {
    const bool given =
        std::find(a.sizes_given.begin(), a.sizes_given.end(), std::string(z.option)) != a.sizes_given.end();
    if ((given || z.value != 0) && !limits::contains(z.range, double(z.value)))
      throw ConfigError(z.option, limits::out_of_range(z.option, z.range, std::to_string(z.value)));
  }
}

bool check_forward_args(const ForwardArgs& a) {
  check_sizes(a);
  if (!a.scenario_file.empty()) {
    if (a.num_heads)
      throw ConfigError("--num-heads", "--num-heads comes from the --scenario file; leave it out");
    if (!a.sizes_given.empty())
      throw ConfigError(a.sizes_given[0], a.sizes_given[0] + " comes from the --scenario file; leave it out");
    return false;  // the app computes scenarios in float32
  }
  if (a.inputs_dir.empty() && !a.torch_seed)
    throw ConfigError("--inputs", "give --inputs DIR, --torch-seed S or --scenario FILE (see --help)");
  if (!a.num_heads) throw ConfigError("--num-heads", "--num-heads is required with --inputs or --torch-seed");
  if (a.torch_seed && (!a.batch || !a.tgt_len || !a.embed_dim))
    throw ConfigError("--torch-seed", "--torch-seed needs --batch, --tgt-len and --embed-dim");
  bool f64 = a.dtype == "float64";
  if (!a.torch_seed) {
    if (!fs::is_directory(a.inputs_dir))
      throw FileError("--inputs", "--inputs " + a.inputs_dir + ": not a directory");
    f64 = read_npy((fs::path(a.inputs_dir) / "query.npy").string()).dtype == DType::f64;
  }
  return f64;
}

// A scenario file, built exactly as the app builds it (studio/compute.cpp). The app computes in float32,
// on the reference path for tiny problems; --backend, when given, overrides that choice.
Problem<float> scenario_problem(const ForwardArgs& a) {
  std::vector<std::string> warnings;
  studio::Scenario s = studio::load_scenario(a.scenario_file, &warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "mha: warning: %s\n", w.c_str());
  if (a.what_if_given) {
    what_if_divisor(a, 1);  // checks --temperature
    s.what_if = {a.temperature, !a.no_scale};
  }
  studio::Built b = studio::build_forward(s);
  Problem<float> p;
  p.config = b.config;
  p.weights = std::move(b.weights);
  p.inputs = std::move(b.inputs);
  p.options = b.options;
  if (a.backend_given) {
    p.options.backend = parse_backend(a.backend);
    if (p.options.backend == Backend::gpu || p.options.backend == Backend::automatic)
      p.options.device = gpu_device();
  }
  p.source = a.scenario_file + " (\"" + s.name + "\")";
  p.query_tokens = s.query_tokens();
  p.key_tokens = s.key_tokens();
  p.mask_code = studio::mask_as_pytorch(s);
  return p;
}

template <class T>
Problem<T> build_problem(const ForwardArgs& a) {
  if (!a.scenario_file.empty()) {
    if constexpr (std::is_same_v<T, float>)
      return scenario_problem(a);
    else
      throw ConfigError("--scenario", "a --scenario computes in float32, as the app does");
  }
  Problem<T> p;
  Config& c = p.config;
  Weights<T>& w = p.weights;
  Inputs<T>& in = p.inputs;
  Options& o = p.options;
  std::string& source = p.source;
  c.batch_first = !a.seq_first;
  c.num_heads = a.num_heads;
  c.num_kv_heads = a.num_kv_heads;
  c.add_zero_attn = a.add_zero_attn;
  o.fully_masked = a.fully_masked == "zero" ? FullyMasked::zero : FullyMasked::nan;
  o.backend = parse_backend(a.backend);
  if (o.backend == Backend::gpu || o.backend == Backend::automatic) o.device = gpu_device();
  o.attn_mask_layout = a.mask_layout == "per_batch" ? MaskLayout::per_batch : MaskLayout::torch;

  if (a.torch_seed) {
    c.embed_dim = a.embed_dim;
    c.bias = !a.no_bias;
    c.kdim = a.kdim;
    c.vdim = a.vdim;
    const std::int64_t S = a.src_len ? a.src_len : a.tgt_len;
    SeededCase<T> sc = torch_seeded_case<T>(c, *a.torch_seed, a.batch, a.tgt_len, S);
    in = std::move(sc.inputs);
    w = std::move(sc.weights);
    if (a.causal) in.attn_mask = causal_mask<T>(a.tgt_len, S);
    source = "torch.manual_seed(" + std::to_string(*a.torch_seed) + "); torch.rand x3; " +
             "nn.MultiheadAttention default init";
  } else {
    const fs::path dir(a.inputs_dir);
    warn_unknown_inputs(dir);
    in.query = to_tensor<T>(load(dir, "query"));
    // Self-attention when neither key.npy nor value.npy is there; one without the other is refused,
    // since guessing the missing one (as the query, or as the key) would compute something else.
    const bool has_key = fs::exists(dir / "key.npy"), has_value = fs::exists(dir / "value.npy");
    if (has_key != has_value)
      throw FileError(
          has_key ? "value" : "key",
          a.inputs_dir + ": " +
              (has_key ? "key.npy is there but value.npy is not" : "value.npy is there but key.npy is not") +
              ": give both (cross-attention), or neither (self-attention: key = value = query)");
    in.key = has_key ? to_tensor<T>(load(dir, "key")) : in.query;
    in.value = has_value ? to_tensor<T>(load(dir, "value")) : in.query;
    if (!has_key) std::printf("note: no key.npy or value.npy: self-attention, key = value = query\n");
    if (in.query.dim() < 2)
      throw ShapeError("query", "query.npy: expected (N, L, E) or (L, E), got " + shape_str(in.query.shape));
    c.embed_dim = in.query.shape.back();
    c.kdim = in.key.dim() ? in.key.shape.back() : 0;
    c.vdim = in.value.dim() ? in.value.shape.back() : 0;
    w = load_weights<T>(dir, a.weights_file, a.weights_prefix, c);
    if (fs::exists(dir / "attn_mask.npy"))
      in.attn_mask = to_mask<T>(load(dir, "attn_mask"), "attn_mask", a.mask_convention);
    if (fs::exists(dir / "key_padding_mask.npy"))
      in.key_padding_mask = to_mask<T>(load(dir, "key_padding_mask"), "key_padding_mask", "torch");
    source = a.inputs_dir;
  }
  // validate() in the forward names a num_heads that does not divide embed_dim; d_k is not used then.
  if (c.num_heads > 0) o.score_divisor = what_if_divisor(a, c.embed_dim / c.num_heads);
  // No --backend: the CPU path the app would take for these sizes (the reference path for tiny
  // problems, which rounds as torch does).
  if (!a.backend_given)
    o.backend = cpu_backend_for(cost::forward_work(cost::shape(check_inputs(c, w, in, o))));
  return p;
}

template Problem<float> build_problem<float>(const ForwardArgs&);
template Problem<double> build_problem<double>(const ForwardArgs&);

}  // namespace mha::cli
