// GPT-2 and Llama-family folders: config.json, then the weights found by name in one or several mapped
// safetensors files. GPT-2's are converted to float and laid out for the engine (c_attn and c_proj
// transposed into torch's nn.MultiheadAttention parameters; the MLP kept as Conv1D [in, out]); a Llama's
// attention and norms are converted to float, its embedding, MLP and LM head read in place.
#include "io/hf_checkpoint.hpp"

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cpu_dispatch.hpp"
#include "errors.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "kernels/forward_kernels.hpp"

namespace mha {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t kMaxJsonBytes = 64u << 20;  // config.json and the shard index are small

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw FileError(path, path + ": " + what);
}

json read_json(const std::string& path) {
  const std::vector<unsigned char> bytes = read_file_bytes(path, kMaxJsonBytes);
  try {
    return json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    fail(path, std::string("malformed JSON: ") + e.what());
  }
}

std::int64_t get_int(const json& j, const std::string& path, const char* key, std::int64_t fallback,
                     bool required) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) fail(path, std::string("missing \"") + key + "\" (a GPT-2 config.json has it)");
    return fallback;
  }
  if (!j[key].is_number_integer() || j[key].get<std::int64_t>() <= 0)
    fail(path, std::string("\"") + key + "\" must be a positive integer, got " + j[key].dump());
  return j[key].get<std::int64_t>();
}

// A string field, or `fallback` when absent or null; another type is refused (json::value would
// throw its own type_error).
std::string get_string(const json& j, const std::string& path, const char* key, const std::string& fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string()) fail(path, std::string("\"") + key + "\" must be a string, got " + j[key].dump());
  return j[key].get<std::string>();
}

// config.json's model_type: the one field that says which loader reads the folder ("" when absent).
std::string model_type_of(const json& j, const std::string& path) {
  return get_string(j, path, "model_type", "");
}

// A folder with config.json, or FileError saying what was given instead.
fs::path model_folder(const std::string& folder, const char* holds) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    // A torch.save or safetensors file given where the folder goes: say what it is.
    if (fs::is_regular_file(folder, ec)) SafetensorsFile file(folder);  // names a torch.save file as such
    fail(folder, "is not a model folder (expected a folder with config.json and model.safetensors)");
  }
  const fs::path dir(folder);
  if (!fs::exists(dir / "config.json")) fail(folder, std::string("has no config.json (") + holds + ")");
  return dir;
}

// Throws naming the tensor when its dtype is not a weight type or its shape is not `stored`.
void check_weight(const TensorView& v, const std::string& name, const Shape& stored, bool transpose) {
  if (v.dtype != DType::f32 && v.dtype != DType::f16 && v.dtype != DType::bf16 && v.dtype != DType::f64)
    throw FileError(name, name + ": dtype " + std::string(dtype_name(v.dtype)) +
                              " is not a weight type (F32, F16, BF16 or F64)");
  if (v.shape != stored)
    throw ShapeError(name, name + ": shape " + shape_str(v.shape) +
                               " disagrees with config.json, which implies " + shape_str(stored) +
                               (transpose ? " (Conv1D weights are stored [in, out])" : ""));
}

// The float weights of one tensor, converted from the mapping, with the shape checked.
Tensor<float> take(const TensorView& v, const std::string& name, const Shape& want, bool transpose) {
  const Shape stored = transpose ? Shape{want[1], want[0]} : want;
  check_weight(v, name, stored, transpose);
  Tensor<float> t(want, zeroed_floats(std::size_t(numel(want))));
  if (!transpose) {
    convert_elements(v.dtype, v.data, t.numel(), t.ptr());
    return t;
  }
  // Stored (in, out); the attention wants torch's (out, in).
  std::vector<float> tmp = zeroed_floats(std::size_t(t.numel()));
  convert_elements(v.dtype, v.data, t.numel(), tmp.data());
  const std::int64_t rows = stored[0], cols = stored[1];
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j)
      t.data[std::size_t(j * rows + i)] = tmp[std::size_t(i * cols + j)];
  return t;
}

// The weight files of a folder, mapped: one model.safetensors, or the shards an index names; a
// torch.save file is refused with the line that converts it.
struct WeightFiles {
  std::vector<std::shared_ptr<const SafetensorsFile>> files;
  std::map<std::string, const TensorView*> views;  // name -> view into one of files
  std::map<const TensorView*, std::shared_ptr<const SafetensorsFile>> file_of;  // the file holding a view
  std::vector<std::string> paths;
};

WeightFiles open_weight_files(const std::string& folder) {
  WeightFiles w;
  const fs::path dir(folder);
  auto add_file = [&](const fs::path& p) {
    w.files.push_back(std::make_shared<const SafetensorsFile>(p.string()));
    w.paths.push_back(p.string());
    for (const auto& [name, view] : w.files.back()->tensors()) {
      if (!w.views.emplace(name, &view).second)
        fail(p.string(), "tensor '" + name + "' is also in another shard");
      w.file_of[&view] = w.files.back();
    }
  };
  if (fs::exists(dir / "model.safetensors")) {
    add_file(dir / "model.safetensors");
  } else if (fs::exists(dir / "model.safetensors.index.json")) {
    const std::string index_path = (dir / "model.safetensors.index.json").string();
    const json index = read_json(index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail(index_path, "has no \"weight_map\" object");
    std::set<std::string> shards;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) fail(index_path, "weight_map[\"" + name + "\"] must be a file name");
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        fail(index_path, "weight_map[\"" + name + "\"] = \"" + f + "\" is not a file in this folder");
      shards.insert(f);
    }
    for (const std::string& s : shards) {
      if (!fs::exists(dir / s)) fail(index_path, "names shard \"" + s + "\", which is not in the folder");
      add_file(dir / s);
    }
  } else {
    for (const char* bin : {"pytorch_model.bin", "model.bin", "model.pt", "pytorch_model.pt", "model.pth"})
      if (fs::exists(dir / bin)) {
        const std::string p = (dir / bin).string();
        fail(p,
             "this is a torch.save file, which MHA Studio does not read (loading it would run pickle "
             "code). Convert it once to safetensors with:\n  " +
                 torch_save_converter(p));
      }
    fail(folder, "has no model.safetensors (nor model.safetensors.index.json with its shards)");
  }
  return w;
}

}  // namespace

GPT2Config read_gpt2_config(const std::string& path) {
  const json j = read_json(path);
  if (!j.is_object()) fail(path, "must hold a JSON object");
  const std::string type = model_type_of(j, path);
  if (type != "gpt2")
    fail(path, "model_type is \"" + type + "\", not \"gpt2\": GPT-2's loader reads GPT2LMHeadModel folders " +
                   "(load_model picks the loader by model_type)");
  GPT2Config c;
  c.vocab_size = get_int(j, path, "vocab_size", 0, true);
  c.n_positions = get_int(j, path, "n_positions", 0, true);
  c.n_embd = get_int(j, path, "n_embd", 0, true);
  c.n_layer = get_int(j, path, "n_layer", 0, true);
  c.n_head = get_int(j, path, "n_head", 0, true);
  c.n_inner = get_int(j, path, "n_inner", 0, false);
  if (j.contains("layer_norm_epsilon")) {
    if (!j["layer_norm_epsilon"].is_number()) fail(path, "\"layer_norm_epsilon\" must be a number");
    c.layer_norm_epsilon = j["layer_norm_epsilon"].get<double>();
  }
  const std::string act = get_string(j, path, "activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    fail(path,
         "activation_function \"" + act + "\" is not GPT-2's gelu_new (tanh approximation): not supported");
  if (j.contains("tie_word_embeddings")) {
    if (!j["tie_word_embeddings"].is_boolean()) fail(path, "\"tie_word_embeddings\" must be true or false");
    c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  for (const char* key :
       {"scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    const bool expected = std::string(key) == "scale_attn_weights";
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>() != expected)
      fail(path,
           std::string("\"") + key + "\" = " + j[key].dump() + " changes GPT-2's attention: not supported");
  }
  try {
    validate(c);
  } catch (const ConfigError& e) {
    fail(path, e.what());
  }
  return c;
}

LoadedGPT2 load_gpt2(const std::string& folder, const LoadProgress& progress) {
  LoadedGPT2 out;
  out.folder = folder;
  const fs::path dir = model_folder(
      folder, "a Hugging Face GPT-2 folder holds config.json, model.safetensors, vocab.json and merges.txt");
  GPT2Model& m = out.model;
  m.config = read_gpt2_config((dir / "config.json").string());
  const GPT2Config& c = m.config;

  WeightFiles weights = open_weight_files(folder);
  out.weight_files = weights.paths;
  std::map<std::string, const TensorView*>& views = weights.views;

  // Hugging Face names, with or without the "transformer." prefix of GPT2LMHeadModel.
  std::set<std::string> used;
  std::int64_t done = 0, total = 0;
  for (const auto& [name, v] : views) total += std::int64_t(v->nbytes);
  auto find = [&](const std::string& name) -> const TensorView* {
    for (const std::string& n : {"transformer." + name, name}) {
      auto it = views.find(n);
      if (it != views.end()) {
        used.insert(n);
        return it->second;
      }
    }
    return nullptr;
  };
  auto load = [&](const std::string& name, const Shape& want, bool transpose = false) {
    const TensorView* v = find(name);
    if (!v)
      throw FileError(name, folder + ": the weights have no tensor '" + name + "' (nor 'transformer." + name +
                                "'), which config.json's GPT-2 needs");
    Tensor<float> t = take(*v, name, want, transpose);
    done += std::int64_t(v->nbytes);
    if (progress && total > 0) progress(double(done) / double(total));
    return t;
  };
  const std::int64_t C = c.n_embd, I = c.inner(), V = c.vocab_size;
  GPT2Weights& w = m.weights;
  w.wte = load("wte.weight", {V, C});
  w.wpe = load("wpe.weight", {c.n_positions, C});
  m.storage_dtype = dtype_name(find("wte.weight")->dtype);
  for (std::int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    GPT2Block b;
    b.ln_1_weight = load(p + "ln_1.weight", {C});
    b.ln_1_bias = load(p + "ln_1.bias", {C});
    b.attn.in_proj_weight = load(p + "attn.c_attn.weight", {3 * C, C}, true);
    b.attn.in_proj_bias = load(p + "attn.c_attn.bias", {3 * C});
    b.attn.out_proj_weight = load(p + "attn.c_proj.weight", {C, C}, true);
    b.attn.out_proj_bias = load(p + "attn.c_proj.bias", {C});
    b.ln_2_weight = load(p + "ln_2.weight", {C});
    b.ln_2_bias = load(p + "ln_2.bias", {C});
    b.c_fc_weight = load(p + "mlp.c_fc.weight", {C, I});
    b.c_fc_bias = load(p + "mlp.c_fc.bias", {I});
    b.c_proj_weight = load(p + "mlp.c_proj.weight", {I, C});
    b.c_proj_bias = load(p + "mlp.c_proj.bias", {C});
    // The causal-mask buffers some versions save are not weights.
    for (const char* buffer : {"attn.bias", "attn.masked_bias"}) find(p + buffer);
    w.h.push_back(std::move(b));
  }
  w.ln_f_weight = load("ln_f.weight", {C});
  w.ln_f_bias = load("ln_f.bias", {C});
  if (views.count("lm_head.weight")) {
    used.insert("lm_head.weight");
    if (!c.tie_word_embeddings) {
      w.lm_head = take(*views["lm_head.weight"], "lm_head.weight", {V, C}, false);
    } else {
      // Tied: the head is wte. A saved copy that differs would be silently replaced: say so.
      const Tensor<float> head = take(*views["lm_head.weight"], "lm_head.weight", {V, C}, false);
      if (head.data != w.wte.data)
        out.warnings.push_back(
            "lm_head.weight differs from wte.weight but config.json ties them "
            "(tie_word_embeddings): wte is used, as Hugging Face does");
    }
  } else if (!c.tie_word_embeddings) {
    throw FileError("lm_head.weight", folder +
                                          ": config.json unties the LM head (tie_word_embeddings: false) "
                                          "but the weights have no lm_head.weight");
  }
  for (const auto& [name, v] : views)
    if (!used.count(name)) out.warnings.push_back("tensor '" + name + "' is not a GPT-2 weight: ignored");
  validate(m);
  // Each layer's forward skips this count (Options::count_nonfinite_weights): it is done once here.
  if (const std::int64_t bad = m.nonfinite_weights())
    out.warnings.push_back(std::to_string(bad) +
                           " weights are NaN or infinite: every output they reach will be too");
  return out;
}

}  // namespace mha

namespace mha {

std::string checkpoint_model_type(const std::string& folder) {
  const fs::path dir = model_folder(folder, "a Hugging Face model folder holds config.json and its weights");
  const std::string path = (dir / "config.json").string();
  const json j = read_json(path);
  if (!j.is_object()) fail(path, "must hold a JSON object");
  return model_type_of(j, path);
}

LlamaConfig read_llama_config(const std::string& path) {
  const json j = read_json(path);
  if (!j.is_object()) fail(path, "must hold a JSON object");
  // Each field refused with ConfigError naming it (argument: the field's name in config.json).
  auto refuse = [&](const std::string& field, const std::string& what) -> void {
    throw ConfigError(field, path + ": \"" + field + "\" " + what);
  };
  auto has = [&](const json& o, const char* key) { return o.contains(key) && !o[key].is_null(); };
  auto integer = [&](const json& o, const std::string& prefix, const char* key, std::int64_t fallback,
                     bool required) -> std::int64_t {
    if (!has(o, key)) {
      if (required) refuse(prefix + key, "is missing (a Llama-family config.json has it)");
      return fallback;
    }
    if (!o[key].is_number_integer() || o[key].get<std::int64_t>() <= 0)
      refuse(prefix + key, "must be a positive integer, got " + o[key].dump());
    return o[key].get<std::int64_t>();
  };
  auto number = [&](const json& o, const std::string& prefix, const char* key, double fallback,
                    bool required = false) -> double {
    if (!has(o, key)) {
      if (required) refuse(prefix + key, "is missing");
      return fallback;
    }
    if (!o[key].is_number() || !(o[key].get<double>() > 0) || !std::isfinite(o[key].get<double>()))
      refuse(prefix + key, "must be a positive number, got " + o[key].dump());
    return o[key].get<double>();
  };
  auto boolean = [&](const char* key, bool fallback) -> bool {
    if (!has(j, key)) return fallback;
    if (!j[key].is_boolean()) refuse(key, "must be true or false, got " + j[key].dump());
    return j[key].get<bool>();
  };
  auto text = [&](const json& o, const std::string& field, const char* key) -> std::string {
    if (!has(o, key)) return "";
    if (!o[key].is_string()) refuse(field, "must be a string, got " + o[key].dump());
    return o[key].get<std::string>();
  };

  LlamaConfig c;
  c.model_type = text(j, "model_type", "model_type");
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2")
    refuse("model_type",
           "is \"" + c.model_type + "\": the Llama-family runner reads llama, mistral and qwen2");
  c.vocab_size = integer(j, "", "vocab_size", 0, true);
  c.hidden_size = integer(j, "", "hidden_size", 0, true);
  c.intermediate_size = integer(j, "", "intermediate_size", 0, true);
  c.num_hidden_layers = integer(j, "", "num_hidden_layers", 0, true);
  c.num_attention_heads = integer(j, "", "num_attention_heads", 0, true);
  c.num_key_value_heads = integer(j, "", "num_key_value_heads", 0, false);
  c.head_dim = integer(j, "", "head_dim", 0, false);
  c.max_position_embeddings = integer(j, "", "max_position_embeddings", 0, true);
  c.rms_norm_eps = number(j, "", "rms_norm_eps", 1e-6);
  c.rope_theta = number(j, "", "rope_theta", 10000);
  c.attention_bias = boolean("attention_bias", false);
  c.tie_word_embeddings = boolean("tie_word_embeddings", false);
  const std::string act = text(j, "hidden_act", "hidden_act");
  if (!act.empty() && act != "silu")
    refuse("hidden_act", "is \"" + act + "\": the runner's MLP is SwiGLU, silu(gate_proj(x)) · up_proj(x)");
  if (boolean("mlp_bias", false)) refuse("mlp_bias", "is true: MLP biases are not supported");
  if (c.model_type == "mistral") {
    if (has(j, "sliding_window")) c.sliding_window = integer(j, "", "sliding_window", 0, false);
  } else if (c.model_type == "qwen2" && boolean("use_sliding_window", false)) {
    // Qwen2 applies its window to some layers only (max_window_layers): not computed here.
    refuse("use_sliding_window", "is true: Qwen2's per-layer sliding window is not supported");
  }
  if (has(j, "rope_scaling")) {
    const json& s = j["rope_scaling"];
    if (!s.is_object()) refuse("rope_scaling", "must be an object or null, got " + s.dump());
    std::string kind = text(s, "rope_scaling.rope_type", "rope_type");
    if (kind.empty()) kind = text(s, "rope_scaling.type", "type");
    if (kind != "default" && kind != "linear" && kind != "llama3")
      refuse("rope_scaling.rope_type", "is \"" + kind + "\": only linear and llama3 scaling are supported");
    if (kind != "default") {
      c.rope_scaling.rope_type = kind;
      c.rope_scaling.factor = number(s, "rope_scaling.", "factor", 1, true);
    }
    if (kind == "llama3") {
      c.rope_scaling.low_freq_factor = number(s, "rope_scaling.", "low_freq_factor", 1, true);
      c.rope_scaling.high_freq_factor = number(s, "rope_scaling.", "high_freq_factor", 4, true);
      c.rope_scaling.original_max_position_embeddings =
          integer(s, "rope_scaling.", "original_max_position_embeddings", 0, true);
    }
  }
  try {
    validate(c);
  } catch (const ConfigError& e) {
    throw ConfigError(e.argument, path + ": " + e.what());
  }
  return c;
}

LoadedLlama load_llama(const std::string& folder, const LoadProgress& progress) {
  LoadedLlama out;
  out.folder = folder;
  const fs::path dir =
      model_folder(folder, "a Hugging Face Llama-family folder holds config.json and model.safetensors");
  LlamaModel& m = out.model;
  m.config = read_llama_config((dir / "config.json").string());
  const LlamaConfig& c = m.config;
  WeightFiles weights = open_weight_files(folder);
  out.weight_files = weights.paths;
  std::map<std::string, const TensorView*>& views = weights.views;

  // Hugging Face names, LlamaForCausalLM's "model." prefix or a bare LlamaModel's none.
  std::set<std::string> used;
  std::int64_t done = 0, total = 0;
  for (const auto& [name, v] : views) total += std::int64_t(v->nbytes);
  auto find = [&](const std::string& name) -> const TensorView* {
    for (const std::string& n : {name, name.rfind("model.", 0) == 0 ? name.substr(6) : std::string()}) {
      auto it = n.empty() ? views.end() : views.find(n);
      if (it != views.end()) {
        used.insert(n);
        return it->second;
      }
    }
    return nullptr;
  };
  // The tensor `name`, checked against `want`; counts its bytes for the progress.
  auto view = [&](const std::string& name, const Shape& want) -> const TensorView& {
    const TensorView* v = find(name);
    if (!v)
      throw FileError(name, folder + ": the weights have no tensor '" + name + "', which config.json's " +
                                c.model_type + " model needs");
    check_weight(*v, name, want, false);
    done += std::int64_t(v->nbytes);
    if (progress && total > 0) progress(double(done) / double(total));
    return *v;
  };
  // Widened into `out` (numel(want) floats): what the float parts of the model (norms, attention) hold.
  auto load_into = [&](const std::string& name, const Shape& want, float* out) {
    const TensorView& v = view(name, want);
    if (v.dtype == DType::f64)
      convert_elements(v.dtype, v.data, numel(want), out);
    else
      widen_elements(v.data,
                     v.dtype == DType::f32   ? detail::kernels::kWeightF32
                     : v.dtype == DType::f16 ? detail::kernels::kWeightF16
                                             : detail::kernels::kWeightBF16,
                     numel(want), out);
  };
  auto load = [&](const std::string& name, const Shape& want) {
    Tensor<float> t(want, zeroed_floats(std::size_t(numel(want))));
    load_into(name, want, t.ptr());
    return t;
  };
  // The big matrices stay in the mapping as stored (F64, which the products do not read, is widened).
  auto matrix = [&](const std::string& name, const Shape& want) {
    const TensorView& v = view(name, want);
    if (v.dtype == DType::f64) return WeightMatrix(take(v, name, want, false));
    return WeightMatrix(v.dtype, v.shape, v.data, weights.file_of.at(&v), name);
  };
  const std::int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const std::int64_t q_width = c.num_attention_heads * c.head_size(), kv = c.kv_heads() * c.head_size();
  LlamaWeights& w = m.weights;
  w.embed_tokens = matrix("model.embed_tokens.weight", {V, C});
  m.storage_dtype = dtype_name(find("model.embed_tokens.weight")->dtype);
  const bool bias = attention_config(c).bias;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LlamaLayer b;
    b.input_layernorm = load(p + "input_layernorm.weight", {C});
    // The attention in float, as mha::forward reads it: q, k and v widened straight into their rows
    // of in_proj_weight, torch.cat((q, k, v), 0).
    b.attn.in_proj_weight =
        Tensor<float>({q_width + 2 * kv, C}, zeroed_floats(std::size_t((q_width + 2 * kv) * C)));
    float* in_proj = b.attn.in_proj_weight.ptr();
    load_into(p + "self_attn.q_proj.weight", {q_width, C}, in_proj);
    load_into(p + "self_attn.k_proj.weight", {kv, C}, in_proj + q_width * C);
    load_into(p + "self_attn.v_proj.weight", {kv, C}, in_proj + (q_width + kv) * C);
    b.attn.out_proj_weight = load(p + "self_attn.o_proj.weight", {C, q_width});
    if (bias) {
      // The engine's module has one bias switch for both projections: a side without biases gets zeros.
      b.attn.in_proj_bias = Tensor<float>({q_width + 2 * kv});
      if (c.qkv_bias()) {
        float* in_bias = b.attn.in_proj_bias.ptr();
        load_into(p + "self_attn.q_proj.bias", {q_width}, in_bias);
        load_into(p + "self_attn.k_proj.bias", {kv}, in_bias + q_width);
        load_into(p + "self_attn.v_proj.bias", {kv}, in_bias + q_width + kv);
      }
      b.attn.out_proj_bias = c.o_bias() ? load(p + "self_attn.o_proj.bias", {C}) : Tensor<float>({C});
    }
    b.post_attention_layernorm = load(p + "post_attention_layernorm.weight", {C});
    b.gate_proj = matrix(p + "mlp.gate_proj.weight", {I, C});
    b.up_proj = matrix(p + "mlp.up_proj.weight", {I, C});
    b.down_proj = matrix(p + "mlp.down_proj.weight", {C, I});
    find(p + "self_attn.rotary_emb.inv_freq");  // a buffer older checkpoints save: computed, not read
    w.layers.push_back(std::move(b));
  }
  w.norm = load("model.norm.weight", {C});
  if (views.count("lm_head.weight")) {
    WeightMatrix head = matrix("lm_head.weight", {V, C});
    if (!c.tie_word_embeddings)
      w.lm_head = std::move(head);
    else if (!head.same_values(w.embed_tokens))
      out.warnings.push_back(
          "lm_head.weight differs from model.embed_tokens.weight but config.json ties them "
          "(tie_word_embeddings): embed_tokens is used, as Hugging Face does");
  } else if (!c.tie_word_embeddings) {
    throw FileError("lm_head.weight", folder +
                                          ": config.json unties the LM head (tie_word_embeddings false or "
                                          "absent) but the weights have no lm_head.weight");
  }
  for (const auto& [name, v] : views)
    if (!used.count(name))
      out.warnings.push_back("tensor '" + name + "' is not a " + c.model_type + " weight: ignored");
  validate(m);
  if (const std::int64_t bad = m.nonfinite_weights())
    out.warnings.push_back(std::to_string(bad) +
                           " weights are NaN or infinite: every output they reach will be too");
  return out;
}

namespace {

template <class Loaded>
LoadedModel as_loaded_model(Loaded&& l) {
  LoadedModel out;
  out.model = std::make_shared<const std::decay_t<decltype(l.model)>>(std::move(l.model));
  out.folder = std::move(l.folder);
  out.weight_files = std::move(l.weight_files);
  out.warnings = std::move(l.warnings);
  return out;
}

LoadedModel load_gpt2_model(const std::string& folder, const LoadProgress& progress) {
  return as_loaded_model(load_gpt2(folder, progress));
}

LoadedModel load_llama_model(const std::string& folder, const LoadProgress& progress) {
  return as_loaded_model(load_llama(folder, progress));
}

}  // namespace

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> families = {
      {"gpt2", "GPT-2", "openai-community/gpt2, distilgpt2", load_gpt2_model},
      {"llama", "Llama", "SmolLM2, Llama 3.x, TinyLlama", load_llama_model},
      {"mistral", "Llama", "Mistral 7B", load_llama_model},
      {"qwen2", "Llama", "Qwen2.5", load_llama_model},
  };
  return families;
}

LoadedModel load_model(const std::string& folder, const LoadProgress& progress) {
  const std::string type = checkpoint_model_type(folder);
  std::string known;
  for (const ModelFamily& f : model_families()) {
    if (f.model_type == type) return f.load(folder, progress);
    known += (known.empty() ? "" : ", ") + f.model_type;
  }
  const std::string path = (fs::path(folder) / "config.json").string();
  fail(path, (type.empty() ? std::string("has no model_type") : "model_type is \"" + type + "\"") +
                 ": MHA Studio opens " + known + " checkpoints");
}

}  // namespace mha
