// Tests of studio/scenario: tokens and sizes, every mask preset's cells, fitting masks to new sizes,
// the JSON round trip (custom -inf cells, tensors, .npy side files), every malformed-file error, the
// atomic save, "Copy as PyTorch", and that every preset in assets/presets loads and runs forward.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "check_identical.hpp"
#include "errors.hpp"
#include "io/npy.hpp"
#include "masks.hpp"
#include "scenario.hpp"
#include "temp_dir.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::studio;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

using mha::test::TempDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Equal bit for bit, so NaN equals NaN and -0 differs from 0.
bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void require_same_tensor(const Tensor<float>& a, const Tensor<float>& b) {
  CHECK(a.shape == b.shape);
  CHECK(same_floats(a.data, b.data));
}

void require_same_optional(const std::optional<Tensor<float>>& a, const std::optional<Tensor<float>>& b) {
  REQUIRE(a.has_value() == b.has_value());
  if (a) require_same_tensor(*a, *b);
}

void require_same(const Scenario& a, const Scenario& b) {
  CHECK(a.name == b.name);
  CHECK(a.batch == b.batch);
  CHECK(a.tgt_len == b.tgt_len);
  CHECK(a.src_len == b.src_len);
  CHECK(a.embed_dim == b.embed_dim);
  CHECK(a.num_heads == b.num_heads);
  CHECK(a.num_kv_heads == b.num_kv_heads);
  CHECK(a.bias == b.bias);
  CHECK(a.cross_attention == b.cross_attention);
  CHECK(a.separate_qkv == b.separate_qkv);
  CHECK(a.seed == b.seed);
  CHECK(a.sentence == b.sentence);
  CHECK(a.source_sentence == b.source_sentence);
  CHECK(a.fully_masked == b.fully_masked);
  const MaskSpec &m = a.mask, &n = b.mask;
  CHECK(m.preset == n.preset);
  CHECK(m.scope == n.scope);
  CHECK(m.convention == n.convention);
  CHECK(m.window == n.window);
  CHECK(m.segments == n.segments);
  CHECK(m.prefix == n.prefix);
  CHECK(m.random_p == n.random_p);
  CHECK(m.random_seed == n.random_seed);
  CHECK(m.cells_shape == n.cells_shape);
  CHECK(same_floats(m.cells, n.cells));
  CHECK(m.key_padding == n.key_padding);
  CHECK(m.key_padding_shape == n.key_padding_shape);
  require_same_optional(a.query, b.query);
  require_same_optional(a.key, b.key);
  require_same_optional(a.value, b.value);
  REQUIRE(a.weights.has_value() == b.weights.has_value());
  if (a.weights) {
    const Weights<float>&w = *a.weights, &x = *b.weights;
    require_same_tensor(w.in_proj_weight, x.in_proj_weight);
    require_same_tensor(w.q_proj_weight, x.q_proj_weight);
    require_same_tensor(w.k_proj_weight, x.k_proj_weight);
    require_same_tensor(w.v_proj_weight, x.v_proj_weight);
    require_same_tensor(w.in_proj_bias, x.in_proj_bias);
    require_same_tensor(w.bias_k, x.bias_k);
    require_same_tensor(w.bias_v, x.bias_v);
    require_same_tensor(w.out_proj_weight, x.out_proj_weight);
    require_same_tensor(w.out_proj_bias, x.out_proj_bias);
  }
  CHECK(a.suggested_tab == b.suggested_tab);
  const ViewState &v = a.view, &u = b.view;
  CHECK(v.batch_index == u.batch_index);
  CHECK(v.stage == u.stage);
  CHECK(v.compare_mode == u.compare_mode);
  CHECK(v.compare_a == u.compare_a);
  CHECK(v.compare_b == u.compare_b);
  CHECK(v.show_values == u.show_values);
  CHECK(v.weights_row_scale == u.weights_row_scale);
  CHECK(v.reshape_step == u.reshape_step);
  CHECK(v.mistake == u.mistake);
  CHECK(v.sel_head == u.sel_head);
  CHECK(v.sel_query == u.sel_query);
  CHECK(v.sel_key == u.sel_key);
}

Tensor<float> iota(Shape shape, float start) {
  Tensor<float> t(std::move(shape));
  for (std::size_t k = 0; k < t.data.size(); ++k) t.data[k] = start + 0.1f * float(k);
  return t;
}

// The engine forward a scenario describes, built here from the seeded generator (the app's own
// builder lives in compute.cpp): the mask cells as a float mask, key_padding as a bool mask.
ForwardResult<float> run_forward(const Scenario& s) {
  Config c;
  c.embed_dim = s.embed_dim;
  c.num_heads = s.num_heads;
  c.num_kv_heads = s.num_kv_heads;
  c.bias = s.bias;
  SeededCase<float> sc = torch_seeded_case<float>(c, s.seed, s.batch, s.L(), s.S());
  if (!s.cross_attention && !s.separate_qkv) sc.inputs.key = sc.inputs.value = sc.inputs.query;
  Options o;
  o.fully_masked = s.fully_masked;
  if (!s.mask.cells.empty()) {
    sc.inputs.attn_mask =
        Mask<float>{MaskDType::floating, Tensor<float>(s.mask.cells_shape, s.mask.cells), {}};
    if (s.mask.scope == MaskScope::per_batch) o.attn_mask_layout = MaskLayout::per_batch;
  }
  if (!s.mask.key_padding.empty()) {
    Tensor<float> kp({s.batch, s.S()});
    for (std::size_t k = 0; k < kp.data.size(); ++k) kp.data[k] = s.mask.key_padding[k];
    sc.inputs.key_padding_mask = Mask<float>{MaskDType::boolean, kp, {}};
  }
  return forward(c, sc.weights, sc.inputs, o);
}

// A scenario with a preset mask at the given sizes (self-attention, N=2, H=2).
Scenario masked(MaskPreset preset, std::int64_t L, MaskScope scope = MaskScope::shared) {
  Scenario s;
  s.batch = 2;
  s.num_heads = 2;
  s.tgt_len = L;
  s.mask.preset = preset;
  s.mask.scope = scope;
  apply_mask_preset(s);
  return s;
}

bool blocked(const Scenario& s, std::int64_t slice, std::int64_t i, std::int64_t j) {
  const std::int64_t L = s.L(), S = s.S();
  const float v = s.mask.cells[std::size_t((slice * L + i) * S + j)];
  return std::isinf(v) && v < 0;
}

// The default scenario as JSON, for the malformed-file tests to break one field of.
nlohmann::json valid_json() {
  return nlohmann::json::parse(to_json(Scenario{}));
}

// The message of the FileError that parsing `text` gives (fails the test when there is none).
std::string load_error(const std::string& text) {
  try {
    scenario_from_json(text, "bad.json");
  } catch (const FileError& e) {
    CHECK(e.argument == "bad.json");
    return e.what();
  }
  FAIL("no FileError for: " << text);
  return "";
}

}  // namespace

TEST_CASE("tokens set L and S and label the axes", "[scenario]") {
  CHECK(tokenize("  the cat\tsat\n on  ") == std::vector<std::string>{"the", "cat", "sat", "on"});
  CHECK(tokenize(" \t ").empty());

  Scenario s;
  CHECK(s.L() == 4);
  CHECK(s.S() == 4);
  CHECK(s.query_tokens() == std::vector<std::string>{"t0", "t1", "t2", "t3"});
  CHECK(s.key_tokens() == s.query_tokens());

  s.sentence = "the cat sat on the mat";
  s.src_len = 9;
  CHECK(s.L() == 6);
  CHECK(s.S() == 6);  // self-attention: S = L whatever src_len says
  CHECK(s.key_tokens() == s.query_tokens());

  s.cross_attention = true;
  CHECK(s.S() == 9);
  CHECK(s.key_tokens() == std::vector<std::string>{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"});
  s.source_sentence = "le chat";
  CHECK(s.S() == 2);
  CHECK(s.key_tokens() == std::vector<std::string>{"le", "chat"});
}

TEST_CASE("mask presets fill the cells as specified", "[scenario]") {
  SECTION("none clears the cells") {
    Scenario s = masked(MaskPreset::causal, 4);
    s.mask.preset = MaskPreset::none;
    apply_mask_preset(s);
    CHECK(s.mask.cells.empty());
    CHECK(s.mask.cells_shape.empty());
  }
  SECTION("causal: the upper triangle, also for L != S") {
    Scenario s = masked(MaskPreset::causal, 5);
    REQUIRE(s.mask.cells_shape == Shape{5, 5});
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 5; ++j) {
        CHECK(blocked(s, 0, i, j) == (j > i));
        if (!blocked(s, 0, i, j)) CHECK(s.mask.cells[std::size_t(i * 5 + j)] == 0.0f);
      }
    s.cross_attention = true;
    s.src_len = 7;
    apply_mask_preset(s);
    REQUIRE(s.mask.cells_shape == Shape{5, 7});
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 7; ++j) CHECK(blocked(s, 0, i, j) == (j > i));
  }
  SECTION("sliding window: i - w < j <= i") {
    for (int w : {1, 2, 3}) {
      Scenario s;
      s.tgt_len = 6;
      s.mask.preset = MaskPreset::sliding_window;
      s.mask.window = w;
      apply_mask_preset(s);
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) CHECK(blocked(s, 0, i, j) == !(i - w < j && j <= i));
    }
  }
  SECTION("block diagonal: near-equal contiguous segments") {
    Scenario s;
    s.tgt_len = 5;
    s.mask.preset = MaskPreset::block_diagonal;
    s.mask.segments = 2;
    apply_mask_preset(s);
    const int part[5] = {0, 0, 0, 1, 1};  // 5 split in 2: sizes 3 and 2
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 5; ++j) CHECK(blocked(s, 0, i, j) == (part[i] != part[j]));
    s.mask.segments = 3;
    s.tgt_len = 6;
    apply_mask_preset(s);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 6; ++j) CHECK(blocked(s, 0, i, j) == (i / 2 != j / 2));
  }
  SECTION("prefix LM: j < prefix or j <= i") {
    Scenario s;
    s.tgt_len = 6;
    s.mask.preset = MaskPreset::prefix_lm;
    s.mask.prefix = 3;
    apply_mask_preset(s);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 6; ++j) CHECK(blocked(s, 0, i, j) == !(j < 3 || j <= i));
  }
  SECTION("random: reproducible, about p blocked, never a fully blocked row below p = 1") {
    Scenario s;
    s.batch = 3;
    s.num_heads = 2;
    s.tgt_len = 16;
    s.mask.preset = MaskPreset::random;
    s.mask.scope = MaskScope::per_head;
    s.mask.random_p = 0.3f;
    std::int64_t total_blocked = 0;
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
      s.mask.random_seed = seed;
      apply_mask_preset(s);
      REQUIRE(s.mask.cells_shape == Shape{6, 16, 16});
      for (int n = 0; n < 6; ++n)
        for (int i = 0; i < 16; ++i) {
          CHECK_FALSE(blocked(s, n, i, i));
          int open = 0;
          for (int j = 0; j < 16; ++j) open += !blocked(s, n, i, j), total_blocked += blocked(s, n, i, j);
          CHECK(open > 0);
        }
    }
    const double fraction = double(total_blocked) / (20.0 * 6 * 16 * 16);
    CHECK(fraction == Approx(0.3 * 15.0 / 16.0).margin(0.02));  // the diagonal is never drawn blocked

    s.mask.random_seed = 7;
    apply_mask_preset(s);
    const std::vector<float> first = s.mask.cells;
    apply_mask_preset(s);
    CHECK(same_floats(s.mask.cells, first));
    CHECK_FALSE(same_floats(std::vector<float>(first.begin(), first.begin() + 256),
                            std::vector<float>(first.begin() + 256, first.begin() + 512)));  // slices differ
    s.mask.random_seed = 8;
    apply_mask_preset(s);
    CHECK_FALSE(same_floats(s.mask.cells, first));

    s.mask.random_p = 1.0f;
    apply_mask_preset(s);
    for (float v : s.mask.cells) CHECK(v == -kInf);
  }
  SECTION("padding sets key_padding, not cells") {
    Scenario s = masked(MaskPreset::causal, 5);
    s.batch = 3;
    s.mask.preset = MaskPreset::padding;
    apply_mask_preset(s);
    CHECK(s.mask.cells.empty());
    CHECK(s.mask.key_padding_shape == Shape{3, 5});
    CHECK(s.mask.key_padding == std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1});
  }
  SECTION("scopes repeat the same slice: (N, L, S) and (N·H, L, S)") {
    Scenario b = masked(MaskPreset::causal, 3, MaskScope::per_batch);
    CHECK(b.mask.cells_shape == Shape{2, 3, 3});
    Scenario h = masked(MaskPreset::causal, 3, MaskScope::per_head);
    CHECK(h.mask.cells_shape == Shape{4, 3, 3});
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) CHECK(blocked(h, n, i, j) == (j > i));
  }
  SECTION("a non-padding preset keeps key_padding, fitted to the sizes") {
    Scenario s = masked(MaskPreset::padding, 4);
    const std::vector<std::uint8_t> kp = s.mask.key_padding;
    s.mask.preset = MaskPreset::causal;
    apply_mask_preset(s);
    CHECK(s.mask.key_padding == kp);
    s.tgt_len = 3;
    apply_mask_preset(s);
    CHECK(s.mask.key_padding_shape == Shape{2, 3});
    CHECK(s.mask.key_padding == std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0});  // item 1's pad was key 3
  }
}

TEST_CASE("a mask of 0 and -inf cells packs to bits and unpacks to the same bits", "[scenario]") {
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(5);
  // Lengths around the 64-cell words and the 4-cell compares, and one that is large.
  for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(63), std::size_t(64), std::size_t(65),
                        std::size_t(130), std::size_t(4096 + 17), std::size_t(1) << 20}) {
    INFO("n = " << n);
    std::vector<float> cells(n);
    for (float& c : cells) c = rng() % 3 == 0 ? -inf : 0.0f;
    std::vector<std::uint64_t> bits((n + 63) / 64, ~std::uint64_t(0));
    REQUIRE(mha::pack_blocked(cells.data(), n, bits.data()));
    for (std::size_t i = 0; i < n; ++i) REQUIRE(((bits[i / 64] >> (i % 64)) & 1) == (cells[i] == -inf));
    std::vector<float> back(n, 7.0f);
    mha::unpack_blocked(bits.data(), n, -inf, 0.0f, back.data());
    CHECK(std::memcmp(back.data(), cells.data(), n * sizeof(float)) == 0);
    // Any other cell, anywhere (the last one included), is not bits: -0, +inf, NaN, a bias.
    for (float odd : {-0.0f, inf, std::nanf(""), 0.5f}) {
      for (std::size_t at : {std::size_t(0), n / 2, n - 1}) {
        std::vector<float> other = cells;
        other[at] = odd;
        CHECK_FALSE(mha::pack_blocked(other.data(), n, bits.data()));
      }
    }
  }
  // The engine's mask from bits equals the one from the cells, in each convention.
  std::vector<float> cells = mha::preset_cells(mha::MaskPreset::causal, {}, {70, 70});
  std::vector<std::uint64_t> bits((cells.size() + 63) / 64);
  REQUIRE(mha::pack_blocked(cells.data(), cells.size(), bits.data()));
  for (auto convention :
       {mha::MaskConvention::torch_bool, mha::MaskConvention::keep, mha::MaskConvention::additive}) {
    const mha::Mask<float> want = mha::mask_from_additive({70, 70}, cells, convention);
    mha::Mask<float> got;
    got.values = mha::Tensor<float>({3}, 1.0f);  // values of an earlier use
    mha::mask_from_blocked({70, 70}, bits, convention, got);
    CHECK(got.dtype == want.dtype);
    CHECK(got.values.shape == want.values.shape);
    CHECK(got.values.data.empty());  // held as bits (what they compute: the test below)
    CHECK(got.blocked == bits);
    // Converted back to values, the bits go.
    mha::mask_from_additive({70, 70}, cells, convention, got);
    CHECK(got.values.identical(want.values));
    CHECK(got.blocked.empty());
  }
  mha::Mask<float> wrong;
  CHECK_THROWS_AS(mha::mask_from_blocked({70, 71}, bits, mha::MaskConvention::additive, wrong),
                  mha::ShapeError);
}

TEST_CASE("an attn_mask held as bits computes what its values compute", "[scenario]") {
  using namespace mha;
  using test::check_identical;
  std::mt19937 rng(11);
  struct Case {
    std::int64_t L, S;
    MaskScope scope;
    bool padding, bias_kv;
  };
  // Rows of 37 and 45 cells start mid-word; per-head and per-batch slices; padding; bias_k's column.
  for (const Case& k :
       {Case{37, 37, MaskScope::shared, false, false}, Case{37, 37, MaskScope::per_head, true, false},
        Case{20, 45, MaskScope::per_batch, true, true}, Case{64, 64, MaskScope::shared, true, true}}) {
    for (MaskConvention convention : {MaskConvention::torch_bool, MaskConvention::additive}) {
      INFO("L = " << k.L << ", S = " << k.S << ", scope " << to_string(k.scope) << ", "
                  << to_string(convention));
      Config c;
      c.embed_dim = 16;
      c.num_heads = 4;
      const std::int64_t N = 2;
      SeededCase<float> base = torch_seeded_case<float>(c, 3, N, k.L, k.S);
      if (k.bias_kv) {  // torch draws them with xavier_normal_: any values do here
        c.add_bias_kv = true;
        base.weights.bias_k = Tensor<float>({1, 1, 16}, 0.25f);
        base.weights.bias_v = Tensor<float>({1, 1, 16}, -0.5f);
      }
      const Shape shape = attn_mask_shape(k.scope, N, c.num_heads, k.L, k.S);
      std::vector<float> cells(std::size_t(numel(shape)));
      for (float& x : cells) x = rng() % 4 == 0 ? kMaskBlocked : 0.0f;
      std::vector<std::uint64_t> bits((cells.size() + 63) / 64);
      REQUIRE(pack_blocked(cells.data(), cells.size(), bits.data()));
      Options o;
      if (k.scope == MaskScope::per_batch) o.attn_mask_layout = MaskLayout::per_batch;
      Inputs<float> values = base.inputs, packed = base.inputs;
      values.attn_mask = mask_from_additive(shape, cells, convention);
      packed.attn_mask.emplace();
      mask_from_blocked(shape, bits, convention, *packed.attn_mask);
      REQUIRE(packed.attn_mask->values.data.empty());
      if (k.padding) {
        Mask<float> kpm;
        kpm.values = Tensor<float>({N, k.S});
        for (std::int64_t j = k.S - 5; j < k.S; ++j) kpm.values.data[std::size_t(j)] = 1;
        values.key_padding_mask = packed.key_padding_mask = kpm;
      }
      for (Backend backend : {Backend::reference, Backend::eigen}) {
        o.backend = backend;
        const ForwardResult<float> want = forward(c, base.weights, values, o);
        const ForwardResult<float> got = forward(c, base.weights, packed, o);
        check_identical(got, want);
        CHECK(got.warnings == want.warnings);
      }
    }
  }
  // Bits that do not cover the shape, or beside values, are refused with the reason.
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  SeededCase<float> base = torch_seeded_case<float>(c, 3, 1, 10, 10);
  Inputs<float> in = base.inputs;
  in.attn_mask.emplace();
  in.attn_mask->values.shape = {10, 10};
  in.attn_mask->blocked.assign(1, 0);
  CHECK_THROWS_WITH(forward(c, base.weights, in), Catch::Contains("held as bits, it needs 2 words"));
  in.attn_mask->blocked.assign(2, 0);
  in.attn_mask->values.data.assign(100, 0.0f);
  CHECK_THROWS_AS(forward(c, base.weights, in), ShapeError);
}

TEST_CASE("fit_mask_to_sizes keeps what still fits", "[scenario]") {
  Scenario s;
  s.batch = 2;
  s.tgt_len = 3;
  s.mask.preset = MaskPreset::custom;
  s.mask.cells_shape = {3, 3};
  s.mask.cells = {0, -kInf, -kInf, 0, 0, -1.5f, 0, 0, 0};
  s.mask.key_padding = {0, 0, 1, 0, 1, 1};
  s.mask.key_padding_shape = {2, 3};

  SECTION("growing adds zeros, shrinking keeps the top-left") {
    s.tgt_len = 4;
    fit_mask_to_sizes(s);
    CHECK(s.mask.cells_shape == Shape{4, 4});
    CHECK(same_floats(s.mask.cells, {0, -kInf, -kInf, 0, 0, 0, -1.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
    CHECK(s.mask.key_padding == std::vector<std::uint8_t>{0, 0, 1, 0, 0, 1, 1, 0});
    s.tgt_len = 2;
    fit_mask_to_sizes(s);
    CHECK(same_floats(s.mask.cells, {0, -kInf, 0, 0}));
    CHECK(s.mask.key_padding == std::vector<std::uint8_t>{0, 0, 0, 1});
  }
  SECTION("batch changes keep the items that remain") {
    s.batch = 3;
    fit_mask_to_sizes(s);
    CHECK(s.mask.cells_shape == Shape{3, 3});  // shared: unchanged
    CHECK(s.mask.key_padding_shape == Shape{3, 3});
    CHECK(s.mask.key_padding == std::vector<std::uint8_t>{0, 0, 1, 0, 1, 1, 0, 0, 0});
    s.batch = 1;
    fit_mask_to_sizes(s);
    CHECK(s.mask.key_padding == std::vector<std::uint8_t>{0, 0, 1});
  }
  SECTION("shared to per-head repeats the mask; back keeps the first slice") {
    const std::vector<float> shared = s.mask.cells;
    s.mask.scope = MaskScope::per_head;
    fit_mask_to_sizes(s);
    REQUIRE(s.mask.cells_shape == Shape{4, 3, 3});
    for (int n = 0; n < 4; ++n)
      CHECK(same_floats(std::vector<float>(s.mask.cells.begin() + n * 9, s.mask.cells.begin() + n * 9 + 9),
                        shared));
    s.mask.cells[9] = -kInf;  // slice 1 differs now
    s.mask.scope = MaskScope::shared;
    fit_mask_to_sizes(s);
    CHECK(same_floats(s.mask.cells, shared));
  }
  SECTION("a named preset is made again") {
    s.mask.preset = MaskPreset::causal;
    s.tgt_len = 5;
    fit_mask_to_sizes(s);
    CHECK(s.mask.cells_shape == Shape{5, 5});
    CHECK(blocked(s, 0, 0, 4));
    CHECK_FALSE(blocked(s, 0, 4, 0));
  }
  SECTION("custom from nothing starts all open") {
    Scenario t;
    t.mask.preset = MaskPreset::custom;
    fit_mask_to_sizes(t);
    CHECK(t.mask.cells_shape == Shape{4, 4});
    CHECK(t.mask.cells == std::vector<float>(16, 0.0f));
  }
  SECTION("a mask too large to keep is refused and nothing changes") {
    const Scenario before = s;
    s.tgt_len = 1 << 13;
    s.mask.scope = MaskScope::per_head;
    CHECK_THROWS_AS(fit_mask_to_sizes(s), TooLargeError);
    s.mask.preset = MaskPreset::causal;
    CHECK_THROWS_AS(apply_mask_preset(s), TooLargeError);
    s.tgt_len = before.tgt_len;
    s.mask.scope = before.mask.scope;
    s.mask.preset = before.mask.preset;
    require_same(s, before);
  }
}

TEST_CASE("JSON round trip keeps every field", "[scenario]") {
  Scenario s;
  s.name = "round trip ✓";
  s.batch = 2;
  s.tgt_len = 3;
  s.src_len = 5;
  s.embed_dim = 4;
  s.num_heads = 2;
  s.num_kv_heads = 1;
  s.bias = true;
  s.cross_attention = true;
  s.separate_qkv = true;
  s.seed = std::numeric_limits<std::uint64_t>::max();
  s.sentence = "a b c";
  s.source_sentence = "";
  s.fully_masked = FullyMasked::zero;
  s.mask.preset = MaskPreset::custom;
  s.mask.scope = MaskScope::per_head;
  s.mask.convention = MaskConvention::additive;
  s.mask.window = 3;
  s.mask.segments = 4;
  s.mask.prefix = 1;
  s.mask.random_p = 0.1f;
  s.mask.random_seed = 99;
  s.mask.cells_shape = {4, 3, 5};
  s.mask.cells.assign(60, 0.0f);
  s.mask.cells[1] = -kInf;
  s.mask.cells[2] = kInf;
  s.mask.cells[3] = std::numeric_limits<float>::quiet_NaN();
  s.mask.cells[4] = -1.5f;
  s.mask.cells[5] = 1.0f / 3.0f;
  s.mask.cells[6] = 1e-30f;
  s.mask.key_padding = {0, 0, 0, 1, 1, 0, 0, 0, 0, 1};
  s.mask.key_padding_shape = {2, 5};
  s.query = iota({2, 3, 4}, -1.0f);
  s.key = iota({2, 5, 4}, 0.25f);
  s.value = iota({2, 5, 4}, 3.0f);
  s.weights.emplace();
  s.weights->in_proj_weight = iota({8, 4}, 0.123456789f);
  s.weights->in_proj_bias = iota({8}, -0.5f);
  s.weights->out_proj_weight = iota({4, 4}, 1e-7f);
  s.weights->out_proj_bias = iota({4}, 2.0f);
  s.weights->bias_k = iota({1, 1, 2}, 0.0f);
  s.weights->bias_v = iota({1, 1, 2}, 0.0f);
  ViewState& v = s.view;
  s.suggested_tab = ViewTab::heads;
  v.batch_index = 1;
  v.stage = "scores";
  v.compare_mode = CompareMode::before_after;
  v.compare_a = 3;
  v.compare_b = 0;
  v.show_values = false;
  v.weights_row_scale = true;
  v.reshape_step = 2;
  v.mistake = 3;
  v.sel_head = 1;
  v.sel_query = 2;
  v.sel_key = 4;

  const std::string text = to_json(s);
  CHECK(text.find("\"-inf\"") != std::string::npos);
  CHECK(text.find("\"nan\"") != std::string::npos);
  CHECK(text.find("\"out_proj.weight\"") != std::string::npos);
  CHECK(text.find("q_proj_weight") == std::string::npos);  // absent parameters are not written
  const Scenario back = scenario_from_json(text, "round_trip.json");
  require_same(s, back);
  CHECK(to_json(back) == text);

  SECTION("a named preset's cells are not written but made again") {
    Scenario c = masked(MaskPreset::sliding_window, 6, MaskScope::per_batch);
    const std::string t = to_json(c);
    CHECK(t.find("\"cells\"") == std::string::npos);
    require_same(scenario_from_json(t, "c.json"), c);
  }
  SECTION("missing keys take the defaults, unknown keys are ignored") {
    const Scenario d = scenario_from_json(
        R"({"format": "mha-studio-scenario", "version": 1, "future": {"x": 1}})", "d.json");
    require_same(d, Scenario{});
  }
}

TEST_CASE("a two-million-cell custom mask saves and reloads the same", "[scenario]") {
  // What the scenario fuzzer leaves out for time (tests/fuzz/fuzz_scenario.cpp): a per-batch custom
  // mask of 50 × 200 × 200 cells, 0, -inf and finite values, through to_json and back.
  Scenario s;
  s.batch = 50;
  s.tgt_len = 200;
  s.mask.preset = MaskPreset::custom;
  s.mask.scope = MaskScope::per_batch;
  s.mask.convention = MaskConvention::additive;
  s.mask.cells_shape = {50, 200, 200};
  s.mask.cells.resize(50 * 200 * 200);
  std::mt19937 gen(7);
  for (float& c : s.mask.cells) {
    const std::uint32_t r = gen();
    c = r % 3 == 0 ? -std::numeric_limits<float>::infinity() : r % 3 == 1 ? 0.0f : float(r % 1000) * 1e-3f;
  }
  const std::string text = to_json(s);
  const Scenario back = scenario_from_json(text, "big.json");
  require_same(back, s);
  CHECK(to_json(back) == text);
}

TEST_CASE("every preset in assets/presets loads and runs forward", "[scenario]") {
  const std::filesystem::path dir = std::filesystem::path(MHA_ASSETS_DIR) / "presets";
  const auto load = [&](const char* name) { return load_scenario((dir / name).string()); };
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++count;
    INFO(entry.path().string());
    const Scenario s = load_scenario(entry.path().string());
    const ForwardResult<float> r = run_forward(s);
    const Tensor<float> out = r.output();
    CHECK(out.shape == Shape{s.batch, s.L(), s.embed_dim});
    CHECK(r.fully_masked_rows == 0);
    for (float v : out.data) REQUIRE(std::isfinite(v));
    CHECK(s.query_tokens().size() == std::size_t(s.L()));
    CHECK(s.key_tokens().size() == std::size_t(s.S()));
  }
  CHECK(count == 12);

  const Scenario llama = load("model_gqa_rope.json");  // the trained GQA model: 8 query heads, 2 K/V heads
  CHECK((llama.model == "fortunes-llama-4x8" && llama.num_heads == 8 && llama.num_kv_heads == 2));
  const Scenario nb = load("course_notebook.json");
  CHECK((nb.batch == 3 && nb.L() == 4 && nb.S() == 4 && nb.embed_dim == 8 && nb.num_heads == 2));
  CHECK((!nb.bias && nb.seed == 42 && nb.sentence.empty() && nb.mask.preset == MaskPreset::none));
  const Scenario cat = load("cat_sat_mat.json");
  CHECK((cat.L() == 6 && cat.embed_dim == 64 && cat.num_heads == 4 && cat.bias && cat.seed == 0));
  const Scenario lm = load("causal_lm.json");
  CHECK((lm.L() == 10 && lm.num_heads == 8 && lm.mask.preset == MaskPreset::causal && lm.seed == 1));
  CHECK(lm.mask.cells_shape == Shape{10, 10});
  const Scenario pad = load("padded_batch.json");
  CHECK((pad.batch == 3 && pad.L() == 6 && pad.mask.preset == MaskPreset::padding));
  CHECK(pad.mask.key_padding.size() == 18);
  const Scenario cross = load("cross_attention.json");
  CHECK((cross.cross_attention && cross.L() == 4 && cross.S() == 6));
  CHECK(cross.key_tokens() == std::vector<std::string>{"the", "cat", "sat", "on", "the", "mat"});
  const Scenario gqa = load("gqa.json");
  CHECK(
      (gqa.L() == 8 && gqa.num_heads == 8 && gqa.num_kv_heads == 2 && gqa.mask.preset == MaskPreset::causal));
  // On the shipped model: its sizes and tokenizer, whatever the file's sizes say.
  const Scenario what_if = load("model_what_if.json");
  CHECK((what_if.model == "fortunes-4x8" && what_if.layer == 1 && what_if.batch == 1 &&
         what_if.embed_dim == 128 && what_if.num_heads == 8));
  CHECK((what_if.L() == 26 && what_if.mask.preset == MaskPreset::custom &&
         what_if.mask.cells_shape == Shape{26, 26}));
  CHECK(what_if.query_tokens()[12] ==
        "\xE2\x90\xA3"
        "dog");  // the key the what-if blocks
  const Scenario induction = load("model_induction.json");
  CHECK((induction.layer == 1 && induction.L() == 26 && induction.mask.preset == MaskPreset::causal));
  for (const char* name : {"model_previous_token.json", "model_first_token.json"})
    CHECK(load(name).has_model());
}

TEST_CASE("malformed scenario files give a FileError that says what is wrong", "[scenario]") {
  const auto with = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = valid_json();
    edit(j);
    return load_error(j.dump());
  };
  CHECK_THAT(load_error("{\"format\": \"mha-studio-scenario\",\n \"version\": }"),
             Catch::Contains("bad.json: malformed JSON") && Catch::Contains("line 2"));
  CHECK_THAT(load_error("[1, 2]"), Catch::Contains("expected a JSON object"));
  CHECK_THAT(with([](auto& j) { j["format"] = "something-else"; }),
             Catch::Contains("not an MHA Studio scenario") && Catch::Contains("something-else"));
  CHECK_THAT(with([](auto& j) { j.erase("format"); }), Catch::Contains("not an MHA Studio scenario"));
  CHECK_THAT(with([](auto& j) { j["version"] = 2; }),
             Catch::Contains("was written by a newer MHA Studio (version 2); this one reads version 1"));
  CHECK_THAT(with([](auto& j) { j["version"] = "1"; }), Catch::Contains("version: expected an integer"));
  CHECK_THAT(with([](auto& j) { j["sizes"]["num_heads"] = "two"; }),
             Catch::Contains("bad.json: sizes.num_heads: expected an integer, got \"two\""));
  CHECK_THAT(with([](auto& j) { j["sizes"]["embed_dim"] = 8.5; }),
             Catch::Contains("sizes.embed_dim: expected an integer, got 8.5"));
  CHECK_THAT(with([](auto& j) { j["sizes"]["batch"] = -1; }),
             Catch::Contains("sizes.batch: must not be negative, got -1"));
  CHECK_THAT(with([](auto& j) { j["sizes"] = 3; }), Catch::Contains("sizes: expected an object"));
  CHECK_THAT(with([](auto& j) { j["bias"] = "yes"; }), Catch::Contains("bias: expected true or false"));
  CHECK_THAT(with([](auto& j) { j["seed"] = -5; }), Catch::Contains("seed: expected a non-negative integer"));
  CHECK_THAT(with([](auto& j) { j["mask"]["preset"] = "diagonal"; }),
             Catch::Contains("mask.preset: expected one of") && Catch::Contains("\"causal\""));
  CHECK_THAT(with([](auto& j) { j["view"]["stage"] = 3; }), Catch::Contains("view.stage"));
  CHECK_THAT(with([](auto& j) {
               j["mask"]["preset"] = "custom";
               j["mask"]["cells"] = {{"shape", {4, 4}}, {"data", std::vector<float>(15, 0.0f)}};
             }),
             Catch::Contains("mask.cells: shape (4, 4) needs 16 values, data has 15"));
  CHECK_THAT(with([](auto& j) {
               j["mask"]["preset"] = "custom";
               j["mask"]["cells"] = {{"shape", {1, 2}}, {"data", {0, "-infinity"}}};
             }),
             Catch::Contains("mask.cells.data[1]: expected a number"));
  CHECK_THAT(with([](auto& j) {
               j["mask"]["key_padding"] = {{"shape", {3, 4}}, {"data", {0, 1}}};
             }),
             Catch::Contains("mask.key_padding: shape (3, 4) needs 12 values, data has 2"));
  CHECK_THAT(with([](auto& j) {
               j["mask"]["key_padding"] = {{"shape", {1, 2}}, {"data", {0, 2}}};
             }),
             Catch::Contains("mask.key_padding.data[1]: expected 0 or 1"));
  CHECK_THAT(with([](auto& j) {
               j["tensors"]["query"] = {{"shape", {3, 4, 8}}, {"data", {1.0, 2.0}}};
             }),
             Catch::Contains("tensors.query: shape (3, 4, 8) needs 96 values, data has 2"));
  CHECK_THAT(with([](auto& j) {
               j["tensors"]["in_proj_weight"] = {{"shape", {-1, 8}}, {"data", {}}};
             }),
             Catch::Contains("tensors.in_proj_weight.shape[0]: must not be negative"));
  CHECK_THAT(with([](auto& j) {
               j["tensors"]["query"] = {{"data", {1.0}}};
             }),
             Catch::Contains("tensors.query: \"shape\" is missing"));

  SECTION("sizes that parse but make no valid model are not a load error") {
    nlohmann::json j = valid_json();
    j["sizes"]["embed_dim"] = 7;
    j["sizes"]["num_heads"] = 0;
    const Scenario s = scenario_from_json(j.dump(), "ok.json");
    CHECK(s.embed_dim == 7);
  }
  SECTION("a mask too large to keep is a load error") {
    nlohmann::json j = valid_json();
    j["sizes"]["tgt_len"] = 100000;
    j["mask"]["preset"] = "causal";
    CHECK_THAT(load_error(j.dump()), Catch::Contains("bad.json: mask:"));
  }
}

TEST_CASE("a failed load leaves the scenario as it was", "[scenario]") {
  Scenario s = masked(MaskPreset::causal, 5);
  s.name = "kept";
  const Scenario before = s;
  nlohmann::json j = valid_json();
  j["name"] = "half";  // read before the bad field below
  j["sizes"]["batch"] = 9;
  j["view"]["sel_head"] = "big";
  try {
    s = scenario_from_json(j.dump(), "bad.json");
    FAIL("expected a FileError");
  } catch (const FileError& e) {
    CHECK_THAT(e.what(), Catch::Contains("view.sel_head"));
  }
  require_same(s, before);
}

TEST_CASE("save is atomic and reloads equal; tensors may live in side .npy files", "[scenario]") {
  TempDir dir;
  Scenario s = masked(MaskPreset::prefix_lm, 5, MaskScope::per_batch);
  s.name = "saved";
  s.query = iota({2, 5, 8}, 0.5f);
  const std::string path = dir.file("saved.json");
  save_scenario(path, s);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  require_same(load_scenario(path), s);

  s.name = "saved again";  // overwriting goes through the temp file as well
  save_scenario(path, s);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  CHECK(load_scenario(path).name == "saved again");

  CHECK_THROWS_WITH(save_scenario(dir.file("no/such/folder/x.json"), s),
                    Catch::Contains("no/such/folder/x.json"));
  CHECK_THROWS_WITH(load_scenario(dir.file("missing.json")),
                    Catch::Contains("missing.json") && Catch::Contains("cannot open"));

  SECTION("an {\"npy\": ...} tensor is read relative to the scenario's folder") {
    std::filesystem::create_directory(dir.path / "data");
    write_npy(dir.file("data/query.npy"), to_array(iota({3, 4, 8}, 0.0f)));
    nlohmann::json j = valid_json();
    j["tensors"]["query"] = {{"npy", "data/query.npy"}};
    write_text(dir.file("side.json"), j.dump());
    const Scenario loaded = load_scenario(dir.file("side.json"));
    REQUIRE(loaded.query);
    require_same_tensor(*loaded.query, iota({3, 4, 8}, 0.0f));

    j["tensors"]["key"] = {{"npy", "data/nope.npy"}};
    write_text(dir.file("side.json"), j.dump());
    CHECK_THROWS_WITH(load_scenario(dir.file("side.json")),
                      Catch::Contains("side.json: tensors.key") && Catch::Contains("data/nope.npy"));
  }
}

TEST_CASE("mask_as_pytorch writes a torch snippet in the mask's convention", "[scenario]") {
  Scenario s = masked(MaskPreset::causal, 4);
  std::string py = mask_as_pytorch(s);
  CHECK_THAT(
      py, Catch::Contains(
              "attn_mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)  # True = blocked\n"));
  CHECK(py.back() == '\n');

  s.mask.convention = MaskConvention::keep;
  py = mask_as_pytorch(s);
  CHECK_THAT(py, Catch::Contains("keep = torch.tril(torch.ones(4, 4))  # 1 = attend (course convention)\n"
                                 "attn_mask = keep == 0  # torch wants True = blocked\n"));

  s.mask.convention = MaskConvention::additive;
  CHECK_THAT(mask_as_pytorch(s), Catch::Contains("masked_fill(") && Catch::Contains("float('-inf')"));

  s.mask.scope = MaskScope::per_batch;
  s.mask.convention = MaskConvention::torch_bool;
  apply_mask_preset(s);
  CHECK_THAT(mask_as_pytorch(s), Catch::Contains(".repeat(2, 1, 1)") &&
                                     Catch::Contains("attn_mask = attn_mask.repeat_interleave(2, dim=0)\n"));

  SECTION("custom masks and key padding are written out") {
    Scenario c;
    c.batch = 1;
    c.tgt_len = 2;
    c.mask.preset = MaskPreset::custom;
    c.mask.cells_shape = {2, 2};
    c.mask.cells = {0, -kInf, 0, 0};
    c.mask.key_padding = {0, 1};
    c.mask.key_padding_shape = {1, 2};
    py = mask_as_pytorch(c);
    CHECK_THAT(py,
               Catch::Contains("attn_mask = torch.tensor([\n    [False, True],\n    [False, False],\n])"));
    CHECK_THAT(
        py, Catch::Contains("key_padding_mask = torch.tensor([\n    [False, True],\n])  # True = padding\n"));
    c.mask.convention = MaskConvention::additive;
    CHECK_THAT(mask_as_pytorch(c), Catch::Contains("[0.0, float('-inf')]"));
    c.mask.convention = MaskConvention::torch_bool;
    c.mask.cells[3] = -0.5f;  // not expressible as a bool mask
    CHECK_THAT(mask_as_pytorch(c), Catch::Contains("[0.0, -0.5]"));
  }
  SECTION("padding uses the lengths") {
    Scenario p = masked(MaskPreset::padding, 5);
    py = mask_as_pytorch(p);
    CHECK_THAT(py,
               Catch::Contains("attn_mask = None\n") && Catch::Contains("lengths = torch.tensor([5, 4])"));
  }
  SECTION("a preset without a closed form in torch is written out") {
    Scenario r = masked(MaskPreset::random, 3);
    CHECK_THAT(mask_as_pytorch(r), Catch::Contains("attn_mask = torch.tensor([\n"));
  }
}

TEST_CASE("fields a scenario file has but this version does not know are named in warnings", "[scenario]") {
  const std::string path = std::string(MHA_ASSETS_DIR) + "/presets/cat_sat_mat.json";
  std::vector<std::string> warnings;
  load_scenario(path, &warnings);
  CHECK(warnings.empty());  // every field of a preset is known
  nlohmann::json j = nlohmann::json::parse(to_json(load_scenario(path)));
  j["colour"] = "red";
  j["sizes"]["zoom"] = 3;
  j["mask"]["windw"] = 2;
  const Scenario s = scenario_from_json(j.dump(), "typo.json", &warnings);
  REQUIRE(warnings.size() == 3);
  std::string all;
  for (const std::string& w : warnings) all += w + "\n";
  CHECK_THAT(all, Catch::Matchers::Contains("typo.json: \"colour\" is not a scenario field"));
  CHECK_THAT(all, Catch::Matchers::Contains("\"sizes.zoom\""));
  CHECK_THAT(all, Catch::Matchers::Contains("\"mask.windw\""));
  CHECK(s.tgt_len == load_scenario(path).tgt_len);  // the known fields are read as always
}
