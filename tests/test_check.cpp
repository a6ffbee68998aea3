// The mistake catalogue's variant forwards against explicit loops and against the engine itself
// (where a mistake is an engine forward of other inputs), and the checker's diagnosis on simulated
// students: no Python, no torch. And the time limit the student's file runs under.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <limits>

#include "check.hpp"
#include "compute.hpp"
#include "fixtures.hpp"
#include "masks.hpp"
#include "mistakes.hpp"
#include "subprocess.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;
using mha::studio::CheckCase;
using mha::studio::CheckReport;
using mha::studio::Convention;
using mha::studio::StudentRun;
using mha::studio::StudentRuns;
using mha::studio::Verdict;

namespace {

// ---- a problem with every feature the variants read: cross-attention, biases, per-batch masks ----

struct Problem {
  Config c;
  Weights<float> w;
  Inputs<float> in;
  Options o;
};

Problem problem() {
  const std::int64_t N = 2, L = 4, S = 5, E = 12, H = 3;
  Problem p;
  p.c.embed_dim = E;
  p.c.num_heads = H;
  TorchGenerator gen(9);
  p.w = torch_default_init<float>(p.c, gen);
  for (Tensor<float>* b : {&p.w.in_proj_bias, &p.w.out_proj_bias}) gen.uniform_(*b, -0.5, 0.5);
  p.in.query = gen.rand<float>({N, L, E});
  p.in.key = gen.rand<float>({N, S, E});
  p.in.value = gen.rand<float>({N, S, E});
  for (Tensor<float>* t : {&p.in.query, &p.in.key, &p.in.value})
    for (float& v : t->data) v = 6 * v - 3;
  // Item 0 causal, item 1 with its last two keys padded: masks that differ by batch item.
  Mask<float> m;
  m.values = Tensor<float>({N, L, S});
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = 0; j < S; ++j) {
      m.values.data[std::size_t(i * S + j)] = float(j > i);
      m.values.data[std::size_t((L + i) * S + j)] = float(j >= S - 2);
    }
  p.in.attn_mask = m;
  p.o.backend = Backend::reference;
  p.o.attn_mask_layout = MaskLayout::per_batch;
  return p;
}

// The mistakes written out once more, in double, indexing 4-D as the PyTorch lines read.
std::vector<double> explicit_mistakes(const ForwardResult<float>& f, const Weights<float>& w, MistakeSet s) {
  const Dims& d = f.dims;
  const std::int64_t N = d.N, L = d.L, S = d.S_total, E = d.E, H = d.H, dk = d.d_k;
  const Tensor<float> q = f.trace["q"].contiguous(), k = f.trace["k"].contiguous(),
                      v = f.trace["v"].contiguous();
  const Tensor<float> m = f.trace["attn_mask"].contiguous();  // (N, H, L, S)
  // Element (n, h, r, c) of x (N, rows, E) split into heads: the right .view(N, rows, H, d_k)
  // .transpose(1, 2), or the mistaken .view(N, H, rows, d_k).
  const auto split = [&](const Tensor<float>& x, std::int64_t rows, std::int64_t n, std::int64_t h,
                         std::int64_t r, std::int64_t c) {
    if (!s.has(Mistake::split_without_transpose))
      return double(x.data[std::size_t((n * rows + r) * E + h * dk + c)]);
    return double(x.data[std::size_t(n * rows * E + (h * rows + r) * dk + c)]);
  };
  const double divisor =
      s.has(Mistake::no_scale) ? 1.0 : std::sqrt(double(s.has(Mistake::scale_by_d_model) ? E : dk));
  std::vector<double> concat(std::size_t(N * L * E));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t mn = s.has(Mistake::mask_heads_batches_mixed) ? (n * H + h) % N : n;
      const std::size_t rows = std::size_t(L), cols = std::size_t(S);
      std::vector<std::vector<double>> logits(rows, std::vector<double>(cols));
      std::vector<std::vector<bool>> blocked(rows, std::vector<bool>(cols));
      for (std::int64_t i = 0; i < L; ++i)
        for (std::int64_t j = 0; j < S; ++j) {
          double score = 0;
          for (std::int64_t c = 0; c < dk; ++c) score += split(q, L, n, h, i, c) * split(k, S, n, h, j, c);
          score /= divisor;
          const double mask = m.data[std::size_t(((mn * H + h) * L + i) * S + j)];
          blocked[i][j] = std::isinf(mask);
          if (s.has(Mistake::mask_after_softmax))
            logits[i][j] = score;
          else if (s.has(Mistake::mask_fill_zero) && blocked[i][j])
            logits[i][j] = 0;
          else
            logits[i][j] = score + mask;
        }
      // Softmax over keys (each row) or, the mistake, over queries (each column).
      std::vector<std::vector<double>> weights = logits;
      const bool columns = s.has(Mistake::softmax_over_queries);
      for (std::int64_t a = 0; a < (columns ? S : L); ++a) {
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (std::int64_t b = 0; b < (columns ? L : S); ++b)
          mx = std::max(mx, columns ? logits[b][a] : logits[a][b]);
        for (std::int64_t b = 0; b < (columns ? L : S); ++b)
          sum += std::exp((columns ? logits[b][a] : logits[a][b]) - mx);
        for (std::int64_t b = 0; b < (columns ? L : S); ++b) {
          double& out = columns ? weights[b][a] : weights[a][b];
          out = std::exp(out - mx) / sum;
        }
      }
      if (s.has(Mistake::mask_after_softmax))
        for (std::int64_t i = 0; i < L; ++i)
          for (std::int64_t j = 0; j < S; ++j)
            if (blocked[i][j]) weights[i][j] = 0;
      for (std::int64_t i = 0; i < L; ++i)
        for (std::int64_t c = 0; c < dk; ++c) {
          double acc = 0;
          for (std::int64_t j = 0; j < S; ++j)
            acc += weights[i][j] * split(s.has(Mistake::value_is_key) ? k : v, S, n, h, j, c);
          // .transpose(1, 2).contiguous().view(N, L, E), or the in-order .view(N, L, E).
          const std::int64_t at = s.has(Mistake::merge_without_transpose) ? n * L * E + (h * L + i) * dk + c
                                                                          : (n * L + i) * E + h * dk + c;
          concat[std::size_t(at)] = acc;
        }
    }
  if (s.has(Mistake::no_output_projection)) return concat;
  std::vector<double> out(concat.size());
  for (std::int64_t r = 0; r < N * L; ++r)
    for (std::int64_t o = 0; o < E; ++o) {
      double acc = w.out_proj_bias.data[std::size_t(o)];
      for (std::int64_t c = 0; c < E; ++c)
        acc += concat[std::size_t(r * E + c)] * w.out_proj_weight.data[std::size_t(o * E + c)];
      out[std::size_t(r * E + o)] = acc;
    }
  return out;
}

double max_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t e = 0; e < a.size(); ++e) {
    if (std::isnan(a[e]) && std::isnan(b[e])) continue;
    worst = std::max(worst, std::isnan(a[e]) || std::isnan(b[e]) ? INFINITY : std::fabs(a[e] - b[e]));
  }
  return worst;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  return max_diff(a, std::vector<double>(b.begin(), b.end()));
}

}  // namespace

TEST_CASE("the mistake catalogue: the stable ids, in order", "[check][mistakes]") {
  const std::vector<std::string> ids = {"split_without_transpose",  "merge_without_transpose",
                                        "scale_by_d_model",         "no_scale",
                                        "softmax_over_queries",     "no_output_projection",
                                        "mask_after_softmax",       "mask_fill_zero",
                                        "mask_heads_batches_mixed", "value_is_key"};
  REQUIRE(mistake_catalogue().size() == ids.size());
  for (std::size_t m = 0; m < ids.size(); ++m) {
    CHECK(mistake_catalogue()[m].id == ids[m]);
    CHECK(mistake_catalogue()[m].mistake == Mistake(m));
    CHECK(mistake_from_id(ids[m]) == Mistake(m));
  }
  CHECK(!mistake_from_id("no_such_mistake"));
  // 10 singles, 45 pairs less the two that contradict.
  CHECK(singles_and_pairs().size() == 10 + 45 - 2);
  CHECK(!compatible({Mistake::no_scale, Mistake::scale_by_d_model}));
}

TEST_CASE("every mistake, alone and in pairs, against explicit loops", "[check][mistakes]") {
  const Problem p = problem();
  const ForwardResult<float> f = forward(p.c, p.w, p.in, p.o);
  std::vector<MistakeSet> sets = singles_and_pairs();
  sets.insert(sets.begin(), MistakeSet{});
  for (MistakeSet s : sets) {
    std::string names;
    for (Mistake m : s.list()) names += std::string(mistake_info(m).id) + " ";
    INFO("mistakes: " << names);
    const VariantForward<float> v = mistaken_forward(f, p.w, s);
    CHECK(max_diff(v.output, explicit_mistakes(f, p.w, s)) < 1e-4);
    // Each mistake changes the output on this problem (none hides behind its sizes).
    if (!s.empty()) CHECK(max_diff(v.output, f.trace["output"].contiguous().data) > 1e-3);
  }
}

TEST_CASE("variant forwards equal the engine where a mistake is another forward", "[check][mistakes]") {
  const Problem p = problem();
  const ForwardResult<float> f = forward(p.c, p.w, p.in, p.o);
  // No mistake: the forward itself (the concat bit for bit on the reference path).
  const VariantForward<float> none = mistaken_forward(f, p.w, {});
  CHECK(none.concat == f.trace["concat"].contiguous().data);
  CHECK(max_diff(none.output, f.trace["output"].contiguous().data) < 1e-5);
  CHECK(max_diff(none.weights, f.trace["attn_weights"].contiguous().data) < 1e-6);
  // The scale mistakes: the engine's own score divisor (the What-if's).
  for (auto [mistake, divisor] :
       {std::pair{Mistake::no_scale, 1.0}, std::pair{Mistake::scale_by_d_model, std::sqrt(12.0)}}) {
    Options o = p.o;
    o.score_divisor = divisor;
    const ForwardResult<float> g = forward(p.c, p.w, p.in, o);
    CHECK(max_diff(mistaken_forward(f, p.w, {mistake}).output, g.trace["output"].contiguous().data) < 1e-5);
  }
  // Heads and batches mixed: torch's (N·H, L, S) layout filled by mask.repeat(H, 1, 1).
  {
    const std::int64_t N = 2, H = 3, LS = 4 * 5;
    Inputs<float> in = p.in;
    Mask<float> m;
    m.values = Tensor<float>({N * H, 4, 5});
    for (std::int64_t slice = 0; slice < N * H; ++slice)
      std::copy_n(p.in.attn_mask->values.data.begin() + (slice % N) * LS, LS,
                  m.values.data.begin() + slice * LS);
    in.attn_mask = m;
    Options o = p.o;
    o.attn_mask_layout = MaskLayout::torch;
    const ForwardResult<float> g = forward(p.c, p.w, in, o);
    CHECK(max_diff(mistaken_forward(f, p.w, {Mistake::mask_heads_batches_mixed}).output,
                   g.trace["output"].contiguous().data) < 1e-5);
  }
  // The keys as values: a forward whose value projection is the key projection, on value = key.
  {
    Weights<float> w = p.w;
    const std::int64_t E = 12;
    std::copy_n(w.in_proj_weight.data.begin() + E * E, E * E, w.in_proj_weight.data.begin() + 2 * E * E);
    std::copy_n(w.in_proj_bias.data.begin() + E, E, w.in_proj_bias.data.begin() + 2 * E);
    Inputs<float> in = p.in;
    in.value = in.key;
    const ForwardResult<float> g = forward(p.c, w, in, p.o);
    CHECK(max_diff(mistaken_forward(f, p.w, {Mistake::value_is_key}).output,
                   g.trace["output"].contiguous().data) < 1e-5);
  }
  // No output projection: the trace's concat.
  CHECK(mistaken_forward(f, p.w, {Mistake::no_output_projection}).output ==
        f.trace["concat"].contiguous().data);
}

// ---- the diagnosis on simulated students ----

namespace {

Weights<float> student_weights(std::int64_t E, std::int64_t H, std::uint64_t seed) {
  Config c;
  c.embed_dim = E;
  c.num_heads = H;
  TorchGenerator gen(seed);
  Weights<float> w = torch_default_init<float>(c, gen);
  gen.uniform_(w.in_proj_bias, -0.3, 0.3);
  return w;
}

// The engine's forward of a case as the checker computes it, with `blocked` as the mask.
ForwardResult<float> case_forward(const CheckCase& c, const Weights<float>& w, const Tensor<float>& blocked) {
  Config cfg;
  cfg.embed_dim = c.d_model;
  cfg.num_heads = c.num_heads;
  cfg.bias = !w.in_proj_bias.empty();
  Inputs<float> in;
  in.query = c.query;
  in.key = c.key;
  in.value = c.value;
  Options o;
  o.backend = Backend::reference;
  if (!blocked.empty()) {
    Mask<float> m;
    m.values = blocked;
    in.attn_mask = m;
    if (blocked.dim() == 3) o.attn_mask_layout = MaskLayout::per_batch;
  }
  return forward(cfg, w, in, o);
}

// A student who makes the mistakes `s` and writes masks in `convention`: given a mask in another
// convention, it reads it inverted (a keep mask read as block, ...), as a real one would.
StudentRuns simulate(const std::vector<CheckCase>& cases, MistakeSet s, Convention convention,
                     bool return_weights) {
  StudentRuns r;
  r.call_style = "qkv";
  r.takes_mask = true;
  for (const CheckCase& c : cases) {
    if (!r.weights.count({c.d_model, c.num_heads}))
      r.weights[{c.d_model, c.num_heads}] = student_weights(c.d_model, c.num_heads, std::uint64_t(c.d_model));
    const Weights<float>& w = r.weights[{c.d_model, c.num_heads}];
    const auto run = [&](const Tensor<float>& blocked) {
      const ForwardResult<float> f = case_forward(c, w, blocked);
      const VariantForward<float> v = mistaken_forward(f, w, s);
      StudentRun out;
      out.output = Tensor<float>(f.trace["output"].shape, v.output);
      if (return_weights) out.weights = Tensor<float>(f.trace["attn_weights"].shape, v.weights);
      return out;
    };
    if (c.blocked.empty()) {
      r.runs[c.name][""] = run(c.blocked);
      continue;
    }
    Tensor<float> inverted = c.blocked;
    for (float& v : inverted.data) v = 1 - v;
    for (Convention given : {Convention::keep, Convention::block, Convention::additive})
      r.runs[c.name][to_string(given)] = run(given == convention ? c.blocked : inverted);
  }
  return r;
}

std::string ids(const std::vector<Mistake>& ms) {
  std::string out;
  for (Mistake m : ms) out += std::string(mistake_info(m).id) + " ";
  return out;
}

}  // namespace

TEST_CASE("diagnosis: a correct student in each mask convention", "[check]") {
  const std::vector<CheckCase> cases = studio::check_cases();
  for (Convention conv : {Convention::keep, Convention::block, Convention::additive}) {
    INFO("convention " << to_string(conv));
    const CheckReport r = studio::diagnose(cases, simulate(cases, {}, conv, conv == Convention::block));
    CHECK(r.verdict == Verdict::correct);
    CHECK(r.convention == conv);
    CHECK(r.mistakes.empty());
    for (const studio::CaseReport& c : r.cases) {
      INFO(c.name);
      CHECK(c.ran);
      CHECK(c.ok);
      CHECK(c.max_abs_diff < 1e-5);
    }
  }
}

TEST_CASE("diagnosis: every mistake alone and every pair is named", "[check]") {
  const std::vector<CheckCase> cases = studio::check_cases();
  for (MistakeSet s : singles_and_pairs()) {
    INFO("made: " << ids(s.list()));
    const CheckReport r = studio::diagnose(cases, simulate(cases, s, Convention::keep, s.list().size() == 1));
    CHECK(r.verdict == Verdict::mistakes);
    CHECK(ids(r.mistakes) == ids(s.list()));
    CHECK(r.convention == Convention::keep);
  }
}

TEST_CASE("diagnosis: unknown differences, errors and a missing output projection", "[check]") {
  const std::vector<CheckCase> cases = studio::check_cases();
  SECTION("a difference no mistake explains, after the softmax") {
    StudentRuns s = simulate(cases, {}, Convention::keep, true);
    for (float& v : s.runs["causal"]["keep"].output->data) v += 0.25f;
    const CheckReport r = studio::diagnose(cases, s);
    CHECK(r.verdict == Verdict::unknown);
    CHECK(r.convention == Convention::keep);
    CHECK(r.unknown_detail.find("case causal") != std::string::npos);
    CHECK(r.unknown_detail.find("after the softmax") != std::string::npos);
  }
  SECTION("a forward that raises in every convention names the case") {
    StudentRuns s = simulate(cases, {}, Convention::keep, false);
    for (auto& [conv, run] : s.runs["per_batch"]) {
      run.output.reset();
      studio::PythonError e;
      e.stage = "forward";
      e.type = "RuntimeError";
      e.message = "The size of tensor a (3) must match the size of tensor b (2)";
      e.file = "student.py";
      e.line = 42;
      e.case_name = "per_batch";
      e.convention = conv;
      run.error = e;
    }
    const CheckReport r = studio::diagnose(cases, s);
    CHECK(r.verdict == Verdict::error);
    CHECK(r.error_message.find("student.py:42: RuntimeError") != std::string::npos);
    CHECK(r.error_message.find("case per_batch") != std::string::npos);
  }
  SECTION("a convention that raises is not the student's") {
    StudentRuns s = simulate(cases, {}, Convention::additive, false);
    for (auto& [name, runs] : s.runs)
      if (runs.count("keep")) {
        runs["keep"].output.reset();
        runs["keep"].error = studio::PythonError{};
      }
    const CheckReport r = studio::diagnose(cases, s);
    CHECK(r.verdict == Verdict::correct);
    CHECK(r.convention == Convention::additive);
  }
  SECTION("no output projection among the parameters") {
    StudentRuns s = simulate(cases, {Mistake::no_output_projection}, Convention::keep, false);
    for (auto& [cfg, w] : s.weights) {
      w.out_proj_weight = {};
      w.out_proj_bias = {};
    }
    const CheckReport r = studio::diagnose(cases, s);
    CHECK(r.verdict == Verdict::mistakes);
    CHECK(ids(r.mistakes) == "no_output_projection ");
  }
  SECTION("a self-attention forward(x, mask) skips cross-attention") {
    StudentRuns s = simulate(cases, {}, Convention::keep, false);
    s.call_style = "x";
    // Self-attention: the student's outputs on key = value = query.
    for (const CheckCase& c : cases) {
      CheckCase self = c;
      self.key = self.value = c.query;
      if (c.cross) {
        s.runs.erase(c.name);
        continue;
      }
      const Weights<float>& w = s.weights[{c.d_model, c.num_heads}];
      for (auto& [conv, run] : s.runs[c.name]) {
        Tensor<float> blocked = c.blocked;
        if (!conv.empty() && conv != "keep")
          for (float& v : blocked.data) v = 1 - v;
        run.output = case_forward(self, w, blocked).output();
      }
    }
    const CheckReport r = studio::diagnose(cases, s);
    CHECK(r.verdict == Verdict::correct);
    for (const studio::CaseReport& c : r.cases)
      if (c.name == "cross_attention") CHECK(!c.ran);
  }
}

TEST_CASE("check without Python: tensors for a scenario", "[check]") {
  const studio::Scenario s = studio::load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/causal_lm.json");
  studio::Built b = studio::build_forward(s);
  const ForwardResult<float> f = forward(b.config, b.weights, b.inputs, b.options);
  const CheckReport right = studio::check_tensors(s, f.output(), f.attn_weights(false));
  CHECK(right.verdict == Verdict::correct);
  REQUIRE(right.cases.size() == 1);
  CHECK(right.cases[0].ok);
  CHECK(right.cases[0].weights_max_abs_diff >= 0);
  const VariantForward<float> v = mistaken_forward(f, b.weights, {Mistake::scale_by_d_model});
  const CheckReport wrong = studio::check_tensors(s, Tensor<float>(f.output().shape, v.output), std::nullopt);
  CHECK(wrong.verdict == Verdict::mistakes);
  CHECK(ids(wrong.mistakes) == "scale_by_d_model ");
  CHECK(studio::report_json(wrong).find("\"scale_by_d_model\"") != std::string::npos);
  Tensor<float> noise = f.output();
  for (float& x : noise.data) x += 1.f;
  CHECK(studio::check_tensors(s, noise, std::nullopt).verdict == Verdict::unknown);
  CHECK_THROWS_AS(studio::check_tensors(s, Tensor<float>({1, 2, 3}), std::nullopt), ShapeError);
}

TEST_CASE("the scenario as a PyTorch test file", "[check]") {
  const studio::Scenario s =
      studio::load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/padded_batch.json");
  const std::string py = studio::scenario_as_pytorch_test(s);
  CHECK(py.find("nn.MultiheadAttention(E, H") != std::string::npos);
  CHECK(py.find("expected = t([") != std::string::npos);
  CHECK(py.find("def test_torch_gives_expected") != std::string::npos);
  const studio::Scenario gqa = studio::load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/gqa.json");
  CHECK_THROWS_AS(studio::scenario_as_pytorch_test(gqa), ConfigError);
}

TEST_CASE("a helper past its time limit is stopped, whatever it started; it starts in the folder given",
          "[check][platform]") {
  platform::ProcessOptions o;
  o.timeout_s = 0.5;
  const auto started = std::chrono::steady_clock::now();
  // A hang with its output open, one that closed it, and one whose own child holds it open.
  for (const char* script : {"sleep 30", "exec >&-; sleep 30", "sleep 30 & wait"}) {
    INFO(script);
    const platform::ProcessResult r = platform::run_process({"sh", "-c", script}, o);
    CHECK(r.started);
    CHECK(r.timed_out);
  }
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
  o.timeout_s = 10;
  o.working_dir = "/";
  const platform::ProcessResult r = platform::run_process({"pwd"}, o);
  CHECK(!r.timed_out);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "/\n");
}
