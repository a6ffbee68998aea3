// The GPT-2 runner against torch (tests/fixtures/gpt2/, made by tools/gen_model_fixtures.py): every
// stage of every layer, on the reference loops and the Eigen path, for F32, F16 and sharded BF16
// checkpoints in the Hugging Face layout; the recompute from a layer; and every refusal of the loader.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "errors.hpp"
#include "fixtures.hpp"
#include "io/hf_checkpoint.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "io/tokenizer_files.hpp"
#include "masks.hpp"
#include "model/gpt2.hpp"
#include "model/roles.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace mha;

namespace {

std::string model_dir(const std::string& variant) {
  return std::string(MHA_FIXTURES_DIR) + "/gpt2/" + variant;
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
Tensor<float> stage(const GPT2Run& run, std::int64_t l, const char* name) {
  Tensor<float> t = run.attn[std::size_t(l)].trace[name].contiguous();
  t.shape.erase(t.shape.begin());
  return t;
}

void check(const Tensor<float>& got, const Tensor<float>& want, const std::string& what) {
  INFO(what);
  CHECK(test::mismatch(got, want, 2e-5, 1e-4) == "");
}

// Copies a fixture model into a temp folder, for the refusal cases to damage.
void copy_model(const std::string& variant, const fs::path& to) {
  for (const auto& e : fs::directory_iterator(model_dir(variant)))
    if (e.is_regular_file()) fs::copy_file(e.path(), to / e.path().filename());
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::string load_error(const std::string& folder) {
  try {
    load_gpt2(folder);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("GPT-2 forward equals torch stage by stage on every layer", "[model]") {
  for (const char* variant : {"f32", "f16", "bf16"}) {
    const LoadedGPT2 loaded = load_gpt2(model_dir(variant));
    const GPT2Model& m = loaded.model;
    CHECK(loaded.warnings.empty());
    const std::vector<std::int32_t> ids = fixture_ids(variant);
    for (Backend backend : {Backend::reference, Backend::eigen}) {
      GPT2Options o;
      o.backend = backend;
      const GPT2Run run = gpt2_forward(m, ids, o);
      const std::string where = std::string(variant) + " on " + backend_name(backend);
      for (std::int64_t l = 0; l < m.config.n_layer; ++l) {
        const std::string at = where + ", layer " + std::to_string(l) + ": ";
        check(layer_of(run.residual, l), layer_of(expected(variant, "residual"), l), at + "residual");
        check(stage(run, l, "query"), layer_of(expected(variant, "ln_1"), l),
              at + "ln_1 (the attention's query)");
        for (const char* s : {"q", "k", "v", "attn_weights", "context"})
          check(stage(run, l, s), layer_of(expected(variant, s), l), at + s);
        check(stage(run, l, "output"), layer_of(expected(variant, "attn_output"), l),
              at + "attention output");
        check(layer_of(run.resid_mid, l), layer_of(expected(variant, "resid_mid"), l), at + "resid_mid");
        check(layer_of(run.ln_2, l), layer_of(expected(variant, "ln_2"), l), at + "ln_2");
        check(layer_of(run.mlp_hidden, l), layer_of(expected(variant, "mlp_hidden"), l), at + "mlp_hidden");
        check(layer_of(run.mlp_out, l), layer_of(expected(variant, "mlp_out"), l), at + "mlp_out");
      }
      check(layer_of(run.residual, m.config.n_layer),
            layer_of(expected(variant, "residual"), m.config.n_layer), where + ": final residual");
      check(run.ln_f, expected(variant, "ln_f"), where + ": ln_f");
      check(run.logits, expected(variant, "logits"), where + ": logits");
      REQUIRE(run.top_k.size() == 5);
      const Tensor<float> logits = expected(variant, "logits");
      CHECK(run.top_k[0].id ==
            std::max_element(logits.data.begin(), logits.data.end()) - logits.data.begin());
      for (std::size_t i = 1; i < run.top_k.size(); ++i)
        CHECK(run.top_k[i - 1].probability >= run.top_k[i].probability);
    }
  }
}

TEST_CASE("GPT-2 checkpoints: layout variants and what the loader reports", "[model]") {
  const LoadedGPT2 f32 = load_gpt2(model_dir("f32"));
  CHECK(f32.model.storage_dtype == "float32");
  CHECK(f32.model.weights.lm_head.empty());  // tied
  const LoadedGPT2 f16 = load_gpt2(model_dir("f16"));
  CHECK(f16.model.storage_dtype == "float16");
  CHECK(!f16.model.weights.lm_head.empty());  // untied
  CHECK(f16.model.config.inner() == 48);
  const LoadedGPT2 bf16 = load_gpt2(model_dir("bf16"));
  CHECK(bf16.weight_files.size() == 2);  // two shards through the index
  CHECK(bf16.model.storage_dtype == "bfloat16");
  // Parameters as Hugging Face counts them: 3 layers of (2 LN + attention + MLP), embeddings, ln_f.
  const std::int64_t C = 32, V = f32.model.config.vocab_size, P = 24, I = 128;
  const std::int64_t per_layer = 4 * C + 3 * C * C + 3 * C + C * C + C + C * I + I + I * C + C;
  CHECK(f32.model.parameter_count() == V * C + P * C + 3 * per_layer + 2 * C);
}

TEST_CASE("GPT-2 recompute from a layer equals a full forward with the same masks", "[model]") {
  const GPT2Model m = load_gpt2(model_dir("f32")).model;
  const std::vector<std::int32_t> ids = fixture_ids("f32");
  const std::int64_t T = std::int64_t(ids.size());
  GPT2Run run = gpt2_forward(m, ids);
  const Tensor<float> before_logits = run.logits;
  const Tensor<float> layer0_weights = run.attn[0].trace["attn_weights"].contiguous();

  // Block key 1 for every query at layer 1 (a what-if), on top of the causal mask.
  Mask<float> what_if = causal_mask<float>(T, T);
  for (std::int64_t i = 1; i < T; ++i) what_if.values.data[std::size_t(i * T + 1)] = 1;
  GPT2Options o;
  o.attn_masks = {std::nullopt, what_if};
  gpt2_forward_from(m, run, 1, o);
  const GPT2Run full = gpt2_forward(m, ids, o);

  CHECK(run.attn[0].trace["attn_weights"].contiguous().data == layer0_weights.data);  // not recomputed
  CHECK(run.attn[1].trace["attn_weights"].contiguous().data ==
        full.attn[1].trace["attn_weights"].contiguous().data);
  CHECK(run.logits.data == full.logits.data);
  CHECK(run.logits.data != before_logits.data);
  CHECK(run.attn[1].trace["attn_weights"].at({0, 0, 5, 1}) == 0.0f);
}

namespace {

// The largest |a − softmax(x)| over the rows of (1, H, T, T) scores_masked x and weights a, the
// softmax in double (blocked keys, -inf, give exactly 0).
double softmax_error(const Stage<float>& masked, const Stage<float>& weights) {
  const std::int64_t H = masked.shape[1], T = masked.shape[2], S = masked.shape[3];
  double worst = 0;
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t i = 0; i < T; ++i) {
      double top = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j < S; ++j) top = std::max(top, double(masked.at({0, h, i, j})));
      for (std::int64_t j = 0; j < S; ++j) sum += std::exp(double(masked.at({0, h, i, j})) - top);
      for (std::int64_t j = 0; j < S; ++j)
        worst = std::max(worst, std::abs(double(weights.at({0, h, i, j})) -
                                         std::exp(double(masked.at({0, h, i, j})) - top) / sum));
    }
  return worst;
}

}  // namespace

TEST_CASE("GPT-2 temperature and scale what-ifs at one layer: its softmax, the layers after it follow",
          "[model]") {
  const GPT2Model m = load_gpt2(model_dir("f32")).model;
  const std::vector<std::int32_t> ids = fixture_ids("f32");
  const double root_dk = std::sqrt(double(m.config.head_dim()));
  REQUIRE(m.config.n_layer == 3);
  const std::int64_t layer = 1;
  for (Backend backend : {Backend::reference, Backend::eigen}) {
    GPT2Options torch_options;
    torch_options.backend = backend;
    const GPT2Run torch = gpt2_forward(m, ids, torch_options);
    // Temperature 3 (q / (√d_k·3)), and the scale off (q / 1).
    for (const auto& [divisor, temperature] :
         {std::pair<double, double>{3 * root_dk, 3}, {1.0, 1 / root_dk}}) {
      INFO(backend_name(backend) << ", q divided by " << divisor << " at layer " << layer);
      GPT2Options o = torch_options;
      o.score_divisors = {0, divisor};
      const GPT2Run run = gpt2_forward(m, ids, o);
      auto weights = [](const GPT2Run& r, std::int64_t l) {
        return r.attn[std::size_t(l)].trace["attn_weights"].contiguous().data;
      };

      // Before the layer: nothing changes, bit for bit.
      CHECK(weights(run, 0) == weights(torch, 0));
      CHECK(layer_of(run.residual, 1).data == layer_of(torch.residual, 1).data);
      // At the layer: the same input and raw scores; the scaled scores are torch's divided by the
      // temperature; the weights are the softmax of the engine's own masked scores.
      const ForwardResult<float>& at = run.attn[std::size_t(layer)];
      const ForwardResult<float>& was = torch.attn[std::size_t(layer)];
      CHECK(at.score_divisor == divisor);
      CHECK(at.trace["query"].contiguous().data == was.trace["query"].contiguous().data);
      CHECK(test::mismatch(at.trace["scores"].contiguous(), was.trace["scores"].contiguous(), 1e-5, 1e-5) ==
            "");
      Tensor<float> expected_scaled = was.trace["scores_scaled"].contiguous();
      for (float& x : expected_scaled.data) x = float(x / temperature);
      CHECK(test::mismatch(at.trace["scores_scaled"].contiguous(), expected_scaled, 1e-5, 1e-5) == "");
      CHECK(softmax_error(at.trace["scores_masked"], at.trace["attn_weights"]) < 1e-6);
      CHECK(softmax_error(at.trace["scores_masked"], was.trace["attn_weights"]) > 1e-3);  // not torch's
      CHECK(at.trace["attn_weights"].at({0, 0, 1, 2}) == 0.0f);                           // still causal
      // After it: every later layer and the next-token logits follow.
      CHECK(weights(run, 1) != weights(torch, 1));
      CHECK(weights(run, 2) != weights(torch, 2));
      CHECK(test::mismatch(run.logits, torch.logits, 1e-4, 1e-4) != "");
      // A recompute from the layer gives the whole forward's digits.
      GPT2Run from = torch;
      gpt2_forward_from(m, from, layer, o);
      CHECK(weights(from, 2) == weights(run, 2));
      CHECK(from.logits.data == run.logits.data);
    }
  }
}

TEST_CASE("GPT-2 forward refuses texts it cannot run", "[model]") {
  const GPT2Model m = load_gpt2(model_dir("f32")).model;
  CHECK_THROWS_WITH(gpt2_forward(m, {}), Catch::Contains("no tokens"));
  CHECK_THROWS_WITH(gpt2_forward(m, std::vector<std::int32_t>(25, 1)),
                    Catch::Contains("25 tokens") && Catch::Contains("n_positions = 24"));
  CHECK_THROWS_WITH(gpt2_forward(m, {1, 2, std::int32_t(m.config.vocab_size)}),
                    Catch::Contains("token 2") && Catch::Contains("outside the vocabulary"));
}

TEST_CASE("GPT-2 loader refuses malformed folders, naming the file, tensor and rule", "[model]") {
  test::TempDir tmp("mha_model_");
  auto fresh = [&](const std::string& variant) {
    fs::remove_all(tmp.path / "m");
    fs::create_directory(tmp.path / "m");
    copy_model(variant, tmp.path / "m");
    return tmp.path / "m";
  };
  auto edit_config = [&](const fs::path& dir, const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    f(j);
    write_text(dir / "config.json", j.dump());
  };

  SECTION("not a folder, no config, no weights") {
    CHECK_THAT(load_error(tmp.file("absent")), Catch::Contains("not a model folder"));
    fs::path d = fresh("f32");
    fs::remove(d / "config.json");
    CHECK_THAT(load_error(d.string()), Catch::Contains("has no config.json"));
    d = fresh("f32");
    fs::remove(d / "model.safetensors");
    CHECK_THAT(load_error(d.string()), Catch::Contains("has no model.safetensors"));
  }
  SECTION("another architecture or a config that disagrees with the tensors") {
    fs::path d = fresh("f32");
    edit_config(d, [](nlohmann::json& j) { j["model_type"] = "llama"; });
    CHECK_THAT(load_error(d.string()), Catch::Contains("model_type is \"llama\"") &&
                                           Catch::Contains("GPT-2's loader reads GPT2LMHeadModel folders"));
    d = fresh("f32");
    edit_config(d, [](nlohmann::json& j) { j["n_embd"] = 48; });
    CHECK_THAT(load_error(d.string()),
               Catch::Contains("wte.weight") && Catch::Contains("disagrees with config.json"));
    d = fresh("f32");
    edit_config(d, [](nlohmann::json& j) { j["n_layer"] = 4; });
    CHECK_THAT(load_error(d.string()), Catch::Contains("no tensor 'h.3.ln_1.weight'"));
    d = fresh("f32");
    edit_config(d, [](nlohmann::json& j) { j["n_head"] = 5; });
    CHECK_THAT(load_error(d.string()), Catch::Contains("not divisible by n_head = 5"));
    d = fresh("f32");
    edit_config(d, [](nlohmann::json& j) { j.erase("n_positions"); });
    CHECK_THAT(load_error(d.string()), Catch::Contains("missing \"n_positions\""));
    d = fresh("f32");
    edit_config(d, [](nlohmann::json& j) { j["activation_function"] = "relu"; });
    CHECK_THAT(load_error(d.string()), Catch::Contains("activation_function \"relu\""));
    d = fresh("f32");
    edit_config(d, [](nlohmann::json& j) { j["tie_word_embeddings"] = false; });
    CHECK_THAT(load_error(d.string()), Catch::Contains("no lm_head.weight"));
    d = fresh("f32");
    write_text(d / "config.json", "{\"model_type\": \"gpt2\",");
    CHECK_THAT(load_error(d.string()), Catch::Contains("malformed JSON"));
  }
  SECTION("torch.save files are named as such, with the conversion line") {
    fs::path d = fresh("f32");
    fs::remove(d / "model.safetensors");
    write_text(d / "pytorch_model.bin", std::string("PK\x03\x04", 4) + std::string(100, 'x'));
    CHECK_THAT(load_error(d.string()), Catch::Contains("torch.save file") &&
                                           Catch::Contains("safetensors.torch") &&
                                           Catch::Contains("save_file"));
    // A pickle under the safetensors name, and the same file through the single-module reader.
    write_text(d / "model.safetensors", std::string("\x80\x02\x8a\x0a", 4) + std::string(100, 'x'));
    CHECK_THAT(load_error(d.string()), Catch::Contains("torch.save file (pickle)"));
    CHECK_THROWS_WITH(read_safetensors((d / "model.safetensors").string()),
                      Catch::Contains("torch.save file"));
  }
  SECTION("damaged weights: overlap, duplicates, truncation, shards") {
    fs::path d = fresh("f32");
    // Two tensors pointing at the same bytes.
    auto tensors = read_safetensors((d / "model.safetensors").string());
    std::string header =
        "{\"transformer.wte.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"transformer.wpe.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[std::size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
    write_text(d / "model.safetensors", len + header + std::string(12, '\0'));
    CHECK_THAT(load_error(d.string()), Catch::Contains("overlap"));
    header =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
    for (int i = 0; i < 8; ++i) len[std::size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
    write_text(d / "model.safetensors", len + header + std::string(8, '\0'));
    CHECK_THAT(load_error(d.string()), Catch::Contains("'a' appears twice"));
    d = fresh("f32");
    fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") - 100);
    CHECK_THAT(load_error(d.string()), Catch::Contains("truncated"));
    d = fresh("bf16");
    fs::remove(d / "model-00002-of-00002.safetensors");
    CHECK_THAT(load_error(d.string()),
               Catch::Contains("model-00002-of-00002.safetensors") && Catch::Contains("not in the folder"));
    d = fresh("bf16");
    write_text(d / "model.safetensors.index.json", "{\"weight_map\": {\"x\": \"../etc/passwd\"}}");
    CHECK_THAT(load_error(d.string()), Catch::Contains("is not a file in this folder"));
  }
  SECTION("an extra tensor is named in a warning, not silently dropped") {
    fs::path d = fresh("f32");
    auto tensors = read_safetensors((d / "model.safetensors").string());
    tensors["transformer.h.0.attn.extra"] = tensors["transformer.ln_f.bias"];
    write_safetensors((d / "model.safetensors").string(), tensors);
    const LoadedGPT2 m = load_gpt2(d.string());
    REQUIRE(m.warnings.size() == 1);
    CHECK_THAT(m.warnings[0], Catch::Contains("transformer.h.0.attn.extra"));
  }
}

TEST_CASE("Head-role scores on hand-made attention patterns", "[model][roles]") {
  const std::int64_t R = 5, T = 2 * R;
  auto pattern = [&](const std::function<std::int64_t(std::int64_t)>& target) {
    std::vector<float> w(std::size_t(T * T), 0.0f);
    for (std::int64_t i = 0; i < T; ++i) w[std::size_t(i * T + target(i))] = 1.0f;
    return w;
  };
  const std::vector<float> prev = pattern([](std::int64_t i) { return i > 0 ? i - 1 : 0; });
  CHECK(prev_token_score(prev.data(), T) == 1.0);
  CHECK(first_token_score(prev.data(), T) == Approx(1.0 / double(T - 1)));  // only row 1 looks at token 0
  CHECK(mean_entropy(prev.data(), T) == 0.0);
  const std::vector<float> sink = pattern([](std::int64_t) { return 0; });
  CHECK(first_token_score(sink.data(), T) == 1.0);
  CHECK(prev_token_score(sink.data(), T) == Approx(1.0 / double(T - 1)));
  // Induction on r + r: position i of the second copy looks at i - R + 1.
  const std::vector<float> induction = pattern([&](std::int64_t i) { return i >= R ? i - R + 1 : 0; });
  CHECK(induction_score(induction.data(), T, R) == 1.0);
  CHECK(duplicate_token_score(induction.data(), T, R) == 0.0);
  const std::vector<float> duplicate = pattern([&](std::int64_t i) { return i >= R ? i - R : 0; });
  CHECK(duplicate_token_score(duplicate.data(), T, R) == 1.0);
  // Uniform causal rows: entropy is the mean of ln(i + 1) over rows i ≥ 1.
  std::vector<float> uniform(std::size_t(T * T), 0.0f);
  double expect_h = 0;
  for (std::int64_t i = 0; i < T; ++i) {
    for (std::int64_t j = 0; j <= i; ++j) uniform[std::size_t(i * T + j)] = 1.0f / float(i + 1);
    if (i >= 1) expect_h += std::log(double(i + 1)) / double(T - 1);
  }
  CHECK(mean_entropy(uniform.data(), T) == Approx(expect_h).epsilon(1e-6));
  HeadRole r;
  r.prev_token = 0.83;
  r.first_token = 0.6;
  CHECK(role_tag(r) == "prev-token 0.83");
  CHECK(role_tag(HeadRole{}) == "");
}

TEST_CASE("Sentence roles: hand-made patterns on a sentence's own tokens", "[model][roles]") {
  // "a b c a b c d": tokens 3..5 repeat 0..2; token 6 is new.
  const std::vector<std::int32_t> ids = {10, 11, 12, 10, 11, 12, 13};
  const std::int64_t T = std::int64_t(ids.size());
  auto pattern = [&](auto target) {
    std::vector<float> w(std::size_t(T * T), 0.0f);
    for (std::int64_t i = 0; i < T; ++i) w[std::size_t(i * T + target(i))] = 1.0f;
    return w;
  };
  // Induction: each repeated token looks at the token after its earlier copy.
  const std::vector<float> induction = pattern([](std::int64_t i) { return i >= 3 && i < 6 ? i - 2 : 0; });
  const SentenceRole ri = sentence_role(induction.data(), T, ids.data());
  CHECK(ri.repeat_rows == 3);
  REQUIRE(ri.induction);
  CHECK(*ri.induction == 1.0);
  CHECK(*ri.duplicate_token == 0.0);
  CHECK(role_tag(ri) == "induction 1.00");
  // Duplicate-token: each repeated token looks at its earlier copy.
  const std::vector<float> duplicate = pattern([](std::int64_t i) { return i >= 3 && i < 6 ? i - 3 : 0; });
  const SentenceRole rd = sentence_role(duplicate.data(), T, ids.data());
  CHECK(*rd.duplicate_token == 1.0);
  CHECK(*rd.induction == 0.0);
  CHECK(role_tag(rd) == "duplicate 1.00");
  // Previous-token: the same definition as the probe score.
  const std::vector<float> prev = pattern([](std::int64_t i) { return i > 0 ? i - 1 : 0; });
  const SentenceRole rp = sentence_role(prev.data(), T, ids.data());
  CHECK(rp.prev_token == 1.0);
  CHECK(role_tag(rp) == "prev-token 1.00");
  // A sentence with no repeated token has no induction or duplicate score at all.
  const std::vector<std::int32_t> fresh = {1, 2, 3, 4, 5, 6, 7};
  const SentenceRole rf = sentence_role(induction.data(), T, fresh.data());
  CHECK(rf.repeat_rows == 0);
  CHECK_FALSE(rf.induction);
  CHECK_FALSE(rf.duplicate_token);
  CHECK(role_tag(rf) == "first-token 0.50");  // rows 1, 2 and 6 of the 6 rows i >= 1 look at token 0
  // A token repeated right after itself: its earlier copy is the previous token, the token after it
  // the current one.
  const std::vector<std::int32_t> twice = {5, 5};
  const std::vector<float> self = {1.0f, 0.0f, 0.0f, 1.0f};
  const SentenceRole rs = sentence_role(self.data(), 2, twice.data());
  CHECK(*rs.induction == 1.0);
  CHECK(*rs.duplicate_token == 0.0);
}

TEST_CASE("Role probes: fixed random repeats that never use the last id", "[model][roles]") {
  const auto repeats = role_probe_repeats(300);
  REQUIRE(repeats.size() == 8);
  for (const auto& x : repeats) {
    REQUIRE(x.size() == 40);
    for (std::size_t i = 0; i < 20; ++i) CHECK(x[i] == x[i + 20]);
    for (std::int32_t id : x) CHECK((id >= 0 && id < 299));
  }
  CHECK(role_probe_repeats(300) == repeats);  // deterministic
  CHECK(role_probe_sentences().size() == 8);
}

// The shipped models' cards (assets/models/<name>/README.md) hold the role table `mha model-info
// --roles` prints; the engine must still measure the same roles on the shipped weights.
TEST_CASE("Every shipped model loads and measures the role table its card states", "[model][shipped]") {
  const fs::path models = fs::path(MHA_ASSETS_DIR) / "models";
  int shipped = 0;
  for (const auto& e : fs::directory_iterator(models)) {
    if (!fs::exists(e.path() / "config.json")) continue;
    ++shipped;
    INFO("model " << e.path());
    const LoadedModel loaded = load_model(e.path().string());  // any family
    CHECK(loaded.warnings.empty());
    const RoleTable table = head_roles(*loaded.model, load_tokenizer(e.path().string()));
    std::ifstream card(e.path() / "README.md");
    REQUIRE(card);
    std::string line;
    const std::string header = format_role_table(RoleTable{}).substr(0, 40);
    bool found = false;
    while (std::getline(card, line))
      if (line.rfind(header, 0) == 0) {
        found = true;
        break;
      }
    REQUIRE(found);
    int rows = 0;
    while (std::getline(card, line) && rows < table.n_layer * table.n_head) {
      std::istringstream in(line);
      std::int64_t l = -1, h = -1;
      HeadRole r;
      in >> l >> h >> r.prev_token >> r.first_token >> r.induction >> r.duplicate_token >> r.entropy;
      REQUIRE(in);
      REQUIRE((l >= 0 && l < table.n_layer && h >= 0 && h < table.n_head));
      const HeadRole& m = table.at(l, h);
      INFO("layer " << l << " head " << h);
      CHECK(std::abs(m.prev_token - r.prev_token) < 0.0015);
      CHECK(std::abs(m.first_token - r.first_token) < 0.0015);
      CHECK(std::abs(m.induction - r.induction) < 0.0015);
      CHECK(std::abs(m.duplicate_token - r.duplicate_token) < 0.0015);
      CHECK(std::abs(m.entropy - r.entropy) < 0.0015);
      ++rows;
    }
    CHECK(rows == table.n_layer * table.n_head);
  }
  CHECK(shipped >= 1);
}

// Each card also quotes `mha model-info DIR --copy tools/copy_sentences.txt`: how often the model's
// top-1 next token copies a repeated sentence. The engine must still measure that figure.
TEST_CASE("Every shipped model copies a repeated sentence as often as its card states", "[model][shipped]") {
  const fs::path models = fs::path(MHA_ASSETS_DIR) / "models";
  std::vector<std::string> sentences;
  {
    std::ifstream f(fs::path(MHA_ASSETS_DIR) / ".." / "tools" / "copy_sentences.txt");
    REQUIRE(f);
    for (std::string line; std::getline(f, line);)
      if (!line.empty() && line[0] != '#') sentences.push_back(line);
  }
  REQUIRE(sentences.size() >= 40);
  int shipped = 0;
  for (const auto& e : fs::directory_iterator(models)) {
    if (!fs::exists(e.path() / "config.json")) continue;
    ++shipped;
    INFO("model " << e.path());
    std::ifstream card(e.path() / "README.md");
    REQUIRE(card);
    const std::string prefix = "copy accuracy on " + std::to_string(sentences.size()) + " sentences";
    double stated = -1;
    std::int64_t stated_positions = -1;
    for (std::string line; std::getline(card, line);)
      if (const std::size_t at = line.find(prefix); at != std::string::npos) {
        const std::size_t top = line.find("top-1 ", at);
        REQUIRE(top != std::string::npos);
        std::istringstream in(line.substr(top + 6));
        std::string of;
        in >> stated >> of >> stated_positions;
        REQUIRE(in);
        break;
      }
    REQUIRE(stated >= 0);
    const LoadedModel loaded = load_model(e.path().string());
    const CopyScore score = copy_accuracy(*loaded.model, load_tokenizer(e.path().string()), sentences);
    CHECK(score.positions == stated_positions);
    CHECK(std::abs(score.top1 - stated) < 0.0015);
  }
  CHECK(shipped >= 1);
}

