// Head knock-outs (GPT2Options::knockouts) against torch: the shipped model's forward with heads'
// contexts zeroed or replaced by their mean over positions (tests/fixtures/gpt2_knockout/, made by
// tools/gen_knockout_fixture.py), on the reference loops and the Eigen path; and identities that
// need no torch: knocking out nothing is the plain forward, zeroing a head is zeroing its columns of
// out_proj, and a recompute from the first knocked-out layer equals the whole forward.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "fixtures.hpp"
#include "io/hf_checkpoint.hpp"
#include "io/npy.hpp"
#include "model/gpt2.hpp"

using namespace mha;

namespace {

const std::string kFixture = std::string(MHA_FIXTURES_DIR) + "/gpt2_knockout";

Tensor<float> expected(const std::string& name) {
  return to_tensor<float>(read_npy(kFixture + "/expected/" + name + ".npy"));
}

nlohmann::json meta() {
  std::ifstream in(kFixture + "/meta.json");
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::vector<std::int32_t> fixture_ids() {
  const Tensor<double> ids = to_tensor<double>(read_npy(kFixture + "/expected/input_ids.npy"));
  return std::vector<std::int32_t>(ids.data.begin(), ids.data.end());
}

// Every layer's stage stacked as the fixture holds it: (n_layer, H, T, ·), the batch dimension dropped.
Tensor<float> stacked(const GPT2Run& run, const char* name) {
  Tensor<float> out;
  for (const ForwardResult<float>& r : run.attn) {
    const Tensor<float> t = r.trace[name].contiguous();  // (1, H, T, ·)
    if (out.shape.empty()) {
      out.shape = t.shape;
      out.shape[0] = std::int64_t(run.attn.size());
    }
    out.data.insert(out.data.end(), t.data.begin(), t.data.end());
  }
  return out;
}

void check(const Tensor<float>& got, const Tensor<float>& want, const std::string& what) {
  INFO(what);
  CHECK(test::mismatch(got, want, 2e-5, 1e-4) == "");
}

}  // namespace

TEST_CASE("Head knock-outs equal torch's forward with those heads' contexts zeroed or mean-ablated",
          "[model][knockout]") {
  const nlohmann::json m = meta();
  const LoadedGPT2 loaded = load_gpt2(std::string(MHA_ASSETS_DIR) + "/../" + m["model"].get<std::string>());
  const std::vector<std::int32_t> ids = fixture_ids();
  {
    // The fixture was made from the shipped weights: a retrained model needs it made again.
    const GPT2Run plain = gpt2_forward(loaded.model, ids);
    INFO(
        "the model differs from the one tests/fixtures/gpt2_knockout was made from: run "
        "/usr/bin/python3 tools/gen_knockout_fixture.py");
    REQUIRE(test::mismatch(plain.logits, expected("none.logits"), 2e-5, 1e-4) == "");
  }
  int cases = 0;
  for (const auto& [name, c] : m["cases"].items()) {
    GPT2Options o;
    for (const auto& h : c["knockouts"])
      o.knockouts.push_back({h[0].get<std::int64_t>(), h[1].get<std::int64_t>()});
    o.ablation = c["ablation"] == "mean" ? Ablation::mean : Ablation::zero;
    for (Backend backend : {Backend::reference, Backend::eigen}) {
      o.backend = backend;
      const GPT2Run run = gpt2_forward(loaded.model, ids, o);
      const std::string where = name + " on " + backend_name(backend) + ": ";
      check(run.logits, expected(name + ".logits"), where + "logits");
      check(run.residual, expected(name + ".residual"), where + "residual stream, every layer");
      check(stacked(run, "attn_weights"), expected(name + ".attn_weights"), where + "attention weights");
      check(stacked(run, "context"), expected(name + ".context"), where + "context as the blocks used it");
      std::vector<std::int64_t> top;
      for (const TokenProb& t : run.top_k) top.push_back(t.id);
      CHECK(top == c["top5_ids"].get<std::vector<std::int64_t>>());
    }
    ++cases;
  }
  CHECK(cases == 4);
}

TEST_CASE("Head knock-out identities on a fixture model", "[model][knockout]") {
  const LoadedGPT2 loaded = load_gpt2(std::string(MHA_FIXTURES_DIR) + "/gpt2/f32");
  const GPT2Model& m = loaded.model;
  const Tensor<double> id_tensor =
      to_tensor<double>(read_npy(std::string(MHA_FIXTURES_DIR) + "/gpt2/f32/expected/input_ids.npy"));
  const std::vector<std::int32_t> ids(id_tensor.data.begin(), id_tensor.data.end());
  const std::int64_t H = m.config.n_head, dk = m.config.head_dim(), C = m.config.n_embd;
  for (Backend backend : {Backend::reference, Backend::eigen}) {
    INFO(backend_name(backend));
    GPT2Options plain_o;
    plain_o.backend = backend;
    const GPT2Run plain = gpt2_forward(m, ids, plain_o);

    {  // knocking out nothing is the plain forward, bit for bit
      GPT2Options o = plain_o;
      o.ablation = Ablation::mean;
      const GPT2Run run = gpt2_forward(m, ids, o);
      CHECK(run.logits.data == plain.logits.data);
      CHECK(run.residual.data == plain.residual.data);
    }

    {  // zeroing a head's context equals zeroing its columns of out_proj
      for (const HeadRef k : {HeadRef{0, 1}, HeadRef{1, 3}, HeadRef{2, 0}}) {
        INFO("head " << k.layer << "." << k.head);
        GPT2Options o = plain_o;
        o.knockouts = {k};
        const GPT2Run knocked = gpt2_forward(m, ids, o);
        GPT2Model edited = m;
        Tensor<float>& W = edited.weights.h[std::size_t(k.layer)].attn.out_proj_weight;  // (C, C): (out, in)
        for (std::int64_t i = 0; i < C; ++i)
          for (std::int64_t j = k.head * dk; j < (k.head + 1) * dk; ++j) W.data[std::size_t(i * C + j)] = 0;
        const GPT2Run by_weights = gpt2_forward(edited, ids, plain_o);
        check(knocked.logits, by_weights.logits, "logits");
        check(knocked.residual, by_weights.residual, "residual stream");
        // The knocked-out head's context shows zeros; its pattern is the plain forward's.
        const Tensor<float> ctx =
            knocked.attn[std::size_t(k.layer)].trace["context"].contiguous();  // (1, H, T, d_k)
        const std::int64_t per_head = ctx.numel() / H;
        for (std::int64_t e = k.head * per_head; e < (k.head + 1) * per_head; ++e)
          CHECK(ctx.data[std::size_t(e)] == 0);
        CHECK(knocked.attn[std::size_t(k.layer)].trace["attn_weights"].contiguous().data ==
              plain.attn[std::size_t(k.layer)].trace["attn_weights"].contiguous().data);
        CHECK(knocked.attn[std::size_t(k.layer)].trace["context"].note.find("what-if") != std::string::npos);
        // Layers before it are untouched; a later layer's pattern moves.
        for (std::int64_t l = 0; l <= k.layer; ++l)
          CHECK(knocked.attn[std::size_t(l)].trace["attn_weights"].contiguous().data ==
                plain.attn[std::size_t(l)].trace["attn_weights"].contiguous().data);
        double later = 0;
        for (const PatternChange& p : pattern_changes(plain, knocked)) {
          if (p.head.layer <= k.layer)
            CHECK(p.max_abs_diff == 0);
          else
            later = std::max(later, p.max_abs_diff);
        }
        if (k.layer + 1 < m.config.n_layer) CHECK(later > kPatternChanged);
      }
    }

    {  // a recompute from the first knocked-out layer equals the whole forward
      GPT2Options o = plain_o;
      o.knockouts = heads_except(m.sizes(), 1, {2});
      o.knockouts.push_back({2, 0});
      o.ablation = Ablation::mean;
      CHECK(o.knockouts.size() == std::size_t(H));
      const GPT2Run whole = gpt2_forward(m, ids, o);
      GPT2Run from = plain;
      gpt2_forward_from(m, from, first_knockout_layer(m.sizes(), o.knockouts), o);
      CHECK(from.logits.data == whole.logits.data);
      CHECK(from.residual.data == whole.residual.data);
      // The mean: every position of a mean-ablated head holds the same vector.
      const Tensor<float> ctx = whole.attn[1].trace["context"].contiguous();  // (1, H, T, d_k)
      const std::int64_t T = std::int64_t(ids.size());
      for (std::int64_t t = 1; t < T; ++t)
        for (std::int64_t j = 0; j < dk; ++j)
          CHECK(ctx.data[std::size_t(t * dk + j)] == ctx.data[std::size_t(j)]);
    }
  }
}

TEST_CASE("Head knock-outs: parsing and refusals name the argument", "[model][knockout]") {
  CHECK(parse_heads("1.0,1.3", "--ablate") == std::vector<HeadRef>{{1, 0}, {1, 3}});
  CHECK(format_heads({{1, 0}, {0, 3}}) == "1.0,0.3");
  for (const char* bad : {"1", "1.", ".2", "a.b", "1.2.3", "-1.0", "1.0,", ""}) {
    INFO(bad);
    CHECK_THROWS_MATCHES(parse_heads(bad, "--ablate"), ConfigError,
                         Catch::Matchers::Predicate<ConfigError>(
                             [](const ConfigError& e) { return e.argument == "--ablate"; }));
  }
  const LoadedGPT2 loaded = load_gpt2(std::string(MHA_FIXTURES_DIR) + "/gpt2/f32");
  GPT2Options o;
  o.knockouts = {{3, 0}};  // 3 layers: 0 to 2
  CHECK_THROWS_AS(gpt2_forward(loaded.model, {1, 2, 3}, o), ConfigError);
  o.knockouts = {{0, 4}};  // 4 heads: 0 to 3
  CHECK_THROWS_AS(gpt2_forward(loaded.model, {1, 2, 3}, o), ConfigError);
  CHECK_THROWS_AS(heads_except(loaded.model.sizes(), 0, {7}), ConfigError);
  CHECK(heads_except(loaded.model.sizes(), 2, {0, 3}) == std::vector<HeadRef>{{2, 1}, {2, 2}});
}
