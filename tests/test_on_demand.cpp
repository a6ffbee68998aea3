// Trace on demand: a forward whose Options::stages leaves out the (N, H, L, S') stages keeps no L×S
// array and gives the same output; stage_rows() then computes any rows of any head of those stages,
// and every value equals the full trace's bit for bit — on every torch fixture, on cases that cross
// many row blocks (masks, padding, GQA, bias_kv, zero_attn, both fully-masked policies), after a
// mask edit, and for any row range.
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <thread>

#include "case_table.hpp"
#include "check_identical.hpp"
#include "errors.hpp"
#include "fixtures.hpp"
#include "masks.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;

namespace {

const std::vector<std::string> kLeftOut = {"scores", "scores_scaled", "scores_masked", "attn_weights",
                                           "attn_weights_avg"};

// Rows [i0, i0 + rows) of (n, h) of a full trace's stage, (rows, S').
template <class T>
Tensor<T> slice(const ForwardResult<T>& full, const std::string& stage, std::int64_t n, std::int64_t h,
                std::int64_t i0, std::int64_t rows) {
  const Dims& d = full.dims;
  const Tensor<T> all = full.trace[stage].contiguous();
  const std::int64_t plane = stage == "attn_weights_avg" ? n * d.L : (n * d.H + h) * d.L;
  Tensor<T> out({rows, d.S_total});
  std::copy(all.data.begin() + (plane + i0) * d.S_total, all.data.begin() + (plane + i0 + rows) * d.S_total,
            out.data.begin());
  return out;
}

// `od` (computed with the L×S stages left out) against `full`, every stage it holds and every left-out
// stage through stage_rows, whole planes and a few row ranges; and stage_rows on `full` itself.
template <class T>
void check_on_demand(const ForwardResult<T>& od, const ForwardResult<T>& full) {
  for (const std::string& name : kLeftOut) CHECK_FALSE(od.trace.has(name));
  for (const Stage<T>& s : od.trace.stages) {
    INFO("stage " << s.name);
    CHECK(mismatch(s.contiguous(), full.trace[s.name].contiguous(), 0, 0) == "");
  }
  CHECK(od.fully_masked_rows == full.fully_masked_rows);
  // find_stage: the trace's own stage, or a left-out one computed whole, with the full trace's
  // values, shape, formula and note; computed once, then the same object.
  for (const std::string& name : kLeftOut) {
    INFO("find_stage " << name);
    const Stage<T>* s = find_stage(od, name);
    REQUIRE(s != nullptr);
    const Stage<T>& want = full.trace[name];
    CHECK(s->shape == want.shape);
    CHECK(s->formula == want.formula);
    CHECK(s->note == want.note);
    CHECK(mismatch(s->contiguous(), want.contiguous(), 0, 0) == "");
    CHECK(find_stage(od, name) == s);
    CHECK(find_stage(full, name) == &want);
  }
  CHECK(find_stage(od, "no_such_stage") == nullptr);
  std::vector<std::string> order, want_order;
  for (const Stage<T>* s : trace_order(od.trace)) order.push_back(s->name);
  for (const Stage<T>& s : full.trace.stages) want_order.push_back(s.name);
  CHECK(order == want_order);
  const Dims& d = full.dims;
  const std::int64_t ranges[][2] = {{0, d.L}, {d.L / 3, (d.L + 1) / 2}, {d.L - 1, 1}, {d.L / 2, 0}};
  for (const std::string& name : kLeftOut)
    for (std::int64_t n = 0; n < d.N; ++n)
      for (std::int64_t h = 0; h < (name == "attn_weights_avg" ? 1 : d.H); ++h)
        for (const auto& range : ranges) {
          const std::int64_t i0 = range[0], rows = std::min(range[1], d.L - i0);
          INFO("stage " << name << " n " << n << " h " << h << " rows " << i0 << "+" << rows);
          const Tensor<T> want = slice(full, name, n, h, i0, rows);
          CHECK(mismatch(stage_rows(od, name, n, h, i0, rows), want, 0, 0) == "");
          CHECK(mismatch(stage_rows(full, name, n, h, i0, rows), want, 0, 0) == "");
        }
}

template <class T>
void run_fixture(const std::string& name) {
  const Fixture<T> f = load_fixture<T>(name);
  if (refused_cases.count(name)) return;
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    Options o = f.options;
    o.backend = Backend::eigen;
    o.threads = threads;
    const ForwardResult<T> full = forward(f.config, f.weights, f.inputs, o);
    o.stages = {"output"};
    const ForwardResult<T> od = forward(f.config, f.weights, f.inputs, o);
    check_on_demand(od, full);
    CHECK_FALSE(od.overview.valid());
    // The weights overview beside the output, at a few widths of column; and with every stage kept.
    for (std::int64_t block : {1, 3, 16}) {
      INFO("overview block " << block);
      Options ov = o;
      ov.weights_overview = block;
      check_overview(forward(f.config, f.weights, f.inputs, ov), full, block);
      ov.stages.clear();
      const ForwardResult<T> both = forward(f.config, f.weights, f.inputs, ov);
      check_overview(both, full, block);
    }
  }
}

struct Case {
  const char* name;
  std::int64_t N, L, S, E, H, G;
  bool bias_kv, zero_attn, padding;
  FullyMasked policy;
  std::int64_t head_dim = 0;  // Config::explicit_head_dim
};

template <class T>
void run_case(const Case& k) {
  INFO("case " << k.name);
  Config c;
  c.embed_dim = k.E;
  c.num_heads = k.H;
  c.num_kv_heads = k.G;
  c.add_zero_attn = k.zero_attn;
  c.explicit_head_dim = k.head_dim;
  SeededCase<T> sc = torch_seeded_case<T>(c, 5, k.N, k.L, k.S);
  if (k.bias_kv) {  // torch's xavier_normal_ draws are not reproduced: values of our own
    c.add_bias_kv = true;
    const std::int64_t kv = c.kv_embed_dim();
    sc.weights.bias_k = Tensor<T>({1, 1, kv});
    sc.weights.bias_v = Tensor<T>({1, 1, kv});
    for (std::int64_t x = 0; x < kv; ++x) {
      sc.weights.bias_k.data[std::size_t(x)] = T(0.05) * T(x % 7) - T(0.1);
      sc.weights.bias_v.data[std::size_t(x)] = T(0.5) - T(0.03) * T(x % 11);
    }
  }
  Inputs<T> in = sc.inputs;
  in.attn_mask = causal_mask<T>(k.L, k.S);
  if (k.padding) {
    std::vector<std::int64_t> lengths(std::size_t(k.N), k.S);
    lengths.back() = k.S / 2;
    in.key_padding_mask = key_padding_from_lengths<T>(lengths, k.S);
  }
  Options o;
  o.fully_masked = k.policy;
  const ForwardResult<T> full = forward(c, sc.weights, in, o);
  o.stages = {"attn_mask"};  // a stage that is not left out: the inputs' own
  const ForwardResult<T> od = forward(c, sc.weights, in, o);
  check_on_demand(od, full);
  Options ov = o;
  ov.weights_overview = 8;  // rows longer than a few columns, a ragged last one
  check_overview(forward(c, sc.weights, in, ov), full, 8);

  // A mask edit on the on-demand result keeps its stages out and equals a full forward's.
  Inputs<T> after = in;
  after.attn_mask->values.data[std::size_t((k.L / 2) * k.S + 1)] = T(1);
  for (std::int64_t j = 0; j < k.S; ++j) after.attn_mask->values.data[std::size_t(2 * k.S + j)] = T(1);
  Options full_o;
  full_o.fully_masked = k.policy;
  const ForwardResult<T> want = forward(c, sc.weights, after, full_o);
  Workspace<T> ws_base, ws;
  ForwardResult<T> base, edited;
  forward(c, sc.weights, in, o, ws_base, base);
  CHECK(forward_mask_edit(c, sc.weights, after, o, base, ws, edited));
  check_on_demand(edited, want);
}

}  // namespace

TEST_CASE("trace on demand equals the full trace on every torch fixture", "[on_demand]") {
  const std::vector<std::string> names = fixture_names();
  REQUIRE(names.size() >= 28);
  for (const std::string& name : names) {
    DYNAMIC_SECTION(name) {
      if (fixture_meta(name)["dtype"] == "float64")
        run_fixture<double>(name);
      else
        run_fixture<float>(name);
    }
  }
}

TEST_CASE("trace on demand across row blocks: masks, padding, GQA, bias_kv, zero_attn, mask edits",
          "[on_demand]") {
  const Case cases[] = {
      {"self, causal, padding", 2, 300, 300, 32, 4, 4, false, false, true, FullyMasked::nan},
      {"cross, GQA, bias_kv, zero_attn", 1, 200, 137, 48, 6, 2, true, true, false, FullyMasked::zero},
      {"one block", 1, 9, 9, 16, 2, 2, false, false, true, FullyMasked::zero},
      {"heads wider than E / H", 1, 200, 200, 32, 4, 2, false, false, true, FullyMasked::nan, 16},
  };
  for (const Case& k : cases) {
    run_case<float>(k);
    run_case<double>(k);
  }
}

TEST_CASE("stage_rows refuses what it cannot compute, naming why", "[on_demand]") {
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  SeededCase<float> sc = torch_seeded_case<float>(c, 1, 1, 4, 4);
  Options o;
  const ForwardResult<float> r = forward(c, sc.weights, sc.inputs, o);
  CHECK_THROWS_WITH(stage_rows(r, "context", 0, 0, 0, 1), Catch::Contains("not computed on demand"));
  CHECK_THROWS_AS(stage_rows(r, "attn_weights", 1, 0, 0, 1), ConfigError);
  CHECK_THROWS_AS(stage_rows(r, "attn_weights", 0, 2, 0, 1), ConfigError);
  CHECK_THROWS_AS(stage_rows(r, "attn_weights", 0, 0, 3, 2), ConfigError);
  CHECK_THROWS_AS(stage_rows(r, "attn_weights", 0, 0, -1, 1), ConfigError);
  o.backend = Backend::reference;
  const ForwardResult<float> ref = forward(c, sc.weights, sc.inputs, o);
  CHECK_THROWS_WITH(stage_rows(ref, "attn_weights", 0, 0, 0, 1), Catch::Contains("cpu-backend"));
}

// stage_blocks against patches reduced by hand from the full trace: max and mean, ragged edges, NaN
// rows (every key blocked under torch's policy), an origin inside the map, and block 1.
TEST_CASE("stage_blocks: level of detail of an on-demand stage equals the full trace's patches",
          "[on_demand]") {
  Config c;
  c.embed_dim = 16;
  c.num_heads = 2;
  const std::int64_t L = 300, S = 290;
  SeededCase<float> sc = torch_seeded_case<float>(c, 9, 1, L, S);
  sc.inputs.attn_mask = causal_mask<float>(L, S);
  for (std::int64_t j = 0; j < S; ++j)
    sc.inputs.attn_mask->values.data[std::size_t(7 * S + j)] = 1;  // row 7: NaN
  Options o;
  const ForwardResult<float> full = forward(c, sc.weights, sc.inputs, o);
  o.stages = {"output"};
  const ForwardResult<float> od = forward(c, sc.weights, sc.inputs, o);
  for (const char* stage : {"attn_weights", "scores_masked", "attn_weights_avg"})
    for (BlockReduce reduce : {BlockReduce::max, BlockReduce::mean})
      for (const auto& [block, i0, j0] : {std::make_tuple(1, 3, 5), std::make_tuple(7, 0, 0),
                                          std::make_tuple(64, 10, 2), std::make_tuple(300, 0, 0)}) {
        const std::int64_t out_rows = (L - i0 + block - 1) / block, out_cols = (S - j0 + block - 1) / block;
        INFO(stage << " block " << block << " from (" << i0 << ", " << j0 << ") "
                   << (reduce == BlockReduce::max ? "max" : "mean"));
        const Tensor<float> all = slice(full, stage, 0, 1, 0, L);  // head 1 (ignored for the average)
        Tensor<float> want({out_rows, out_cols});
        for (std::int64_t r = 0; r < out_rows; ++r)
          for (std::int64_t q = 0; q < out_cols; ++q) {
            double acc = reduce == BlockReduce::mean ? 0 : -INFINITY;
            bool nan = false;
            std::int64_t count = 0;
            for (std::int64_t i = i0 + r * block; i < std::min(L, i0 + (r + 1) * block); ++i)
              for (std::int64_t j = j0 + q * block; j < std::min(S, j0 + (q + 1) * block); ++j, ++count) {
                const double v = all.data[std::size_t(i * S + j)];
                nan = nan || std::isnan(v);
                acc = reduce == BlockReduce::mean ? acc + v : std::max(acc, v);
              }
            want.data[std::size_t(r * out_cols + q)] =
                nan ? NAN : float(reduce == BlockReduce::mean ? acc / double(count) : acc);
          }
        CHECK(mismatch(stage_blocks(od, stage, 0, 1, i0, j0, block, out_rows, out_cols, reduce), want, 0,
                       0) == "");
      }
  CHECK_THROWS_AS(stage_blocks(od, "attn_weights", 0, 0, 0, 0, 8, 40, 1, BlockReduce::max), ConfigError);
  CHECK_THROWS_AS(stage_blocks(od, "attn_weights", 0, 0, 0, 0, 0, 1, 1, BlockReduce::max), ConfigError);
}

TEST_CASE("the memory guard counts only the stages a forward keeps", "[on_demand]") {
  Config c;
  c.embed_dim = 16;
  c.num_heads = 2;
  SeededCase<float> sc = torch_seeded_case<float>(c, 2, 1, 256, 256);
  Options o;
  const Dims d = dims_for(c, 1, 256, 256);
  o.max_trace_bytes = trace_bytes(d, sizeof(float), false) / 4;  // below the four (N, H, L, S) stages
  CHECK_THROWS_AS(forward(c, sc.weights, sc.inputs, o), TooLargeError);
  o.stages = {"output"};
  CHECK(forward(c, sc.weights, sc.inputs, o).trace.has("output"));
  o.stages = {"attn_weights"};  // one (N, H, L, S) stage named: 1/4 of the big ones, still too many bytes
  o.max_trace_bytes = trace_bytes(d, sizeof(float), false) / 8;
  CHECK_THROWS_AS(forward(c, sc.weights, sc.inputs, o), TooLargeError);
  o.backend = Backend::reference;  // the reference path fills every stage: the whole trace counts
  o.stages = {"output"};
  CHECK_THROWS_AS(forward(c, sc.weights, sc.inputs, o), TooLargeError);
}

// ForwardControl: a forward that reports its progress and can be cancelled gives the same trace bit
// for bit; its progress ends at the total; a cancel set before or during it throws Cancelled, and the
// workspace then computes the next forward as if nothing happened.
TEST_CASE("a forward with progress and cancel: same values, full progress, Cancelled, workspace intact",
          "[on_demand]") {
  Config c;
  c.embed_dim = 64;
  c.num_heads = 4;
  SeededCase<float> sc = torch_seeded_case<float>(c, 3, 2, 300, 300);
  sc.inputs.attn_mask = causal_mask<float>(300, 300);
  Options o;
  o.threads = 2;
  const ForwardResult<float> plain = forward(c, sc.weights, sc.inputs, o);

  ForwardControl control;
  o.control = &control;
  Workspace<float> ws;
  ForwardResult<float> r;
  forward(c, sc.weights, sc.inputs, o, ws, r);
  REQUIRE(control.total > 5);  // more than one task block
  CHECK(control.done == control.total);
  for (const Stage<float>& s : plain.trace.stages) {
    INFO("stage " << s.name);
    CHECK(mismatch(r.trace[s.name].contiguous(), s.contiguous(), 0, 0) == "");
  }

  control.cancel = true;
  CHECK_THROWS_AS(forward(c, sc.weights, sc.inputs, o, ws, r), Cancelled);
  // Cancelled from another thread while the tasks run: either it lands in time or the forward ends.
  control.cancel = false;
  std::atomic<bool> go{false};
  std::thread canceller([&] {
    while (!go) std::this_thread::yield();
    control.cancel = true;
  });
  bool cancelled = false;
  try {
    go = true;
    forward(c, sc.weights, sc.inputs, o, ws, r);
  } catch (const Cancelled&) {
    cancelled = true;
  }
  canceller.join();
  if (cancelled) CHECK((control.total == 0 || control.done < control.total));  // stopped before its end
  control.cancel = false;
  forward(c, sc.weights, sc.inputs, o, ws, r);
  CHECK(control.done == control.total);
  CHECK(mismatch(r.trace["output"].contiguous(), plain.trace["output"].contiguous(), 0, 0) == "");
  CHECK(mismatch(r.trace["attn_weights"].contiguous(), plain.trace["attn_weights"].contiguous(), 0, 0) == "");
}

namespace {

// A forward keeping no pre-softmax stage (as the app keeps at large sizes) leaves the keys past each
// row's last unblocked one out of its products and softmax; the full trace computes them. Every stage
// the lean forward keeps must equal the full trace's bit for bit, whatever the mask holds.
template <class T>
void check_skipping(const char* what, const Config& c, const Weights<T>& w, const Inputs<T>& in,
                    FullyMasked policy) {
  INFO(what << (sizeof(T) == 4 ? ", float" : ", double"));
  for (int threads : {1, 2}) {  // the in-projections' digits may depend on the thread count
    Options o;
    o.fully_masked = policy;
    o.threads = threads;
    const ForwardResult<T> full = forward(c, w, in, o);
    o.stages = {"attn_weights", "attn_weights_avg", "output", "context", "concat"};
    const ForwardResult<T> lean = forward(c, w, in, o);
    CHECK_FALSE(lean.trace.has("scores_masked"));
    for (const char* name : {"attn_weights", "attn_weights_avg", "output", "context", "concat"}) {
      INFO("stage " << name << ", threads " << threads);
      CHECK(mismatch(lean.trace[name].contiguous(), full.trace[name].contiguous(), 0, 0) == "");
    }
    CHECK(lean.fully_masked_rows == full.fully_masked_rows);
  }
}

template <class T>
void skipping_cases() {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  Config c;
  c.embed_dim = 32;
  c.num_heads = 4;
  const std::int64_t L = 150, S = 150;
  SeededCase<T> sc = torch_seeded_case<T>(c, 9, 2, L, S);
  Inputs<T> in = sc.inputs;
  in.attn_mask = causal_mask<T>(L, S);
  check_skipping("causal, several row blocks", c, sc.weights, in, FullyMasked::nan);

  // Per-head float masks: scattered -inf, whole rows blocked, a NaN where keys are open and a NaN
  // after the last open key, a huge finite value that is not a block.
  Mask<T> m;
  m.dtype = MaskDType::floating;
  m.values = Tensor<T>({2 * 4, L, S}, T(0));
  for (std::size_t x = 0; x < m.values.data.size(); ++x)
    if (x % 5 == 0 || (x / std::size_t(S)) % 3 == 0) m.values.data[x] = neg_inf;
  auto row = [&](std::int64_t plane, std::int64_t i) { return m.values.data.begin() + (plane * L + i) * S; };
  for (int plane : {0, 5}) std::fill(row(plane, 7), row(plane, 8), neg_inf);  // every key blocked
  std::fill(row(1, 20) + 40, row(1, 21), neg_inf);
  *(row(1, 20) + 12) = std::numeric_limits<T>::quiet_NaN();  // NaN among the open keys
  std::fill(row(2, 30) + 10, row(2, 31), neg_inf);
  *(row(2, 30) + 140) = std::numeric_limits<T>::quiet_NaN();  // NaN past the blocked ones
  *(row(3, 40) + 149) = T(-1e30);                             // finite: not a block
  in.attn_mask = m;
  check_skipping("per-head masks, NaN policy", c, sc.weights, in, FullyMasked::nan);
  check_skipping("per-head masks, zero policy", c, sc.weights, in, FullyMasked::zero);

  // An infinite input: no score is known finite, so nothing is left out.
  Inputs<T> inf = in;
  inf.query.data[5] = std::numeric_limits<T>::infinity();
  check_skipping("an infinite query value", c, sc.weights, inf, FullyMasked::zero);

  // Cross-attention with GQA, key padding, bias_kv and a zero key beside a causal mask.
  Config g = c;
  g.num_kv_heads = 2;
  g.add_zero_attn = true;
  SeededCase<T> gc = torch_seeded_case<T>(g, 3, 2, 70, 90);
  Inputs<T> gin = gc.inputs;
  gin.attn_mask = causal_mask<T>(70, 90);
  gin.key_padding_mask = key_padding_from_lengths<T>({90, 33}, 90);
  check_skipping("GQA, key padding, zero key", g, gc.weights, gin, FullyMasked::nan);
}

}  // namespace

TEST_CASE("a forward that keeps no score leaves blocked keys out with the same digits", "[on_demand]") {
  skipping_cases<float>();
  skipping_cases<double>();
}
