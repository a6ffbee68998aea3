// forward_mask_edit and forward_mask_edit_in_place (a mask edit recomputes only the query rows
// whose mask changed) against a full forward of the edited problem, stage by stage and bit for bit, for every
// kind of mask edit: a shared mask, per-head masks, key padding next to a mask, grouped-query attention, rows
// that become (or stop being) fully masked under both policies, NaN inputs, and several blocks and threads.
#include <catch2/catch.hpp>
#include <cmath>

#include "check_identical.hpp"
#include "fixtures.hpp"
#include "masks.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;

namespace {

struct Edit {
  const char* name;
  std::int64_t N, L, S, E, H, G;
  bool per_head;     // an (N·H, L, S) mask, else a shared (L, S) causal one
  bool padding;      // a key_padding_mask beside it, edited instead of the mask
  int blocked_rows;  // rows fully blocked by the edit (first, last, middle query rows)
  bool unblock;      // the base has those rows blocked and the edit opens them again
  bool nan_input;    // a NaN in the query
  FullyMasked policy;
  std::int64_t head_dim = 0;  // Config::explicit_head_dim: heads H·head_dim wide, not E
};

template <class T>
void run_edit(const Edit& e) {
  INFO("case " << e.name);
  Config c;
  c.embed_dim = e.E;
  c.num_heads = e.H;
  c.num_kv_heads = e.G;
  c.explicit_head_dim = e.head_dim;
  SeededCase<T> sc = torch_seeded_case<T>(c, 11, e.N, e.L, e.S);
  if (e.nan_input) sc.inputs.query.data[std::size_t(e.E + 3)] = std::numeric_limits<T>::quiet_NaN();
  Options o;
  o.fully_masked = e.policy;
  Inputs<T> before = sc.inputs;
  if (e.per_head) {
    Mask<T> m;
    m.dtype = MaskDType::floating;
    m.values = Tensor<T>({e.N * e.H, e.L, e.S}, T(0));
    for (std::size_t x = 0; x < m.values.data.size(); x += 7) m.values.data[x] = -INFINITY;
    before.attn_mask = m;
  } else {
    before.attn_mask = causal_mask<T>(e.L, e.S);
  }
  if (e.padding) {
    std::vector<std::int64_t> lengths(std::size_t(e.N), e.S);
    before.key_padding_mask = key_padding_from_lengths<T>(lengths, e.S);
  }
  Inputs<T> after = before;
  // Block (or, for `unblock`, open) whole rows, and toggle one ordinary cell.
  auto block_row = [&](Inputs<T>& in, std::int64_t i) {
    Tensor<T>& v = in.attn_mask->values;
    const std::int64_t planes = e.per_head ? e.N * e.H : 1;
    const std::int64_t p = e.per_head ? planes - 1 : 0;  // per head: the last (n, h) only
    for (std::int64_t j = 0; j < e.S; ++j)
      v.data[std::size_t((p * e.L + i) * e.S + j)] = e.per_head ? T(-INFINITY) : T(1);
  };
  const std::int64_t rows[] = {0, e.L - 1, e.L / 2};
  for (int r = 0; r < e.blocked_rows; ++r) block_row(e.unblock ? before : after, rows[r]);
  if (e.padding) {
    after.key_padding_mask->values.data[std::size_t(e.S - 1)] = T(1);  // batch item 0 loses its last key
  } else {
    Tensor<T>& v = after.attn_mask->values;
    const std::size_t cell = std::size_t((e.L / 3) * e.S + 1);
    v.data[cell] = e.per_head ? (std::isinf(v.data[cell]) ? T(0) : T(-INFINITY)) : T(1) - v.data[cell];
  }

  const ForwardResult<T> want_base = forward(c, sc.weights, before, o);
  const ForwardResult<T> want = forward(c, sc.weights, after, o);
  Workspace<T> ws_base, ws;
  ForwardResult<T> base, r;
  forward(c, sc.weights, before, o, ws_base, base);
  if (e.unblock || e.blocked_rows == 0) CHECK((base.fully_masked_rows > 0) == e.unblock);
  CHECK(forward_mask_edit(c, sc.weights, after, o, base, ws, r));
  check_identical(r, want);
  check_identical(base, want_base);  // shared stages were only read
  // Again into the same workspace (its buffers reused), from the result just made.
  ForwardResult<T> r2;
  CHECK(forward_mask_edit(c, sc.weights, before, o, r, ws, r2));
  check_identical(r2, want_base);
  check_identical(r, want);

  // In place, on a result that nothing else holds: edited, then edited back.
  Workspace<T> ws_own;
  ForwardResult<T> own;
  forward(c, sc.weights, before, o, ws_own, own);
  CHECK(forward_mask_edit_in_place(c, sc.weights, after, o, ws_own, own));
  check_identical(own, want);
  CHECK(forward_mask_edit_in_place(c, sc.weights, before, o, ws_own, own));
  check_identical(own, want_base);
  // Two edits behind, as the app's worker finds it: `own` is at `before`, the newest result `r` at
  // `after`, and a third mask changes another row: r's rows are copied, the new row recomputed.
  Inputs<T> third = after;
  {
    Tensor<T>& v = third.attn_mask->values;
    const std::size_t cell = std::size_t((e.L - 2) * e.S + e.S / 2);
    v.data[cell] = e.per_head ? (std::isinf(v.data[cell]) ? T(0) : T(-INFINITY)) : T(1) - v.data[cell];
  }
  const ForwardResult<T> want_third = forward(c, sc.weights, third, o);
  CHECK(forward_mask_edit_in_place(c, sc.weights, third, o, ws_own, own, &r));
  check_identical(own, want_third);
  check_identical(r, want);  // only read
  // The stages the app keeps at large sizes (the scores left out), and the output alone; a stage
  // find_stage computed before the edit is computed again from the new masks.
  for (const std::vector<std::string>& stages :
       {std::vector<std::string>{"attn_weights", "attn_weights_avg", "output"},
        std::vector<std::string>{"output"}}) {
    Options kept = o;
    kept.stages = stages;
    INFO("stages kept: " << stages.size());
    ForwardResult<T> lean;
    forward(c, sc.weights, before, kept, ws_own, lean);
    REQUIRE(find_stage(lean, "scores_masked") != nullptr);
    CHECK(forward_mask_edit_in_place(c, sc.weights, after, kept, ws_own, lean));
    for (const char* name : {"scores_masked", "attn_weights", "attn_weights_avg", "output", "concat"}) {
      INFO("stage " << name);
      const Stage<T>* got = find_stage(lean, name);
      REQUIRE(got != nullptr);
      CHECK(mismatch(got->contiguous(), want.trace[name].contiguous(), 0, 0) == "");
    }
    CHECK(lean.fully_masked_rows == want.fully_masked_rows);
  }
  // The app's largest sizes: the output alone and a weights overview (3 keys a column: the last one
  // ragged), edited in place, into new buffers, and two edits behind.
  Options ov = o;
  ov.stages = {"output"};
  ov.weights_overview = 3;
  Workspace<T> ws_ov, ws_ov2;
  ForwardResult<T> lean, fresh, newer;
  forward(c, sc.weights, before, ov, ws_ov, lean);
  check_overview(lean, want_base, 3);
  CHECK(forward_mask_edit(c, sc.weights, after, ov, lean, ws_ov2, fresh));
  check_overview(fresh, want, 3);
  check_overview(lean, want_base, 3);  // only read
  CHECK(forward_mask_edit_in_place(c, sc.weights, after, ov, ws_ov, lean));
  check_overview(lean, want, 3);
  CHECK(forward_mask_edit_in_place(c, sc.weights, before, ov, ws_ov, lean));
  check_overview(lean, want_base, 3);
  CHECK(forward_mask_edit_in_place(c, sc.weights, third, ov, ws_ov, lean, &fresh));
  check_overview(lean, want_third, 3);
  check_overview(fresh, want, 3);
  // A weights edit does not apply (the average needs every head's weights): a full forward instead.
  Weights<T> moved = sc.weights;
  moved.out_proj_weight.data[0] += T(1);
  CHECK_FALSE(forward_weights_edit_in_place(c, moved, sc.weights, third, ov, ws_ov, lean));
  check_overview(lean, want_third, 3);
}

const FullyMasked nan_ = FullyMasked::nan, zero = FullyMasked::zero;
// name, N, L, S, E, H, G, per_head, padding, blocked_rows, unblock, nan_input, policy
const Edit kEdits[] = {
    {"shared causal mask, one cell", 1, 16, 16, 64, 4, 0, false, false, 0, false, false, nan_},
    {"shared mask, two items", 2, 9, 11, 16, 2, 0, false, false, 0, false, false, nan_},
    {"per-head masks", 2, 12, 10, 16, 4, 0, true, false, 0, false, false, nan_},
    {"GQA (H=4, G=2)", 2, 12, 12, 16, 4, 2, false, false, 0, false, false, nan_},
    {"GQA with per-head masks", 1, 12, 12, 32, 8, 2, true, false, 0, false, false, nan_},
    {"key padding beside a mask", 2, 10, 10, 16, 2, 0, false, true, 0, false, false, nan_},
    {"rows fully blocked: NaN", 2, 10, 10, 16, 2, 0, false, false, 3, false, false, nan_},
    {"rows fully blocked: zero", 2, 10, 10, 16, 2, 0, false, false, 3, false, false, zero},
    {"rows opened again: NaN", 1, 10, 10, 16, 2, 0, false, false, 2, true, false, nan_},
    {"per-head rows opened again: zero", 1, 10, 10, 16, 2, 0, true, false, 2, true, false, zero},
    {"NaN in the query", 1, 10, 10, 16, 2, 0, false, false, 1, false, true, nan_},
    {"several blocks and threads", 2, 300, 70, 64, 4, 0, false, false, 1, false, false, nan_},
    {"several blocks, per-head, GQA", 1, 300, 300, 64, 4, 2, true, false, 2, true, false, zero},
    {"heads wider than E / H (head_dim 32)", 1, 300, 300, 64, 4, 2, true, false, 2, true, false, zero, 32},
    {"heads narrower than E / H (head_dim 4)", 2, 12, 12, 32, 4, 2, false, false, 1, false, false, nan_, 4},
};

}  // namespace

TEST_CASE("a mask edit recomputes its rows to a full forward's values, float", "[incremental]") {
  for (const Edit& e : kEdits) run_edit<float>(e);
}

TEST_CASE("a mask edit recomputes its rows to a full forward's values, double", "[incremental]") {
  for (const Edit& e : kEdits) run_edit<double>(e);
}

TEST_CASE("a mask edit outside what rows cover runs the full forward", "[incremental]") {
  Config c;
  c.embed_dim = 16;
  c.num_heads = 2;
  const SeededCase<float> sc = torch_seeded_case<float>(c, 5, 2, 8, 8);
  Inputs<float> masked = sc.inputs;
  masked.attn_mask = causal_mask<float>(8, 8);
  Workspace<float> ws_base, ws;
  ForwardResult<float> base, r;
  forward(c, sc.weights, masked, Options{}, ws_base, base);
  // The mask removed; then a base from the reference path.
  CHECK_FALSE(forward_mask_edit(c, sc.weights, sc.inputs, Options{}, base, ws, r));
  check_identical(r, forward(c, sc.weights, sc.inputs, Options{}));
  Options ref;
  ref.backend = Backend::reference;
  ForwardResult<float> ref_base, r2;
  forward(c, sc.weights, masked, ref, ws_base, ref_base);
  CHECK_FALSE(forward_mask_edit(c, sc.weights, masked, ref, ref_base, ws, r2));
  check_identical(r2, forward(c, sc.weights, masked, ref));
}

TEST_CASE("a mask edit in place leaves a result alone while anything else holds its buffers",
          "[incremental]") {
  Config c;
  c.embed_dim = 16;
  c.num_heads = 2;
  const SeededCase<float> sc = torch_seeded_case<float>(c, 5, 1, 8, 8);
  Inputs<float> before = sc.inputs, after = sc.inputs;
  before.attn_mask = causal_mask<float>(8, 8);
  after.attn_mask = before.attn_mask;
  after.attn_mask->values.data[5 * 8 + 2] = 1;
  const ForwardResult<float> want_before = forward(c, sc.weights, before, Options{});
  const ForwardResult<float> want_after = forward(c, sc.weights, after, Options{});
  Workspace<float> ws;
  ForwardResult<float> r;
  forward(c, sc.weights, before, Options{}, ws, r);
  {
    const Stage<float> held = r.trace["attn_weights"];  // a view somewhere keeps one stage
    CHECK_FALSE(forward_mask_edit_in_place(c, sc.weights, after, Options{}, ws, r));
    check_identical(r, want_before);
  }
  {
    const ForwardResult<float> copy = r;  // a copy of the whole result
    CHECK_FALSE(forward_mask_edit_in_place(c, sc.weights, after, Options{}, ws, r));
    check_identical(copy, want_before);
  }
  // Named with another workspace, the references of r's own are not accounted for: refused.
  Workspace<float> other;
  CHECK_FALSE(forward_mask_edit_in_place(c, sc.weights, after, Options{}, other, r));
  check_identical(r, want_before);
  CHECK(forward_mask_edit_in_place(c, sc.weights, after, Options{}, ws, r));
  check_identical(r, want_after);
  // Other sizes, or the mask removed: not a mask edit of r.
  CHECK_FALSE(forward_mask_edit_in_place(c, sc.weights, sc.inputs, Options{}, ws, r));
  check_identical(r, want_after);
}

namespace {

struct WeightEdit {
  const char* name;
  std::int64_t N, L, E, H, G;
  bool bias_kv, blocked_row, lean;
  const char* tensor;      // state_dict name
  std::int64_t index;      // flat index into it
  std::vector<int> heads;  // the heads it moves
  std::int64_t head_dim = 0;  // Config::explicit_head_dim
};

template <class T>
void run_weight_edit(const WeightEdit& e) {
  INFO("case " << e.name);
  Config c;
  c.embed_dim = e.E;
  c.num_heads = e.H;
  c.num_kv_heads = e.G;
  c.explicit_head_dim = e.head_dim;
  SeededCase<T> sc = torch_seeded_case<T>(c, 3, e.N, e.L, e.L);
  if (e.bias_kv) {  // torch's xavier_normal_ draws are not reproduced: values of our own
    c.add_bias_kv = true;
    const std::int64_t kv = c.kv_embed_dim();
    sc.weights.bias_k = Tensor<T>({1, 1, kv});
    sc.weights.bias_v = Tensor<T>({1, 1, kv});
    for (std::int64_t x = 0; x < kv; ++x)
      sc.weights.bias_k.data[std::size_t(x)] = T(0.1) * T(x % 7),
      sc.weights.bias_v.data[std::size_t(x)] = T(0.2) - T(0.05) * T(x % 5);
  }
  sc.inputs.attn_mask = causal_mask<T>(e.L, e.L);
  if (e.blocked_row)  // row 2 blocked at every key: fully masked rows in every head
    for (std::int64_t j = 0; j < e.L; ++j) sc.inputs.attn_mask->values.data[std::size_t(2 * e.L + j)] = 1;
  Options o;
  if (e.lean) o.stages = {"attn_weights", "attn_weights_avg", "output"};
  Weights<T> w = sc.weights;
  Tensor<T>* t = nullptr;
  for (auto [name, tensor] : state_dict(w))
    if (std::string(name) == e.tensor) t = tensor;
  REQUIRE(t != nullptr);
  REQUIRE(!t->empty());
  t->data[std::size_t(e.index)] += T(0.5);
  const ForwardResult<T> want = forward(c, w, sc.inputs, o);
  Workspace<T> ws;
  ForwardResult<T> r;
  forward(c, sc.weights, sc.inputs, o, ws, r);
  std::vector<char> heads;
  REQUIRE(forward_weights_edit_in_place(c, w, sc.weights, sc.inputs, o, ws, r, &heads));
  std::vector<char> expect(std::size_t(e.H), 0);
  for (int h : e.heads) expect[std::size_t(h)] = 1;
  CHECK(heads == expect);
  if (e.lean) {
    for (const char* name : {"scores_masked", "attn_weights", "attn_weights_avg", "context", "output"}) {
      INFO("stage " << name);
      const Stage<T>* got = find_stage(r, name);
      const Stage<T>* full = find_stage(want, name);
      REQUIRE(got != nullptr);
      REQUIRE(full != nullptr);
      CHECK(mismatch(got->contiguous(), full->contiguous(), 0, 0) == "");
    }
    CHECK(r.fully_masked_rows == want.fully_masked_rows);
  } else {
    check_identical(r, want);
  }
  // And back: the edit undone, in the same buffers.
  const ForwardResult<T> want_back = forward(c, sc.weights, sc.inputs, o);
  REQUIRE(forward_weights_edit_in_place(c, sc.weights, w, sc.inputs, o, ws, r));
  if (!e.lean) check_identical(r, want_back);
  CHECK(r.fully_masked_rows == want_back.fully_masked_rows);
}

// name, N, L, E, H, G, bias_kv, blocked_row, lean, tensor, index, heads
const WeightEdit kWeightEdits[] = {
    {"a row of W_q", 2, 9, 16, 4, 0, false, false, false, "in_proj_weight", 5 * 16 + 3, {1}},
    {"a row of W_k", 2, 9, 16, 4, 0, false, false, false, "in_proj_weight", (16 + 9) * 16 + 1, {2}},
    {"a row of W_v, GQA", 1, 12, 16, 4, 2, false, false, false, "in_proj_weight", (16 + 8 + 5) * 16, {2, 3}},
    {"b_q", 2, 9, 16, 4, 0, false, false, false, "in_proj_bias", 14, {3}},
    {"out_proj only", 2, 9, 16, 4, 0, false, false, false, "out_proj.weight", 7, {}},
    {"bias_k", 1, 9, 16, 4, 0, true, false, false, "bias_k", 6, {1}},
    {"fully masked rows", 2, 9, 16, 4, 0, false, true, false, "in_proj_weight", 2 * 16, {0}},
    {"several blocks and threads", 2, 300, 64, 4, 0, false, true, false, "in_proj_weight", 40 * 64 + 7, {2}},
    {"the stages the app keeps", 1, 300, 64, 4, 0, false, false, true, "in_proj_weight", (64 + 3) * 64, {0}},
    // head_dim 8 with E 16, H 4, G 2: q rows 0-31 (head r / 8), k rows 32-47, v rows 48-63
    {"a row of W_q, head_dim", 2, 9, 16, 4, 2, false, false, false, "in_proj_weight", 20 * 16 + 3, {2}, 8},
    {"a row of W_k, head_dim", 2, 9, 16, 4, 2, false, false, false, "in_proj_weight", 41 * 16 + 1, {2, 3}, 8},
    {"out_proj, head_dim", 2, 9, 16, 4, 2, false, false, false, "out_proj.weight", 7 * 32 + 30, {}, 8},
    // head_dim 32 with E 64, H 4, G 2: v rows 192-255, row 232 is key/value head 1
    {"W_v, blocks", 1, 300, 64, 4, 2, false, true, false, "in_proj_weight", 232 * 64 + 5, {2, 3}, 32},
};

}  // namespace

TEST_CASE("a weights edit recomputes only the heads it moves, to a full forward's values", "[incremental]") {
  for (const WeightEdit& e : kWeightEdits) {
    run_weight_edit<float>(e);
    run_weight_edit<double>(e);
  }
}

TEST_CASE("a weights edit moving every head, or on a held result, is left to a full forward",
          "[incremental]") {
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  const SeededCase<float> sc = torch_seeded_case<float>(c, 5, 1, 6, 6);
  Workspace<float> ws;
  ForwardResult<float> r;
  forward(c, sc.weights, sc.inputs, Options{}, ws, r);
  const ForwardResult<float> want = forward(c, sc.weights, sc.inputs, Options{});
  Weights<float> both = sc.weights;
  both.in_proj_weight.data[0] += 1;      // head 0
  both.in_proj_weight.data[5 * 8] += 1;  // head 1
  CHECK_FALSE(forward_weights_edit_in_place(c, both, sc.weights, sc.inputs, Options{}, ws, r));
  check_identical(r, want);
  Weights<float> one = sc.weights;
  one.in_proj_weight.data[0] += 1;
  {
    const Stage<float> held = r.trace["context"];
    CHECK_FALSE(forward_weights_edit_in_place(c, one, sc.weights, sc.inputs, Options{}, ws, r));
    check_identical(r, want);
  }
  CHECK(forward_weights_edit_in_place(c, one, sc.weights, sc.inputs, Options{}, ws, r));
  check_identical(r, forward(c, one, sc.inputs, Options{}));
  // Masks other than the result's: not a weights edit of it.
  Inputs<float> masked = sc.inputs;
  masked.attn_mask = causal_mask<float>(6, 6);
  ForwardResult<float> m;
  forward(c, sc.weights, masked, Options{}, ws, m);
  const ForwardResult<float> want_m = forward(c, sc.weights, masked, Options{});
  masked.attn_mask->values.data[3 * 6 + 1] = 1;
  CHECK_FALSE(forward_weights_edit_in_place(c, one, sc.weights, masked, Options{}, ws, m));
  check_identical(m, want_m);
}

namespace {

struct InputsEdit {
  const char* name;
  std::int64_t N, L, S, E, H, G, kdim, vdim;  // kdim, vdim 0: E (self-attention's one x)
  bool bias_kv, zero_attn;
  int threads;
  std::int64_t head_dim = 0;  // Config::explicit_head_dim
};

// forward_inputs_edit from a base result, after changing the given (N·L) query rows, (N·S) key
// rows and value rows (each a row of the batch-first input), against a full forward.
template <class T>
void check_inputs_edit(const InputsEdit& e, const std::vector<std::int64_t>& rows, bool keys_only = false) {
  INFO("case " << e.name << ", threads " << e.threads << ", rows edited: " << rows.size() << " from "
               << (rows.empty() ? -1 : rows.front()));
  Config c;
  c.embed_dim = e.E;
  c.num_heads = e.H;
  c.num_kv_heads = e.G;
  c.kdim = e.kdim;
  c.vdim = e.vdim;
  c.bias = true;
  c.explicit_head_dim = e.head_dim;
  const bool self = e.kdim == 0 && e.S == e.L;
  SeededCase<T> sc = torch_seeded_case<T>(c, 5, e.N, e.L, e.S);
  c.add_bias_kv = e.bias_kv;
  c.add_zero_attn = e.zero_attn;
  if (e.bias_kv) {  // torch draws them with xavier_normal_: any values do here
    const std::int64_t kv = (e.G ? e.G : e.H) * (e.E / e.H);
    sc.weights.bias_k = Tensor<T>({1, 1, kv}, T(0.125));
    sc.weights.bias_v = Tensor<T>({1, 1, kv}, T(-0.25));
  }
  if (self) sc.inputs.key = sc.inputs.value = sc.inputs.query;
  Options o;
  o.backend = Backend::eigen;
  o.threads = e.threads;
  o.stages = {"output"};
  Inputs<T> before = sc.inputs;
  before.attn_mask = causal_mask<T>(e.L, e.S);
  const ForwardResult<T> base = forward(c, sc.weights, before, o);
  Inputs<T> after = before;
  for (std::int64_t r : rows) {
    if (!keys_only) after.query.data[std::size_t(r * e.E + r % e.E)] += T(0.5);
    const std::int64_t kr = r % (e.N * e.S);
    if (!self) {
      after.key.data[std::size_t(kr * after.key.size(-1))] -= T(0.25);
      if (!keys_only) after.value.data[std::size_t(kr * after.value.size(-1) + 1)] += T(0.75);
    }
  }
  if (self) after.key = after.value = after.query;
  // The stages kept may differ from base's: every one this time.
  o.stages.clear();
  const ForwardResult<T> want = forward(c, sc.weights, after, o);
  Workspace<T> ws;
  ForwardResult<T> got;
  CHECK(forward_inputs_edit(c, sc.weights, sc.weights, after, o, base, ws, got));
  check_identical(got, want);
}

const InputsEdit kInputsEdits[] = {
    {"self-attention", 2, 150, 150, 64, 4, 0, 0, 0, false, false, 0},
    {"self-attention, one thread", 2, 150, 150, 64, 4, 0, 0, 0, false, false, 1},
    {"self-attention, three threads", 1, 203, 203, 48, 4, 0, 0, 0, false, false, 3},
    {"grouped keys 64 wide", 1, 130, 130, 256, 4, 1, 0, 0, false, false, 0},
    {"cross-attention, kdim and vdim", 2, 37, 70, 32, 4, 0, 40, 24, false, false, 0},
    {"bias_kv and zero_attn", 2, 61, 61, 32, 2, 0, 0, 0, true, true, 2},
    {"heads wider than E / H (head_dim 24)", 2, 70, 70, 32, 4, 2, 0, 0, false, false, 2, 24},
};

}  // namespace

TEST_CASE("an inputs edit projects only the rows it changed, to a full forward's values", "[incremental]") {
  for (const InputsEdit& e : kInputsEdits) {
    const std::int64_t rows = e.N * e.L;
    // Rows at each end, on each side of the threads' parts and batch items, in and after the last
    // whole group of 4 of a part, several at once, and none (the same inputs).
    for (std::int64_t r : {std::int64_t(0), std::int64_t(1), std::int64_t(3), std::int64_t(4), rows / 2 - 1,
                           rows / 2, rows / 2 + 1, rows / 3, rows / 3 + 1, e.L - 1, e.L, rows - 5, rows - 4,
                           rows - 3, rows - 2, rows - 1})
      check_inputs_edit<float>(e, {std::clamp<std::int64_t>(r, 0, rows - 1)});
    check_inputs_edit<float>(e, {2, 9, 10, rows / 2, rows - 1});
    check_inputs_edit<float>(e, {});
    if (e.kdim) check_inputs_edit<float>(e, {5, rows - 1}, true);
    check_inputs_edit<double>(e, {3, rows - 2});
  }
}

TEST_CASE("a head-count change keeps q, k and v; other projections run the full forward", "[incremental]") {
  Config c;
  c.embed_dim = 64;
  c.num_heads = 4;
  c.bias = true;
  SeededCase<float> sc = torch_seeded_case<float>(c, 5, 2, 90, 90);
  sc.inputs.key = sc.inputs.value = sc.inputs.query;
  sc.inputs.attn_mask = causal_mask<float>(90, 90);
  Options o;
  o.backend = Backend::eigen;
  const ForwardResult<float> base = forward(c, sc.weights, sc.inputs, o);
  for (std::int64_t H : {8, 2, 16}) {
    Config h = c;
    h.num_heads = H;
    Workspace<float> ws;
    ForwardResult<float> got;
    CHECK(forward_inputs_edit(h, sc.weights, sc.weights, sc.inputs, o, base, ws, got));
    check_identical(got, forward(h, sc.weights, sc.inputs, o));
  }
  // Other in-projection weights, another backend, grouped heads that change G·d_k: a full forward.
  Weights<float> other = sc.weights;
  other.in_proj_weight.data[5] += 1.0f;
  Workspace<float> ws;
  ForwardResult<float> got;
  CHECK_FALSE(forward_inputs_edit(c, other, sc.weights, sc.inputs, o, base, ws, got));
  check_identical(got, forward(c, other, sc.inputs, o));
  Options reference = o;
  reference.backend = Backend::reference;
  CHECK_FALSE(forward_inputs_edit(c, sc.weights, sc.weights, sc.inputs, reference, base, ws, got));
  Config grouped = c;
  grouped.num_kv_heads = 2;
  SeededCase<float> gc = torch_seeded_case<float>(grouped, 5, 2, 90, 90);
  CHECK_FALSE(forward_inputs_edit(grouped, gc.weights, sc.weights, sc.inputs, o, base, ws, got));
  check_identical(got, forward(grouped, gc.weights, sc.inputs, o));
}
