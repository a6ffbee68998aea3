// `mha compute`: one forward from a folder of .npy files named as torch names them, or from
// torch.manual_seed + torch.rand + nn.MultiheadAttention's default init; prints a readable summary
// and writes the outputs and every trace stage as .npy.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.hpp"
#include "errors.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "masks.hpp"
#include "mha.hpp"
#include "torch_rng.hpp"

namespace fs = std::filesystem;

namespace mha::cli {

namespace {

struct ComputeArgs {
  std::string inputs_dir, weights_file, out_dir;
  std::optional<std::uint64_t> torch_seed;
  std::int64_t batch = 0, tgt_len = 0, src_len = 0, embed_dim = 0, num_heads = 0, num_kv_heads = 0;
  std::int64_t kdim = 0, vdim = 0;
  bool no_bias = false, add_zero_attn = false, seq_first = false, causal = false;
  std::string dtype = "float32", fully_masked = "nan", backend = "cpu", mask_layout = "torch",
              mask_convention = "torch";
};

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
Weights<T> load_weights(const fs::path& dir, const std::string& safetensors, Config& c) {
  std::map<std::string, Array> st;
  if (!safetensors.empty()) st = read_safetensors(safetensors);
  auto get = [&](const std::string& name) -> Tensor<T> {
    auto it = st.find(name);
    if (it != st.end()) return to_tensor<T>(it->second);
    if (!dir.empty() && fs::exists(dir / (name + ".npy"))) return to_tensor<T>(load(dir, name));
    return {};
  };
  Weights<T> w;
  w.in_proj_weight = get("in_proj_weight");
  w.q_proj_weight = get("q_proj_weight");
  w.k_proj_weight = get("k_proj_weight");
  w.v_proj_weight = get("v_proj_weight");
  w.in_proj_bias = get("in_proj_bias");
  w.bias_k = get("bias_k");
  w.bias_v = get("bias_v");
  w.out_proj_weight = get("out_proj.weight");
  w.out_proj_bias = get("out_proj.bias");
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

void save(const fs::path& dir, const std::string& name, const Array& a) {
  write_npy((dir / (name + ".npy")).string(), a);
}

template <class T>
void print_tensor(const Tensor<T>& t) {
  // torch-like printing of the last two dims, summarised past 6 rows / 8 columns.
  const std::int64_t cols = t.shape.back(), rows = t.numel() / std::max<std::int64_t>(cols, 1);
  const std::int64_t rows_per_block = t.dim() >= 2 ? t.shape[t.shape.size() - 2] : 1;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t in_block = r % rows_per_block;
    if (rows_per_block > 6 && in_block >= 3 && in_block < rows_per_block - 3) {
      if (in_block == 3) std::printf("   ...\n");
      continue;
    }
    if (in_block == 0 && r > 0) std::printf("\n");
    std::printf("  [");
    for (std::int64_t c = 0; c < cols; ++c) {
      if (cols > 8 && c >= 4 && c < cols - 4) {
        if (c == 4) std::printf("  ...");
        continue;
      }
      std::printf("%s%9.4f", c ? " " : "", double(t.data[std::size_t(r * cols + c)]));
    }
    std::printf("]\n");
  }
}

template <class T>
int run(const ComputeArgs& a) {
  Config c;
  Weights<T> w;
  Inputs<T> in;
  Options o;
  c.batch_first = !a.seq_first;
  c.num_heads = a.num_heads;
  c.num_kv_heads = a.num_kv_heads;
  c.add_zero_attn = a.add_zero_attn;
  o.fully_masked = a.fully_masked == "zero" ? FullyMasked::zero : FullyMasked::nan;
  o.backend = a.backend == "reference" ? Backend::reference : Backend::eigen;
  o.attn_mask_layout = a.mask_layout == "per_batch" ? MaskLayout::per_batch : MaskLayout::torch;

  std::string source;
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
    in.query = to_tensor<T>(load(dir, "query"));
    in.key = fs::exists(dir / "key.npy") ? to_tensor<T>(load(dir, "key")) : in.query;
    in.value = fs::exists(dir / "value.npy") ? to_tensor<T>(load(dir, "value")) : in.key;
    if (in.query.dim() < 2)
      throw ShapeError("query", "query.npy: expected (N, L, E) or (L, E), got " + shape_str(in.query.shape));
    c.embed_dim = in.query.shape.back();
    c.kdim = in.key.dim() ? in.key.shape.back() : 0;
    c.vdim = in.value.dim() ? in.value.shape.back() : 0;
    w = load_weights<T>(dir, a.weights_file, c);
    if (fs::exists(dir / "attn_mask.npy"))
      in.attn_mask = to_mask<T>(load(dir, "attn_mask"), "attn_mask", a.mask_convention);
    if (fs::exists(dir / "key_padding_mask.npy"))
      in.key_padding_mask = to_mask<T>(load(dir, "key_padding_mask"), "key_padding_mask", "torch");
    source = a.inputs_dir;
  }

  ForwardResult<T> r = forward(c, w, in, o);
  const Dims& d = r.dims;

  std::printf("MHA forward (%s, %s, %s backend)\n", source.c_str(), sizeof(T) == 4 ? "float32" : "float64",
              backend_name(r.backend));
  std::printf("  N=%lld L=%lld S=%lld E=%lld H=%lld d_k=%lld", (long long)d.N, (long long)d.L, (long long)d.S,
              (long long)d.E, (long long)d.H, (long long)d.d_k);
  if (d.G != d.H) std::printf(" num_kv_heads=%lld", (long long)d.G);
  std::printf(" bias=%s%s%s\n", c.bias ? "True" : "False", c.add_bias_kv ? " add_bias_kv" : "",
              c.add_zero_attn ? " add_zero_attn" : "");
  std::printf("\n  %-19s %-15s %-18s %-5s %s\n", "stage", "shape", "strides", "contig", "torch");
  for (const Stage<T>& s : r.trace.stages)
    std::printf("  %-19s %-15s %-18s %-5s  %s\n", s.name.c_str(), shape_str(s.shape).c_str(),
                shape_str(s.strides).c_str(), s.is_contiguous() ? "yes" : "no", s.formula.c_str());
  const Tensor<T> out = r.output();
  std::printf("\noutput %s:\n", shape_str(out.shape).c_str());
  print_tensor(out);
  if (r.fully_masked_rows)
    std::printf(
        "\nnote: %lld query rows (over batch and heads) have every key blocked: their weights are %s\n",
        (long long)r.fully_masked_rows,
        r.fully_masked == FullyMasked::nan ? "NaN, as torch gives (use --fully-masked zero for 0)"
                                           : "0 (--fully-masked zero)");
  if (r.nonfinite_inputs)
    std::printf("note: %lld NaN/Inf values in the inputs or weights; computed as torch would\n",
                (long long)r.nonfinite_inputs);
  for (const std::string& wmsg : r.warnings) std::printf("warning: %s\n", wmsg.c_str());

  if (!a.out_dir.empty()) {
    const fs::path out_dir(a.out_dir);
    std::error_code ec;
    fs::create_directories(out_dir / "trace", ec);
    if (ec) throw FileError("--out", "--out " + a.out_dir + ": cannot create: " + ec.message());
    save(out_dir, "output", to_array(out));
    save(out_dir, "attn_weights", to_array(r.attn_weights(false)));
    save(out_dir, "attn_weights_avg", to_array(r.attn_weights(true)));
    nlohmann::json stages = nlohmann::json::array();
    for (const Stage<T>& s : r.trace.stages) {
      save(out_dir / "trace", s.name, to_array(s.contiguous()));
      stages.push_back({{"name", s.name},
                        {"shape", s.shape},
                        {"strides", s.strides},
                        {"contiguous", s.is_contiguous()},
                        {"view_of", s.view_of},
                        {"torch", s.formula},
                        {"note", s.note}});
    }
    if (a.torch_seed) {  // the generated inputs, under torch's names, so --inputs can replay them
      save(out_dir, "query", to_array(in.query));
      save(out_dir, "key", to_array(in.key));
      save(out_dir, "value", to_array(in.value));
      if (!w.in_proj_weight.empty()) {
        save(out_dir, "in_proj_weight", to_array(w.in_proj_weight));
      } else {
        save(out_dir, "q_proj_weight", to_array(w.q_proj_weight));
        save(out_dir, "k_proj_weight", to_array(w.k_proj_weight));
        save(out_dir, "v_proj_weight", to_array(w.v_proj_weight));
      }
      if (c.bias) {
        save(out_dir, "in_proj_bias", to_array(w.in_proj_bias));
        save(out_dir, "out_proj.bias", to_array(w.out_proj_bias));
      }
      save(out_dir, "out_proj.weight", to_array(w.out_proj_weight));
      if (in.attn_mask) save(out_dir, "attn_mask", to_bool_array(in.attn_mask->values));
    }
    nlohmann::json meta = {{"dtype", sizeof(T) == 4 ? "float32" : "float64"},
                           {"backend", backend_name(r.backend)},
                           {"fully_masked", r.fully_masked == FullyMasked::nan ? "nan" : "zero"},
                           {"fully_masked_rows", r.fully_masked_rows},
                           {"nonfinite_inputs", r.nonfinite_inputs},
                           {"warnings", r.warnings},
                           {"dims",
                            {{"N", d.N},
                             {"L", d.L},
                             {"S", d.S},
                             {"S_total", d.S_total},
                             {"E", d.E},
                             {"H", d.H},
                             {"num_kv_heads", d.G},
                             {"d_k", d.d_k}}},
                           {"stages", stages}};
    std::ofstream(out_dir / "trace.json") << meta.dump(2) << "\n";
    std::printf(
        "\nwrote %s: output.npy, attn_weights.npy, attn_weights_avg.npy, trace.json, trace/*.npy (%zu "
        "stages)\n",
        a.out_dir.c_str(), r.trace.stages.size());
  }
  return 0;
}

}  // namespace

std::function<int()> add_compute(CLI::App& app) {
  auto a = std::make_shared<ComputeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compute",
      "One forward pass of torch.nn.MultiheadAttention with every intermediate stage.\n"
      "Either --inputs DIR (query.npy, key.npy, value.npy, in_proj_weight.npy, in_proj_bias.npy,\n"
      "out_proj.weight.npy, out_proj.bias.npy, or q/k/v_proj_weight.npy, bias_k.npy, bias_v.npy,\n"
      "optional attn_mask.npy and key_padding_mask.npy; a float64 query computes in double)\n"
      "or --torch-seed S with sizes (torch.manual_seed(S); query, key, value = torch.rand(...) x3;\n"
      "nn.MultiheadAttention(...) default init, exactly as torch draws them).");
  auto* inputs = cmd->add_option("--inputs", a->inputs_dir, "Folder of .npy files named as torch names them");
  cmd->add_option("--weights", a->weights_file, "A .safetensors file with the weights (state_dict names)")
      ->needs(inputs);
  auto* seed = cmd->add_option("--torch-seed", a->torch_seed, "Generate inputs and weights as torch does")
                   ->excludes(inputs);
  auto* batch = cmd->add_option("--batch", a->batch, "N (with --torch-seed)")->needs(seed);
  auto* tgt = cmd->add_option("--tgt-len", a->tgt_len, "L, query length (with --torch-seed)")->needs(seed);
  cmd->add_option("--src-len", a->src_len, "S, key/value length (default L)")->needs(seed);
  auto* emb = cmd->add_option("--embed-dim", a->embed_dim, "E (with --torch-seed)")->needs(seed);
  cmd->add_option("--kdim", a->kdim, "key feature size (default E; with --torch-seed)")->needs(seed);
  cmd->add_option("--vdim", a->vdim, "value feature size (default E; with --torch-seed)")->needs(seed);
  cmd->add_flag("--no-bias", a->no_bias, "bias=False (with --torch-seed)")->needs(seed);
  cmd->add_flag("--causal", a->causal, "a causal (L, S) bool attn_mask (with --torch-seed)")->needs(seed);
  cmd->add_option("--dtype", a->dtype, "float32 or float64 (with --torch-seed)")
      ->check(CLI::IsMember({"float32", "float64"}))
      ->needs(seed);
  cmd->add_option("--num-heads", a->num_heads, "H, number of heads")->required();
  cmd->add_option("--num-kv-heads", a->num_kv_heads, "G key/value heads, dividing H (GQA; 1 = MQA)");
  cmd->add_flag("--add-zero-attn", a->add_zero_attn, "append a zero key/value row (torch add_zero_attn)");
  cmd->add_flag("--seq-first", a->seq_first, "inputs are (L, N, E): torch's batch_first=False");
  cmd->add_option("--fully-masked", a->fully_masked,
                  "a row with every key blocked gives nan (torch) or zero (the course notebook)")
      ->check(CLI::IsMember({"nan", "zero"}));
  cmd->add_option("--backend", a->backend, "reference (explicit loops) or cpu (Eigen)")
      ->check(CLI::IsMember({"reference", "cpu"}));
  cmd->add_option("--attn-mask-layout", a->mask_layout,
                  "torch: 3-D attn_mask is (N·H, L, S); per_batch: (N, L, S), one mask per batch item")
      ->check(CLI::IsMember({"torch", "per_batch"}));
  cmd->add_option("--mask-convention", a->mask_convention,
                  "torch: attn_mask True/1 = blocked; keep: 1 = attend, 0 = blocked (converted explicitly)")
      ->check(CLI::IsMember({"torch", "keep"}));
  cmd->add_option("--out", a->out_dir,
                  "Folder for output.npy, attn_weights.npy (N,H,L,S), attn_weights_avg.npy, trace.json, "
                  "trace/<stage>.npy");
  return [a, batch, tgt, emb]() -> int {
    if (a->inputs_dir.empty() && !a->torch_seed)
      throw ConfigError("--inputs", "give either --inputs DIR or --torch-seed S (see mha compute --help)");
    if (a->torch_seed && (!*batch || !*tgt || !*emb))
      throw ConfigError("--torch-seed", "--torch-seed needs --batch, --tgt-len and --embed-dim");
    bool f64 = a->dtype == "float64";
    if (!a->torch_seed) {
      if (!fs::is_directory(a->inputs_dir))
        throw FileError("--inputs", "--inputs " + a->inputs_dir + ": not a directory");
      f64 = read_npy((fs::path(a->inputs_dir) / "query.npy").string()).dtype == DType::f64;
    }
    return f64 ? run<double>(*a) : run<float>(*a);
  };
}

}  // namespace mha::cli
