// `mha compute`: one forward from a folder of .npy files named as torch names them, or from
// torch.manual_seed + torch.rand + nn.MultiheadAttention's default init; prints a readable summary
// and writes the outputs and every trace stage as .npy.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.hpp"
#include "errors.hpp"
#include "io/file_io.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "masks.hpp"
#include "mha.hpp"
#include "problem.hpp"
#include "progress.hpp"
#include "torch_rng.hpp"

namespace fs = std::filesystem;

namespace mha::cli {

namespace {

struct ComputeArgs : ForwardArgs {
  std::string out_dir;
  ModelArgs model;
  KnockoutArgs knockout;
  bool quiet = false;
};

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
  Problem<T> p = build_problem<T>(a);
  const Config& c = p.config;
  const Weights<T>& w = p.weights;
  const Inputs<T>& in = p.inputs;
  const std::string& source = p.source;
  platform::ProgressLine progress("mha compute", a.quiet);
  progress.waiting("forward");
  ForwardResult<T> r = forward(c, w, in, p.options);
  progress.clear();
  const Dims& d = r.dims;

  std::printf("MHA forward (%s, %s, %s backend)\n", source.c_str(), sizeof(T) == 4 ? "float32" : "float64",
              backend_name(r.backend));
  if (r.score_divisor > 0)
    std::printf("  WHAT-IF, not torch: q divided by %g instead of sqrt(d_k) = %g\n", r.score_divisor,
                std::sqrt(double(r.dims.d_k)));
  if (!r.fallback_reason.empty())
    std::printf("  GPU path fell back to cpu: %s\n", r.fallback_reason.c_str());
  else if (p.options.backend == Backend::automatic)
    std::printf("  auto chose %s\n", r.backend == Backend::gpu ? "gpu (above the size threshold)"
                                                               : "cpu (below the GPU threshold, or a "
                                                                 "software renderer, or no GPU)");
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
    // Written whole into a staging folder, then swapped in: a failure (a full disk) leaves an
    // earlier run's folder as it was, never a mix of its files and this run's.
    write_folder_atomic(a.out_dir, {"trace.json"}, [&](const std::string& staging) {
      const fs::path out_dir(staging);
      nlohmann::json meta = write_forward_outputs(out_dir, r, [&](std::size_t k, std::size_t n) {
        progress.step(std::int64_t(k), std::int64_t(n), "writing " + a.out_dir);
      });
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
      if (!p.mask_code.empty())  // runs as written in torch (tests/mask_code.py checks it)
        write_file_atomic((out_dir / "masks.py").string(),
                          std::vector<unsigned char>(p.mask_code.begin(), p.mask_code.end()));
      write_json_file(out_dir / "trace.json", meta);
    });
    progress.clear();
    std::printf(
        "\nwrote %s: output.npy, attn_weights.npy, attn_weights_avg.npy, trace.json, trace/*.npy (%zu "
        "stages)\n",
        a.out_dir.c_str(), r.trace.stages.size());
  }
  return 0;
}

}  // namespace

void write_json_file(const fs::path& path, const nlohmann::json& j) {
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  write_file_atomic(path.string(), std::vector<unsigned char>(text.begin(), text.end()));
}

template <class T>
nlohmann::json write_forward_outputs(const fs::path& out_dir, const ForwardResult<T>& r,
                                     const std::function<void(std::size_t, std::size_t)>& on_file) {
  std::error_code ec;
  fs::create_directories(out_dir / "trace", ec);
  if (ec) throw FileError("--out", "--out " + out_dir.string() + ": cannot create: " + ec.message());
  const std::size_t files = 3 + r.trace.stages.size();
  std::size_t written = 0;
  auto next = [&] {
    if (on_file) on_file(written++, files);
  };
  next();
  save(out_dir, "output", to_array(r.output()));
  next();
  save(out_dir, "attn_weights", to_array(r.attn_weights(false)));
  next();
  save(out_dir, "attn_weights_avg", to_array(r.attn_weights(true)));
  nlohmann::json stages = nlohmann::json::array();
  for (const Stage<T>& s : r.trace.stages) {
    next();
    save(out_dir / "trace", s.name, to_array(s.contiguous()));
    stages.push_back({{"name", s.name},
                      {"shape", s.shape},
                      {"strides", s.strides},
                      {"contiguous", s.is_contiguous()},
                      {"view_of", s.view_of},
                      {"torch", s.formula},
                      {"note", s.note}});
  }
  const Dims& d = r.dims;
  nlohmann::json j = {{"dtype", sizeof(T) == 4 ? "float32" : "float64"},
                      {"backend", backend_name(r.backend)},
                      {"gpu_fallback_reason", r.fallback_reason},
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
  if (r.score_divisor > 0) j["what_if_score_divisor"] = r.score_divisor;  // not torch: q / this, not √d_k
  return j;
}
template nlohmann::json write_forward_outputs<float>(const fs::path&, const ForwardResult<float>&,
                                                     const std::function<void(std::size_t, std::size_t)>&);
template nlohmann::json write_forward_outputs<double>(const fs::path&, const ForwardResult<double>&,
                                                      const std::function<void(std::size_t, std::size_t)>&);

std::function<int()> add_compute(CLI::App& app) {
  auto a = std::make_shared<ComputeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compute",
      "One forward pass of torch.nn.MultiheadAttention with every intermediate stage.\n"
      "Either --inputs DIR (query.npy, key.npy, value.npy, in_proj_weight.npy, in_proj_bias.npy,\n"
      "out_proj.weight.npy, out_proj.bias.npy, or q/k/v_proj_weight.npy, bias_k.npy, bias_v.npy,\n"
      "optional attn_mask.npy and key_padding_mask.npy; key.npy and value.npy both, or neither for\n"
      "self-attention; other .npy names are warned about, not read; a float64 query computes in double)\n"
      "or --torch-seed S with sizes (torch.manual_seed(S); query, key, value = torch.rand(...) x3;\n"
      "nn.MultiheadAttention(...) default init, exactly as torch draws them).");
  add_forward_options(cmd, *a);
  add_what_if_options(cmd, *a);
  cmd->add_option("--out", a->out_dir,
                  "Folder for output.npy, attn_weights.npy (N,H,L,S), attn_weights_avg.npy, trace.json, "
                  "trace/<stage>.npy, and with --scenario masks.py (its masks as PyTorch); replaced whole "
                  "(an earlier run's, or a new or empty folder)");
  add_model_options(cmd, a->model,
                    "With --model: the layer whose attention trace --out writes, or all (default: all, "
                    "each in layer_<i>/)");
  add_knockout_options(cmd, a->knockout);
  cmd->add_flag("--quiet", a->quiet, "No progress line on stderr (it is shown only on a terminal)");
  return [a]() -> int {
    if (!a->out_dir.empty())
      refuse_output_over_inputs(a->out_dir,
                                {a->inputs_dir, a->weights_file, a->scenario_file, a->model.model_dir});
    if (!a->model.model_dir.empty()) {
      check_model_alone(*a);
      // d_k is the model's: the divisor is made once its config is read.
      return run_model_compute(a->model, a->out_dir, a->quiet, *a, a->knockout);
    }
    if (!a->model.text.empty() || !a->model.token_ids.empty() || !a->model.layer.empty())
      throw ConfigError("--model", "--text, --token-ids and --layer go with --model DIR");
    if (!a->knockout.heads.empty() || a->knockout.all_but)
      throw ConfigError("--ablate", "--ablate knocks out heads of a model: it goes with --model DIR");
    const bool f64 = check_forward_args(*a);
    return f64 ? run<double>(*a) : run<float>(*a);
  };
}

}  // namespace mha::cli
