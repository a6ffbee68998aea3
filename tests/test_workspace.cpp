// Recomputing into a Workspace: the results equal a fresh forward bit for bit, the buffers are
// reused when nobody else holds them, and a result still held is never overwritten. Also the
// threaded Eigen path (the fixtures are too small to start threads) against the reference.
#include <catch2/catch.hpp>
#include <cmath>

#include "check_identical.hpp"
#include "errors.hpp"
#include "fixtures.hpp"
#include "masks.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;

namespace {

// A case big enough for the Eigen path to start threads (several MFLOP), with what changes the
// loop's bookkeeping: L over one block of query rows (128) and not a multiple of it, S != L, a
// causal mask, and padding that blocks every key of batch item 1.
// Without extras, that item's rows are fully masked; with them, bias_k and a zero row (never
// blocked) make S' = S + 2.
template <class T>
struct BigCase {
  Config config;
  Weights<T> weights;
  Inputs<T> inputs;
};

template <class T>
BigCase<T> big_case(std::uint64_t seed, bool extras) {
  BigCase<T> c;
  c.config.embed_dim = 64;
  c.config.num_heads = 4;
  const std::int64_t N = 3, L = 150, S = 70;
  SeededCase<T> sc = torch_seeded_case<T>(c.config, seed, N, L, S);
  c.inputs = std::move(sc.inputs);
  c.weights = std::move(sc.weights);
  if (extras) {
    c.config.add_zero_attn = true;
    c.config.add_bias_kv = true;  // torch draws bias_k/v from a normal; any values do here
    c.weights.bias_k = Tensor<T>({1, 1, 64}, T(0.25));
    c.weights.bias_v = Tensor<T>({1, 1, 64}, T(-0.5));
  }
  c.inputs.attn_mask = causal_mask<T>(L, S);
  c.inputs.key_padding_mask = key_padding_from_lengths<T>({S, 0, S / 2}, S);
  return c;
}

}  // namespace

TEST_CASE("a forward into a workspace equals a fresh forward, and reuses its buffers", "[workspace]") {
  for (const std::string& name : fixture_names()) {
    if (name == "float_attn_float_kpm" || fixture_meta(name)["dtype"] == "float64") continue;
    const Fixture<float> f = load_fixture<float>(name);
    for (Backend backend : {Backend::reference, Backend::eigen}) {
      INFO("case " << name << ", backend " << backend_name(backend));
      Options o = f.options;
      o.backend = backend;
      const ForwardResult<float> fresh = forward(f.config, f.weights, f.inputs, o);
      Workspace<float> ws;
      ForwardResult<float> r;
      forward(f.config, f.weights, f.inputs, o, ws, r);
      check_identical(r, fresh);
      const std::int64_t allocated = ws.allocations();
      CHECK(allocated > 0);
      forward(f.config, f.weights, f.inputs, o, ws, r);  // same sizes, r released first: all reused
      CHECK(ws.allocations() == allocated);
      check_identical(r, fresh);
    }
  }
}

TEST_CASE("a result still held is not overwritten by the next forward into its workspace", "[workspace]") {
  const Fixture<float> f = load_fixture<float>("teaching");
  Inputs<float> other = f.inputs;
  for (float& x : other.query.data) x = 1.0f - x;
  const ForwardResult<float> want_first = forward(f.config, f.weights, f.inputs, f.options);
  const ForwardResult<float> want_second = forward(f.config, f.weights, other, f.options);

  Workspace<float> ws;
  ForwardResult<float> r;
  forward(f.config, f.weights, f.inputs, f.options, ws, r);
  const ForwardResult<float> held = r;                        // shares r's buffers
  const Stage<float> held_weights = r.trace["attn_weights"];  // a single stage kept alone
  const std::int64_t allocated = ws.allocations();
  forward(f.config, f.weights, other, f.options, ws, r);
  CHECK(ws.allocations() > allocated);  // the held buffers were left alone
  check_identical(held, want_first);
  CHECK(mismatch(held_weights.contiguous(), want_first.trace["attn_weights"].contiguous(), 0, 0) == "");
  check_identical(r, want_second);

  // A second result object into the same workspace, while r is held: r stays intact.
  ForwardResult<float> r2;
  forward(f.config, f.weights, f.inputs, f.options, ws, r2);
  check_identical(r2, want_first);
  check_identical(r, want_second);
}

TEST_CASE("a failed forward leaves the result it was given untouched", "[workspace]") {
  const Fixture<float> f = load_fixture<float>("teaching");
  Workspace<float> ws;
  ForwardResult<float> r;
  forward(f.config, f.weights, f.inputs, f.options, ws, r);
  Inputs<float> bad = f.inputs;
  bad.query.shape.back() += 1;
  bad.query.data.resize(std::size_t(numel(bad.query.shape)));
  CHECK_THROWS_AS(forward(f.config, f.weights, bad, f.options, ws, r), ShapeError);
  check_identical(r, forward(f.config, f.weights, f.inputs, f.options));
}

TEST_CASE("a workspace follows size changes", "[workspace]") {
  Workspace<double> ws;
  ForwardResult<double> r;
  for (std::int64_t L : {4, 9, 9, 4}) {
    Config c;
    c.embed_dim = 8;
    c.num_heads = 2;
    const SeededCase<double> sc = torch_seeded_case<double>(c, 7, 2, L, L + 1);
    forward(c, sc.weights, sc.inputs, Options{}, ws, r);
    INFO("L = " << L);
    check_identical(r, forward(c, sc.weights, sc.inputs, Options{}));
  }
}

TEST_CASE("a workspace going back and forth between head counts reuses its buffers", "[workspace]") {
  Workspace<float> ws;
  ForwardResult<float> r;
  std::int64_t allocated = 0;
  for (std::int64_t H : {8, 4, 8, 4, 8}) {  // the app's head-count edits: sizes within 2x of each other
    Config c;
    c.embed_dim = 32;
    c.num_heads = H;
    const SeededCase<float> sc = torch_seeded_case<float>(c, 9, 2, 6, 6);
    forward(c, sc.weights, sc.inputs, Options{}, ws, r);
    INFO("H = " << H);
    check_identical(r, forward(c, sc.weights, sc.inputs, Options{}));
    if (H == 8 && allocated == 0) allocated = ws.allocations();
  }
  CHECK(ws.allocations() == allocated);  // after the first forward, every buffer was resized in place
}

TEST_CASE("MultiHeadAttention recomputes in place; a copy of last() survives", "[workspace]") {
  MultiHeadAttention<float> m(16, 4, true, 3);
  Tensor<float> x({2, 5, 16});
  for (std::size_t i = 0; i < x.data.size(); ++i) x.data[i] = std::sin(float(i));
  const Tensor<float> first = m.forward(x);
  const ForwardResult<float> held = m.last();
  for (float& v : x.data) v *= 2;
  const Tensor<float> second = m.forward(x);
  CHECK(mismatch(held.output(), first, 0, 0) == "");
  CHECK(mismatch(m.last().output(), second, 0, 0) == "");
  CHECK(mismatch(first, second, 0, 0) != "");
}

TEST_CASE("the threaded Eigen path agrees with the reference and with one thread", "[workspace][threads]") {
  const BigCase<double> c = big_case<double>(11, false);
  Options o;
  o.backend = Backend::reference;
  const ForwardResult<double> ref = forward(c.config, c.weights, c.inputs, o);
  REQUIRE(ref.fully_masked_rows == 150 * 4);  // batch item 1: every key padded
  o.backend = Backend::eigen;
  o.threads = 1;
  const ForwardResult<double> one = forward(c.config, c.weights, c.inputs, o);
  for (int threads : {2, 3}) {
    o.threads = threads;
    StageTimes times;
    o.stage_times = &times;
    const ForwardResult<double> many = forward(c.config, c.weights, c.inputs, o);
    INFO(threads << " threads");
    CHECK(times.threads == threads);  // the timing hook was filled (no assertion on the times)
    REQUIRE(many.trace.stages.size() == ref.trace.stages.size());
    for (std::size_t i = 0; i < ref.trace.stages.size(); ++i) {
      INFO("stage " << ref.trace.stages[i].name);
      CHECK(mismatch(many.trace.stages[i].contiguous(), ref.trace.stages[i].contiguous(), 1e-12, 1e-10) ==
            "");
      CHECK(mismatch(many.trace.stages[i].contiguous(), one.trace.stages[i].contiguous(), 1e-12, 1e-10) ==
            "");
    }
    CHECK(many.fully_masked_rows == ref.fully_masked_rows);
  }
}

TEST_CASE("the threaded Eigen path in float32 holds the table test's tolerance", "[workspace][threads]") {
  const BigCase<float> c = big_case<float>(12, true);
  Options o;
  o.backend = Backend::reference;
  const ForwardResult<float> ref = forward(c.config, c.weights, c.inputs, o);
  o.backend = Backend::eigen;
  o.threads = 2;
  const ForwardResult<float> fast = forward(c.config, c.weights, c.inputs, o);
  for (std::size_t i = 0; i < ref.trace.stages.size(); ++i) {
    INFO("stage " << ref.trace.stages[i].name);
    CHECK(mismatch(fast.trace.stages[i].contiguous(), ref.trace.stages[i].contiguous(), 1e-6, 1e-5) == "");
  }
  CHECK(fast.fully_masked_rows == ref.fully_masked_rows);
}

TEST_CASE("self-attention's key and value share the query's copy; workspaces hand one scratch on",
          "[workspace]") {
  BigCase<float> c = big_case<float>(7, false);
  c.inputs.key = c.inputs.query;  // one tensor passed three times, as self-attention does
  c.inputs.value = c.inputs.query;
  c.inputs.attn_mask = causal_mask<float>(150, 150);
  c.inputs.key_padding_mask.reset();
  const ForwardResult<float> fresh = forward(c.config, c.weights, c.inputs, Options{});
  const Stage<float>& q = fresh.trace["query"];
  CHECK(fresh.trace["key"].storage == q.storage);
  CHECK(fresh.trace["value"].storage == q.storage);
  // The same values as distinct tensors of those values give, and a key that differs gets its own.
  Inputs<float> apart = c.inputs;
  apart.value.data[5] += 1.0f;
  const ForwardResult<float> other = forward(c.config, c.weights, apart, Options{});
  CHECK(other.trace["key"].storage == other.trace["query"].storage);
  CHECK(other.trace["value"].storage != other.trace["query"].storage);

  // Three workspaces taking turns with one scratch: the same results, and after the first
  // forward of each, nothing allocated.
  Workspace<float> ws[3];
  ForwardResult<float> r[3];
  std::int64_t allocated[3] = {};
  int at = 0;
  for (int round = 0; round < 2; ++round)
    for (int k = 0; k < 3; ++k) {
      move_scratch(ws[at], ws[k]);
      at = k;
      r[k] = ForwardResult<float>();
      forward(c.config, c.weights, c.inputs, Options{}, ws[k], r[k]);
      check_identical(r[k], fresh);
      if (round == 0) allocated[k] = ws[k].allocations();
      CHECK(allocated[k] > 0);
      CHECK(ws[k].allocations() == allocated[k]);
    }
}
