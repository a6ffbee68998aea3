// The Llama-family runner against torch (tests/fixtures/llama/, made by tools/gen_llama_fixtures.py):
// every stage of every layer, RoPE's q and k before and after the rotation included, on the
// reference loops and the Eigen path, for grouped-query, multi-query, Qwen2 biases, a Mistral
// sliding window, llama3 and linear rope_scaling, heads wider than hidden_size / num_attention_heads
// (an explicit head_dim), F32, F16 and sharded BF16 checkpoints; the
// recompute from a layer; RoPE in the traced forward; and every refusal of the config reader.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "fixtures.hpp"
#include "io/hf_checkpoint.hpp"
#include "io/npy.hpp"
#include "model/llama.hpp"
#include "model/rope.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace mha;

namespace {

std::string model_dir(const std::string& variant) {
  return std::string(MHA_FIXTURES_DIR) + "/llama/" + variant;
}

Tensor<float> expected(const std::string& variant, const std::string& name) {
  return to_tensor<float>(read_npy(model_dir(variant) + "/expected/" + name + ".npy"));
}

std::vector<std::int32_t> fixture_ids(const std::string& variant) {
  const Tensor<double> ids = to_tensor<double>(read_npy(model_dir(variant) + "/expected/input_ids.npy"));
  return std::vector<std::int32_t>(ids.data.begin(), ids.data.end());
}

// Layer l of a stacked (layers, ...) tensor.
Tensor<float> layer_of(const Tensor<float>& t, std::int64_t l) {
  Shape rest(t.shape.begin() + 1, t.shape.end());
  const std::int64_t n = numel(rest);
  return Tensor<float>(rest, std::vector<float>(t.data.begin() + l * n, t.data.begin() + (l + 1) * n));
}

// A trace stage without its leading batch dimension of 1.
Tensor<float> stage(const LlamaRun& run, std::int64_t l, const char* name) {
  Tensor<float> t = run.attn[std::size_t(l)].trace[name].contiguous();
  t.shape.erase(t.shape.begin());
  return t;
}

void check(const Tensor<float>& got, const Tensor<float>& want, const std::string& what) {
  INFO(what);
  CHECK(test::mismatch(got, want, 2e-5, 1e-4) == "");
}

void copy_model(const std::string& variant, const fs::path& to) {
  for (const auto& e : fs::directory_iterator(model_dir(variant)))
    if (e.is_regular_file()) fs::copy_file(e.path(), to / e.path().filename());
}

// The argument a failed load names, and its message ("" when it loads).
std::pair<std::string, std::string> load_error(const std::string& folder) {
  try {
    load_llama(folder);
  } catch (const Error& e) {
    return {e.argument, e.what()};
  }
  return {"", ""};
}

const char* const kVariants[] = {"gqa", "mqa", "qwen2", "mistral", "llama3", "head_dim"};

}  // namespace

TEST_CASE("Llama-family forward equals torch stage by stage on every layer", "[llama]") {
  for (const char* variant : kVariants) {
    const LoadedLlama loaded = load_llama(model_dir(variant));
    const LlamaModel& m = loaded.model;
    CHECK(loaded.warnings.empty());
    const std::vector<std::int32_t> ids = fixture_ids(variant);
    for (Backend backend : {Backend::reference, Backend::eigen}) {
      LlamaOptions o;
      o.backend = backend;
      const LlamaRun run = llama_forward(m, ids, o);
      const std::string where = std::string(variant) + " on " + backend_name(backend);
      check(run.rotary.cos, expected(variant, "rope_cos"), where + ": RoPE cos");
      check(run.rotary.sin, expected(variant, "rope_sin"), where + ": RoPE sin");
      for (std::int64_t l = 0; l < m.config.num_hidden_layers; ++l) {
        const std::string at = where + ", layer " + std::to_string(l) + ": ";
        check(layer_of(run.residual, l), layer_of(expected(variant, "residual"), l), at + "residual");
        check(layer_of(run.input_norm, l), layer_of(expected(variant, "input_norm"), l), at + "input_norm");
        check(stage(run, l, "query"), layer_of(expected(variant, "input_norm"), l),
              at + "the attention's input");
        for (const char* s : {"q", "k", "v"})
          check(stage(run, l, s), layer_of(expected(variant, s), l), at + s);
        // After RoPE, per head: q_heads (H, T, d) and k_heads (G, T, d) view q_rot and k_rot.
        const ForwardResult<float>& a = run.attn[std::size_t(l)];
        REQUIRE(a.trace.has("q_rot"));
        CHECK(a.trace["q_heads"].view_of == "q_rot");
        CHECK(a.trace["k_heads"].view_of == "k_rot");
        check(stage(run, l, "q_heads"), layer_of(expected(variant, "q_rot"), l), at + "q after RoPE");
        check(stage(run, l, "k_heads"), layer_of(expected(variant, "k_rot"), l), at + "k after RoPE");
        check(stage(run, l, "scores_scaled"), layer_of(expected(variant, "scores"), l), at + "scores");
        check(stage(run, l, "attn_weights"), layer_of(expected(variant, "attn_weights"), l),
              at + "attn_weights");
        check(stage(run, l, "context"), layer_of(expected(variant, "context"), l), at + "context");
        check(stage(run, l, "output"), layer_of(expected(variant, "attn_output"), l), at + "o_proj output");
        check(layer_of(run.resid_mid, l), layer_of(expected(variant, "resid_mid"), l), at + "resid_mid");
        check(layer_of(run.post_norm, l), layer_of(expected(variant, "post_norm"), l), at + "post_norm");
        check(layer_of(run.mlp_hidden, l), layer_of(expected(variant, "mlp_hidden"), l), at + "mlp_hidden");
        check(layer_of(run.mlp_out, l), layer_of(expected(variant, "mlp_out"), l), at + "mlp_out");
      }
      const std::int64_t Ly = m.config.num_hidden_layers;
      check(layer_of(run.residual, Ly), layer_of(expected(variant, "residual"), Ly),
            where + ": final residual");
      check(run.norm, expected(variant, "norm"), where + ": final norm");
      check(run.logits, expected(variant, "logits"), where + ": logits");
      REQUIRE(run.top_k.size() == 5);
    }
  }
}

TEST_CASE("Llama checkpoints: grouping, biases, ties and storage as the files say", "[llama]") {
  const LlamaModel gqa = load_llama(model_dir("gqa")).model;
  CHECK(attention_config(gqa.config).num_kv_heads == 2);
  CHECK(gqa.weights.layers[0].attn.in_proj_weight.shape ==
        Shape{16 + 2 * 8, 16});  // G·d = 8: K, V not repeated
  CHECK(gqa.weights.lm_head.shape == Shape{32, 16});
  CHECK(gqa.storage_dtype == "float32");
  const LlamaModel mqa = load_llama(model_dir("mqa")).model;
  CHECK(attention_config(mqa.config).num_kv_heads == 1);
  CHECK(mqa.weights.lm_head.empty());  // tied
  CHECK(mqa.storage_dtype == "float16");
  CHECK(mqa.config.rope_scaling.rope_type == "linear");
  const LoadedLlama qwen = load_llama(model_dir("qwen2"));
  CHECK(qwen.weight_files.size() == 2);  // shards
  CHECK(qwen.model.storage_dtype == "bfloat16");
  CHECK(qwen.model.config.qkv_bias());
  CHECK_FALSE(qwen.model.config.o_bias());
  CHECK(qwen.model.config.sliding_window == 0);  // only with use_sliding_window
  CHECK(load_llama(model_dir("mistral")).model.config.sliding_window == 3);
  // Hugging Face's count: the tied head once, qwen2's absent o_proj bias not at all. C = 16, I = 24,
  // V = 32, d = 4; per layer two norms, q (4d, C), k and v (G·d, C), o (C, C), gate, up and down.
  auto layer = [](std::int64_t kv, std::int64_t biases) {
    return 2 * 16 + (16 + 2 * kv) * 16 + 16 * 16 + 3 * 16 * 24 + biases;
  };
  CHECK(mqa.parameter_count() == 32 * 16 + 16 + 2 * layer(4, 0));
  CHECK(qwen.model.parameter_count() == 32 * 16 + 16 + 2 * layer(8, 16 + 2 * 8));
  CHECK(gqa.parameter_count() == 2 * 32 * 16 + 16 + 2 * layer(8, 0));  // untied: lm_head too
  CHECK(checkpoint_model_type(model_dir("gqa")) == "llama");
  CHECK(checkpoint_model_type(model_dir("mistral")) == "mistral");
  CHECK(checkpoint_model_type(model_dir("qwen2")) == "qwen2");
}

TEST_CASE("Mistral's sliding window is the mask the layers use", "[llama]") {
  const LlamaModel m = load_llama(model_dir("mistral")).model;
  const Mask<float> mask = llama_mask(m.config, 8);
  for (std::int64_t i = 0; i < 8; ++i)
    for (std::int64_t j = 0; j < 8; ++j) {
      INFO("query " << i << ", key " << j);
      CHECK(mask.values.data[std::size_t(i * 8 + j)] == float(j > i || j <= i - 3));
    }
  const LlamaRun run = llama_forward(m, fixture_ids("mistral"));
  const Tensor<float> w = stage(run, 1, "attn_weights");  // (H, T, T)
  CHECK(w.data[std::size_t(7 * 8 + 4)] == 0.0f);          // head 0, query 7, key 4: outside the window
  CHECK(w.data[std::size_t(7 * 8 + 5)] > 0.0f);
}

TEST_CASE("A Llama recompute from a layer equals a full forward", "[llama]") {
  const char* variant = GENERATE("gqa", "head_dim");
  INFO(variant);
  const LlamaModel m = load_llama(model_dir(variant)).model;
  const std::vector<std::int32_t> ids = fixture_ids(variant);
  LlamaRun run = llama_forward(m, ids);
  // Layer 1 with key 2 blocked everywhere: the recompute keeps layer 0 and redoes the rest.
  LlamaOptions o;
  o.attn_masks.resize(2);
  Mask<float> blocked = llama_mask(m.config, 8);
  for (std::int64_t i = 2; i < 8; ++i) blocked.values.data[std::size_t(i * 8 + 2)] = 1;
  o.attn_masks[1] = blocked;
  llama_forward_from(m, run, 1, o);
  const LlamaRun fresh = llama_forward(m, ids, o);
  CHECK(test::mismatch(run.logits, fresh.logits, 0, 0) == "");
  CHECK(test::mismatch(run.residual, fresh.residual, 0, 0) == "");
  CHECK(test::mismatch(run.logits, llama_forward(m, ids).logits, 1e-6, 0) != "");  // the edit mattered
  // A second forward into the same run reuses its buffers and gives the same values.
  llama_forward(m, ids, o, run);
  CHECK(test::mismatch(run.logits, fresh.logits, 0, 0) == "");
}

TEST_CASE("RoPE in the traced forward: both paths, and the rotation's tables checked", "[llama][trace]") {
  const LlamaModel m = load_llama(model_dir("llama3")).model;
  const Config c = attention_config(m.config);
  Inputs<float> in;
  in.query = Tensor<float>({1, 8, 16});
  for (std::size_t i = 0; i < in.query.data.size(); ++i) in.query.data[i] = float(std::sin(0.37 * double(i)));
  in.key = in.value = in.query;
  in.rotary = rotary_tables(m.config, 8);
  in.attn_mask = llama_mask(m.config, 8);
  Options o;
  o.backend = Backend::reference;
  const ForwardResult<float> ref = forward(c, m.weights.layers[0].attn, in, o);
  o.backend = Backend::eigen;
  const ForwardResult<float> fast = forward(c, m.weights.layers[0].attn, in, o);
  for (const char* s : {"q", "k", "q_rot", "k_rot", "scores", "attn_weights", "output"}) {
    INFO(s);
    CHECK(test::mismatch(fast.trace[s].contiguous(), ref.trace[s].contiguous(), 1e-6, 1e-5) == "");
  }
  // Position 0 is not turned; later positions are.
  const Tensor<float> q = ref.trace["q"].contiguous(), q_rot = ref.trace["q_rot"].contiguous();
  for (std::int64_t c0 = 0; c0 < 16; ++c0) CHECK(q_rot.data[std::size_t(c0)] == q.data[std::size_t(c0)]);
  CHECK(q_rot.data[std::size_t(16 * 3)] != q.data[std::size_t(16 * 3)]);
  // A stage left out and computed on demand reads the rotated q and k, as the forward did.
  Options some = o;
  some.stages = {"output"};
  const ForwardResult<float> lean = forward(c, m.weights.layers[0].attn, in, some);
  REQUIRE_FALSE(lean.trace.has("attn_weights"));
  const Stage<float>* weights = find_stage(lean, "attn_weights");
  REQUIRE(weights);
  CHECK(test::mismatch(weights->contiguous(), fast.trace["attn_weights"].contiguous(), 0, 0) == "");
  // A mask edit of a RoPE result is computed in full (the rows' recompute does not rotate), with
  // the rotation.
  Inputs<float> edited = in;
  edited.attn_mask->values.data[std::size_t(5 * 8 + 1)] = 1;  // query 5 no longer sees key 1
  Workspace<float> ws;
  ForwardResult<float> out;
  CHECK_FALSE(forward_mask_edit(c, m.weights.layers[0].attn, edited, o, fast, ws, out));
  const ForwardResult<float> full = forward(c, m.weights.layers[0].attn, edited, o);
  CHECK(out.trace.has("q_rot"));
  CHECK(test::mismatch(out.trace["attn_weights"].contiguous(), full.trace["attn_weights"].contiguous(), 0,
                       0) == "");
  // Without RoPE the trace has no rotation stages.
  in.rotary.reset();
  CHECK_FALSE(forward(c, m.weights.layers[0].attn, in, o).trace.has("q_rot"));

  in.rotary = rotary_tables(m.config, 4);  // fewer positions than tokens
  CHECK_THROWS_MATCHES(
      forward(c, m.weights.layers[0].attn, in, o), ShapeError,
      Catch::Predicate<ShapeError>([](const ShapeError& e) { return e.argument == "rotary.cos"; }));
  Config odd = c;
  odd.add_zero_attn = true;
  in.rotary = rotary_tables(m.config, 8);
  CHECK_THROWS_MATCHES(
      forward(odd, m.weights.layers[0].attn, in, o), ConfigError,
      Catch::Predicate<ConfigError>([](const ConfigError& e) { return e.argument == "rotary"; }));
}

TEST_CASE("Llama config reader refuses malformed or unsupported fields, naming them", "[llama]") {
  test::TempDir tmp("mha_llama_");
  auto with_config = [&](const std::string& variant, const std::function<void(nlohmann::json&)>& f) {
    fs::remove_all(tmp.path / "m");
    fs::create_directory(tmp.path / "m");
    copy_model(variant, tmp.path / "m");
    nlohmann::json j = nlohmann::json::parse(std::ifstream(tmp.path / "m" / "config.json"));
    f(j);
    std::ofstream(tmp.path / "m" / "config.json") << j.dump();
    return (tmp.path / "m").string();
  };
  struct Case {
    const char* variant;
    std::function<void(nlohmann::json&)> edit;
    const char* field;
  };
  const Case cases[] = {
      {"gqa", [](nlohmann::json& j) { j["model_type"] = "gemma"; }, "model_type"},
      {"gqa", [](nlohmann::json& j) { j["hidden_size"] = "16"; }, "hidden_size"},
      {"gqa", [](nlohmann::json& j) { j.erase("vocab_size"); }, "vocab_size"},
      {"gqa", [](nlohmann::json& j) { j["num_key_value_heads"] = 3; }, "num_key_value_heads"},
      {"gqa", [](nlohmann::json& j) { j["num_attention_heads"] = 0; }, "num_attention_heads"},
      {"gqa", [](nlohmann::json& j) { j["rms_norm_eps"] = -1; }, "rms_norm_eps"},
      {"gqa", [](nlohmann::json& j) { j["rope_theta"] = "big"; }, "rope_theta"},
      {"gqa", [](nlohmann::json& j) { j["hidden_act"] = "gelu"; }, "hidden_act"},
      {"gqa", [](nlohmann::json& j) { j["mlp_bias"] = true; }, "mlp_bias"},
      {"gqa", [](nlohmann::json& j) { j["attention_bias"] = "yes"; }, "attention_bias"},
      {"gqa", [](nlohmann::json& j) { j["tie_word_embeddings"] = 1; }, "tie_word_embeddings"},
      {"gqa",
       [](nlohmann::json& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
       },
       "rope_scaling.rope_type"},
      {"gqa",
       [](nlohmann::json& j) {
         j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2}};
       },
       "rope_scaling.rope_type"},
      {"gqa", [](nlohmann::json& j) { j["rope_scaling"] = "linear"; }, "rope_scaling"},
      {"mqa", [](nlohmann::json& j) { j["rope_scaling"]["factor"] = 0; }, "rope_scaling.factor"},
      {"llama3", [](nlohmann::json& j) { j["rope_scaling"].erase("low_freq_factor"); },
       "rope_scaling.low_freq_factor"},
      {"llama3", [](nlohmann::json& j) { j["rope_scaling"]["original_max_position_embeddings"] = -4; },
       "rope_scaling.original_max_position_embeddings"},
      {"llama3", [](nlohmann::json& j) { j["rope_scaling"]["high_freq_factor"] = 0.5; },
       "rope_scaling.high_freq_factor"},
      {"mistral", [](nlohmann::json& j) { j["sliding_window"] = 0; }, "sliding_window"},
      {"qwen2", [](nlohmann::json& j) { j["use_sliding_window"] = true; }, "use_sliding_window"},
      {"gqa", [](nlohmann::json& j) { j["head_dim"] = 5; }, "head_dim"},
      // head_dim 6 with 4 heads: q_proj must be (24, 16), the file's is (32, 16).
      {"head_dim", [](nlohmann::json& j) { j["head_dim"] = 6; }, "model.layers.0.self_attn.q_proj.weight"},
  };
  for (const Case& k : cases) {
    const auto [argument, message] = load_error(with_config(k.variant, k.edit));
    INFO(k.variant << ": " << message);
    CHECK(argument == k.field);
    CHECK_THAT(message, Catch::Contains(k.field));
  }
  // An explicit head_dim equal to hidden_size / num_attention_heads is what the default gives.
  CHECK(load_error(with_config("gqa", [](nlohmann::json& j) { j["head_dim"] = 4; })).first.empty());
  CHECK(load_error(with_config("gqa", [](nlohmann::json& j) { j["rope_scaling"] = nullptr; })).first.empty());
}

TEST_CASE("Llama loader refuses missing and misshapen tensors, naming them", "[llama]") {
  test::TempDir tmp("mha_llama_");
  fs::create_directory(tmp.path / "m");
  copy_model("gqa", tmp.path / "m");
  const std::string dir = (tmp.path / "m").string();
  {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(tmp.path / "m" / "config.json"));
    j["num_hidden_layers"] = 3;  // a layer the weights do not have
    std::ofstream(tmp.path / "m" / "config.json") << j.dump();
  }
  auto [argument, message] = load_error(dir);
  CHECK(argument == "model.layers.2.input_layernorm.weight");
  {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(model_dir("gqa") + "/config.json"));
    j["intermediate_size"] = 20;
    std::ofstream(tmp.path / "m" / "config.json") << j.dump();
  }
  std::tie(argument, message) = load_error(dir);
  CHECK(argument == "model.layers.0.mlp.gate_proj.weight");
  CHECK_THAT(message, Catch::Contains("disagrees with config.json"));
  {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(model_dir("gqa") + "/config.json"));
    j["attention_bias"] = true;  // biases the file does not hold
    std::ofstream(tmp.path / "m" / "config.json") << j.dump();
  }
  std::tie(argument, message) = load_error(dir);
  CHECK(argument == "model.layers.0.self_attn.q_proj.bias");
  // A GPT-2 folder is not a Llama one.
  std::tie(argument, message) = load_error(std::string(MHA_FIXTURES_DIR) + "/gpt2/f32");
  CHECK(argument == "model_type");
  // Text too long or an id outside the vocabulary.
  const LlamaModel m = load_llama(model_dir("gqa")).model;
  CHECK_THROWS_AS(llama_forward(m, std::vector<std::int32_t>(65, 1)), ConfigError);
  CHECK_THROWS_AS(llama_forward(m, {1, 32}), ConfigError);
  CHECK_THROWS_AS(llama_forward(m, {}), ConfigError);
}

TEST_CASE("llama: load_model opens each family through one interface", "[llama][model]") {
  const std::vector<std::int32_t> ids = fixture_ids("gqa");
  const LoadedModel loaded = load_model(model_dir("gqa"));
  const ModelSizes s = loaded.model->sizes();
  CHECK(s.family == "Llama");
  CHECK(s.n_head == 4);
  CHECK(s.n_kv_head == 2);
  CHECK(s.kv_group() == 2);
  CHECK(s.kv_head_of(3) == 1);
  CHECK(s.rotary);
  // The interface's forward is the family's own.
  const LlamaRun direct = llama_forward(load_llama(model_dir("gqa")).model, ids);
  const std::unique_ptr<ModelRun> run = loaded.model->forward(ids);
  REQUIRE(run->top_k.size() == direct.top_k.size());
  for (std::size_t i = 0; i < direct.top_k.size(); ++i) CHECK(run->top_k[i].id == direct.top_k[i].id);
  check(run->logits, direct.logits, "logits");
  // The last position's logits_at are run.logits, in double.
  std::vector<double> at;
  loaded.model->logits_at(*run, std::int64_t(ids.size()) - 1, at);
  REQUIRE(std::int64_t(at.size()) == s.vocab_size);
  for (std::int64_t v = 0; v < s.vocab_size; ++v)
    CHECK(at[std::size_t(v)] == Approx(run->logits.data[std::size_t(v)]).margin(1e-4));
  // GPT-2 through the same call.
  const LoadedModel gpt2 = load_model(std::string(MHA_FIXTURES_DIR) + "/gpt2/f32");
  CHECK(gpt2.model->sizes().family == "GPT-2");
  CHECK_FALSE(gpt2.model->sizes().rotary);
  // A model_type no family reads is refused naming it and the ones that are.
  test::TempDir tmp("mha_llama_");
  fs::create_directories(tmp.path / "m");
  copy_model("gqa", tmp.path / "m");
  nlohmann::json j;
  std::ifstream(tmp.path / "m" / "config.json") >> j;
  j["model_type"] = "bert";
  std::ofstream(tmp.path / "m" / "config.json") << j.dump();
  try {
    load_model((tmp.path / "m").string());
    FAIL("a bert folder was opened");
  } catch (const FileError& e) {
    const std::string what = e.what();
    CHECK(what.find("\"bert\"") != std::string::npos);
    CHECK(what.find("llama") != std::string::npos);
  }
}

TEST_CASE("llama: knocking a head out equals zeroing its o_proj columns", "[llama][knockout]") {
  const char* variant = GENERATE("gqa", "head_dim");  // o_proj (C, C), and (C, H·head_dim) wider
  const std::vector<std::int32_t> ids = fixture_ids(variant);
  for (const Backend backend : {Backend::reference, Backend::eigen}) {
    INFO(variant << " on backend " << (backend == Backend::reference ? "reference" : "eigen"));
    const LlamaModel m = load_llama(model_dir(variant)).model;
    LlamaOptions o;
    o.backend = backend;
    o.knockouts = {{0, 1}};
    const LlamaRun knocked = llama_forward(m, ids, o);
    // Head 1 of layer 0 hands d_k context columns to o_proj: zero those columns instead.
    LlamaModel cut = m;
    Weights<float>& w = cut.weights.layers[0].attn;
    const std::int64_t C = m.config.hidden_size, dk = m.config.head_size();
    const std::int64_t Q = m.config.num_attention_heads * dk;  // o_proj's input width
    for (std::int64_t i = 0; i < C; ++i)
      for (std::int64_t c = dk; c < 2 * dk; ++c) w.out_proj_weight.data[std::size_t(i * Q + c)] = 0;
    LlamaOptions plain;
    plain.backend = backend;
    const LlamaRun zeroed = llama_forward(cut, ids, plain);
    check(knocked.residual, zeroed.residual, "residual stream");
    check(knocked.logits, zeroed.logits, "logits");
    // Nothing knocked out is the plain forward, bit for bit.
    const LlamaRun none = llama_forward(m, ids, plain);
    LlamaOptions empty = plain;
    empty.knockouts = {};
    CHECK(llama_forward(m, ids, empty).logits.data == none.logits.data);
    // A head outside the model is refused.
    LlamaOptions bad = plain;
    bad.knockouts = {{0, 4}};
    CHECK_THROWS_AS(llama_forward(m, ids, bad), ConfigError);
  }
}

TEST_CASE("llama: scores without RoPE lose position, scores with it depend on distance only",
          "[llama][rope]") {
  // The same token at every position: at layer 0 every position's q (and k) before the rotation is
  // the same vector, so without RoPE every score of a head is one number; with it, a score depends
  // on i - j alone (each diagonal constant).
  const LlamaModel m = load_llama(model_dir("gqa")).model;
  const std::vector<std::int32_t> ids(8, 5);
  const LlamaRun run = llama_forward(m, ids);
  const ForwardResult<float>& f = run.attn[0];
  const Tensor<float> without = scores_without_rope(f);              // (H, T, T)
  const Tensor<float> with = f.trace["scores_scaled"].contiguous();  // (1, H, T, T)
  const std::int64_t H = m.config.num_attention_heads, T = 8;
  REQUIRE(without.shape == Shape{H, T, T});
  bool with_varies = false;
  for (std::int64_t h = 0; h < H; ++h) {
    const float* wo = without.ptr() + h * T * T;
    const float* wi = with.ptr() + h * T * T;
    for (std::int64_t i = 0; i < T; ++i)
      for (std::int64_t j = 0; j < T; ++j) {
        CHECK(wo[i * T + j] == Approx(wo[0]).margin(1e-5));
        if (i + 1 < T && j + 1 < T) CHECK(wi[(i + 1) * T + j + 1] == Approx(wi[i * T + j]).margin(1e-4));
        with_varies = with_varies || std::abs(wi[i * T + j] - wi[0]) > 1e-3;
      }
    // mean_score_by_offset reads the diagonals: offset 0 is the diagonal's value.
    CHECK(mean_score_by_offset(wi, T, T)[0] == Approx(wi[0]).margin(1e-5));
  }
  CHECK(with_varies);  // the rotation did change the scores
  // A trace without RoPE is refused.
  Config c;
  c.embed_dim = 4;
  c.num_heads = 2;
  c.bias = false;
  c.batch_first = true;
  Inputs<float> in;
  in.query = Tensor<float>({1, 3, 4}, std::vector<float>(12, 0.5f));
  in.key = in.query;
  in.value = in.query;
  Weights<float> w;
  w.in_proj_weight = Tensor<float>({12, 4}, std::vector<float>(48, 0.1f));
  w.out_proj_weight = Tensor<float>({4, 4}, std::vector<float>(16, 0.1f));
  CHECK_THROWS_AS(scores_without_rope(forward(c, w, in)), ConfigError);
}
