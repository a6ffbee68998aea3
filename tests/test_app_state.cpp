// App state without any UI: undo/redo, coalesced drags, the background worker (newest edit wins,
// the last result stays while computing), and the debounced atomic autosave.
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "app_state.hpp"
#include "frame_stats.hpp"
#include "state_edit.hpp"
#include "torch_rng.hpp"
#include "ui_harness.hpp"

using namespace mha::app;
using namespace mha::studio;
using mha::test::edit;

namespace {
void wait_idle(AppState& s) {
  for (int i = 0; i < 4000 && s.computer.busy(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  s.tick(s.now);
}

// N = 2, L = S = `L`, E = 64, H = 4 with a causal mask; `edited`: its query made an edited tensor
// (value edits change it).
Scenario causal_start(std::int64_t L, bool edited) {
  Scenario start;
  start.batch = 2;
  start.tgt_len = L;
  start.embed_dim = 64;
  start.num_heads = 4;
  start.mask.preset = MaskPreset::causal;
  apply_mask_preset(start);
  if (edited) start.query = build_forward(start).inputs.query;
  return start;
}
}  // namespace

TEST_CASE("undo and redo restore whole scenarios", "[state]") {
  AppState s;
  s.recompute();
  s.now = 1;
  s.apply(set_control("seed", "7"));
  s.now = 5;
  s.apply(set_control("num_heads", "4"));
  CHECK(s.result.forward->dims.H == 4);
  s.undo();
  CHECK(s.scenario().num_heads == 2);
  CHECK(s.scenario().seed == 7);
  CHECK(s.result.forward->dims.H == 2);
  s.undo();
  CHECK(s.scenario().seed == 42);
  s.redo();
  s.redo();
  CHECK(s.scenario().num_heads == 4);
  CHECK_FALSE(s.history.can_redo());
}

TEST_CASE("undo keeps the newest steps within its bytes, and always the last one", "[state]") {
  // Each snapshot holds a 1 MiB mask (a 512 × 512 one of additive values, kept as floats); 3.5 MiB
  // of them fit.
  History h(200, std::size_t(3.5 * 1048576));
  Scenario s;
  s.mask.cells.assign(512 * 512, 0.5f);
  REQUIRE(History::bytes(s) == 1048576);
  for (int k = 0; k < 10; ++k) {
    s.seed = std::uint64_t(k);
    h.push(std::make_shared<Snapshot>(Snapshot::of(s)), "edit " + std::to_string(k));
  }
  CHECK(h.undo_steps() == 3);
  Scenario now = s;
  now.seed = 100;
  for (int k = 9; k >= 7; --k) {  // the newest three, newest first
    CHECK(h.undo(now) == "edit " + std::to_string(k));
    CHECK(now.seed == std::uint64_t(k));
  }
  CHECK_FALSE(h.can_undo());
  // One snapshot over the bytes on its own: still kept, so the last edit can always be undone.
  History tiny(200, 1024);
  tiny.push(std::make_shared<Snapshot>(Snapshot::of(s)), "big");
  CHECK(tiny.undo_steps() == 1);
  tiny.push(std::make_shared<Snapshot>(Snapshot::of(s)), "bigger");
  CHECK(tiny.undo_steps() == 1);
  CHECK(tiny.undo(now) == "bigger");
}

TEST_CASE("undo keeps a mask of 0 and -inf cells as bits and restores it bit for bit", "[state]") {
  Scenario s;
  s.mask.cells.assign(512 * 512, 0.0f);
  for (std::size_t i = 0; i < s.mask.cells.size(); i += 3) s.mask.cells[i] = mha::kMaskBlocked;
  s.mask.cells_shape = {512, 512};
  const Scenario before = s;
  History h(200, std::size_t(3.5 * 1048576));
  // The step keeps one bit a cell, packed from the scenario, which stays as it was.
  h.push(std::make_shared<Snapshot>(Snapshot::of(s)), "paint");
  CHECK(h.bytes() == 512 * 512 / 8);
  REQUIRE(s.mask.cells.size() == before.mask.cells.size());
  CHECK(std::memcmp(s.mask.cells.data(), before.mask.cells.data(), before.mask.cells.size() * 4) == 0);
  // Ten such steps fit where three float masks did.
  for (int k = 0; k < 9; ++k)
    h.push(std::make_shared<Snapshot>(Snapshot::of(s)), "paint " + std::to_string(k));
  CHECK(h.undo_steps() == 10);
  Scenario now;
  now.mask.cells.assign(7, 0.25f);  // its storage is reused for the unpacked cells
  for (int k = 0; k < 10; ++k) h.undo(now);
  REQUIRE(now.mask.cells.size() == before.mask.cells.size());
  CHECK(std::memcmp(now.mask.cells.data(), before.mask.cells.data(), before.mask.cells.size() * 4) == 0);
  CHECK(now.mask.cells_shape == before.mask.cells_shape);
  // Redo restores what undo left, as bits too; a -0 or a NaN cell keeps the mask as floats.
  h.redo(now);
  CHECK(std::memcmp(now.mask.cells.data(), before.mask.cells.data(), before.mask.cells.size() * 4) == 0);
  for (float odd : {-0.0f, std::nanf(""), 1.0f}) {
    Scenario t = before;
    t.mask.cells[5] = odd;
    History one;
    one.push(std::make_shared<Snapshot>(Snapshot::of(t)), "odd");
    CHECK(one.bytes() == 512 * 512 * sizeof(float));
    Scenario back;
    one.undo(back);
    CHECK(std::memcmp(back.mask.cells.data(), t.mask.cells.data(), t.mask.cells.size() * 4) == 0);
  }
}

namespace {
// Whether two scenarios hold the same edit state: every field saved, the mask cells and edited
// tensors bit for bit.
void check_same_state(const Scenario& a, const Scenario& b, const std::string& when) {
  INFO(when);
  CHECK(to_json(a) == to_json(b));
  REQUIRE(a.mask.cells.size() == b.mask.cells.size());
  CHECK(std::memcmp(a.mask.cells.data(), b.mask.cells.data(), a.mask.cells.size() * sizeof(float)) == 0);
  for (auto [x, y] : {std::pair{&a.query, &b.query}, {&a.key, &b.key}, {&a.value, &b.value}}) {
    REQUIRE(x->has_value() == y->has_value());
    if (*x) CHECK((*x)->identical(**y));
  }
  REQUIRE(a.weights.has_value() == b.weights.has_value());
  if (a.weights) {
    const auto wa = mha::state_dict(const_cast<mha::Weights<float>&>(*a.weights));
    const auto wb = mha::state_dict(const_cast<mha::Weights<float>&>(*b.weights));
    REQUIRE(wa.size() == wb.size());
    for (std::size_t i = 0; i < wa.size(); ++i) CHECK(wa[i].second->identical(*wb[i].second));
  }
}
}  // namespace

TEST_CASE("undo steps below the newest keep only the rows they change, and restore every state", "[state]") {
  // L = S = 128, E = 64: a 128 × 128 mask (kept as bits) and a (2, 128, 64) query of 64 KiB.
  AppState s;
  s.start(causal_start(128, true));
  s.recompute();
  std::vector<Scenario> states{s.scenario()};  // the state after each edit
  auto step = [&](const mha::studio::Action& a) {
    s.now += 1;  // no coalescing with the edit before
    REQUIRE(s.apply(a));
    wait_idle(s);
    states.push_back(s.scenario());
  };
  // Value edits (one row each), then a painted gesture of many cells in rows far apart (one step:
  // the step below it is kept only once the gesture is over), then a weights edit and a preset.
  for (int k = 0; k < 12; ++k) step(set_tensor_value("query", 64 * (17 * k % 256) + k, float(k) - 3.5f));
  const std::uint64_t gesture = new_gesture();
  for (int k = 0; k < 6; ++k) {
    s.now += 0.01;
    REQUIRE(s.apply(paint_mask_cells({{20 * k, 100 - k}, {20 * k + 1, 3}}, k % 2 == 0, gesture)));
  }
  wait_idle(s);
  states.push_back(s.scenario());
  step(set_tensor_value("out_proj.weight", 5, 0.25f));
  step(set_tensor_value("query", 3, 1.0f));
  step(set_mask_preset("sliding_window"));
  step(set_tensor_value("query", 64 * 200, -2.0f));
  // Thirteen one-row steps, a gesture and the rest hold far less than one query each.
  const std::size_t query_bytes = 2 * 128 * 64 * sizeof(float);
  CHECK(s.history.undo_steps() == states.size() - 1);
  CHECK(s.history.bytes() < 3 * query_bytes);
  for (std::size_t k = states.size() - 1; k-- > 0;) {
    s.undo();
    check_same_state(s.scenario(), states[k], "undo to state " + std::to_string(k));
  }
  CHECK_FALSE(s.history.can_undo());
  for (std::size_t k = 1; k < states.size(); ++k) {
    s.redo();
    check_same_state(s.scenario(), states[k], "redo to state " + std::to_string(k));
  }
  // Half way back, then a new edit: the redo steps go, and undo still walks back to the start.
  for (int k = 0; k < 5; ++k) s.undo();
  step(set_tensor_value("query", 9, 4.0f));
  CHECK_FALSE(s.history.can_redo());
  s.undo();
  check_same_state(s.scenario(), states[states.size() - 7], "undo of the new edit");
  while (s.history.can_undo()) s.undo();
  check_same_state(s.scenario(), states[0], "back at the start");
}

TEST_CASE("a drag on one control is one undo step", "[state]") {
  AppState s;
  for (int i = 0; i < 10; ++i) {
    s.now = 1 + 0.05 * i;
    s.apply(set_control("seed", std::to_string(100 + i)));
  }
  s.undo();
  CHECK(s.scenario().seed == 42);
  CHECK_FALSE(s.history.can_undo());
}

TEST_CASE("large sizes compute on the worker; the newest edit wins", "[state]") {
  AppState s;
  s.recompute();
  REQUIRE(s.result.valid());
  const auto small = s.result.forward;
  auto sizes = [](std::int64_t L, std::int64_t E, std::int64_t H) {
    return [=](Scenario& x) {
      x.batch = 1;
      x.tgt_len = L;
      x.embed_dim = E;
      x.num_heads = H;
    };
  };
  Scenario large = s.scenario();
  sizes(384, 128, 8)(large);
  REQUIRE(forward_work(large) > kSyncWorkLimit);
  edit(s, "L", sizes(384, 128, 8));
  CHECK(s.result.forward == small);  // the old result stays on screen meanwhile
  s.now = 10;                        // a small edit lands before the large one finishes
  edit(s, "L", sizes(5, 8, 2));
  wait_idle(s);
  CHECK(s.result.forward->dims.L == 5);
  CHECK_FALSE(s.stale);
}

TEST_CASE("an edit to other sizes cancels the running forward; the same sizes let it finish", "[state]") {
  AppState s;
  s.recompute();
  auto sizes = [](std::int64_t L, std::int64_t H) {
    return [=](Scenario& x) {
      x.batch = 1;
      x.tgt_len = L;
      x.embed_dim = 256;
      x.num_heads = H;
    };
  };
  auto wait_running = [&] {  // until the worker has reported progress on its forward
    for (int i = 0; i < 4000 && s.computer.progress() <= 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return s.computer.progress() > 0;
  };
  s.now = 1;
  edit(s, "L", sizes(1536, 8));
  REQUIRE(wait_running());
  CHECK(s.computer.progress() < 1);
  s.now = 2;
  edit(s, "L", sizes(1024, 8));  // other sizes: the 1536 forward stops at its next block
  wait_idle(s);
  CHECK(s.computer.cancelled() == 1);
  REQUIRE(s.result.valid());
  CHECK(s.result.forward->dims.L == 1024);
  CHECK_FALSE(s.stale);
  // An edit at the same sizes (a seed) does not stop the running forward: both land in turn.
  s.now = 3;
  edit(s, "seed", [](Scenario& x) { x.seed = 5; });
  REQUIRE(wait_running());
  s.now = 4;
  edit(s, "seed", [](Scenario& x) { x.seed = 6; });
  wait_idle(s);
  CHECK(s.computer.cancelled() == 1);
  CHECK(s.scenario().seed == 6);
  CHECK(s.result.forward->dims.L == 1024);
}

TEST_CASE("autosave waits for a quiet second, then writes atomically", "[state]") {
  const auto dir = std::filesystem::temp_directory_path() / "mha_autosave_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "autosave.json";
  std::filesystem::remove(path);
  AppState s;
  s.autosave_path = path.string();
  s.now = 1;
  s.apply(set_control("seed", "3"));
  s.tick(1.5);
  CHECK_FALSE(std::filesystem::exists(path));
  s.tick(2.1);
  REQUIRE(std::filesystem::exists(path));
  CHECK(load_scenario(path.string()).seed == 3);
  for (const auto& e : std::filesystem::directory_iterator(dir)) CHECK(e.path().extension() != ".tmp");
  std::filesystem::remove_all(dir);
}

namespace {

// Every stage of `got` holds the bits `want`'s does, NaN included.
void check_same_trace(const mha::ForwardResult<float>& got, const mha::ForwardResult<float>& want) {
  REQUIRE(got.trace.stages.size() == want.trace.stages.size());
  for (std::size_t i = 0; i < got.trace.stages.size(); ++i) {
    INFO("stage " << got.trace.stages[i].name);
    const mha::Tensor<float> x = got.trace.stages[i].contiguous(), y = want.trace.stages[i].contiguous();
    CHECK(x.shape == y.shape);
    CHECK(std::memcmp(x.data.data(), y.data.data(), x.data.size() * sizeof(float)) == 0);
  }
  CHECK(got.fully_masked_rows == want.fully_masked_rows);
}

}  // namespace

TEST_CASE("a Built reused for other scenarios computes what one built afresh does", "[state]") {
  // One Built takes scenario after scenario, as the worker's two do: masks in each convention and
  // scope, additive values, key padding only, no mask, other sizes, edited tensors.
  std::vector<Scenario> list;
  Scenario s;
  s.batch = 2;
  s.tgt_len = 6;
  s.embed_dim = 8;
  s.num_heads = 2;
  s.mask.preset = MaskPreset::causal;
  apply_mask_preset(s);
  list.push_back(s);
  s.mask.convention = MaskConvention::keep;
  list.push_back(s);
  s.mask.convention = MaskConvention::additive;
  s.mask.cells[3] = 0.5f;  // a value only a float mask holds
  list.push_back(s);
  s.mask.convention = MaskConvention::torch_bool;
  list.push_back(s);  // the value makes it a float mask in any convention
  s.mask.scope = MaskScope::per_head;
  s.mask.preset = MaskPreset::sliding_window;
  apply_mask_preset(s);
  list.push_back(s);
  s.mask.preset = MaskPreset::padding;
  apply_mask_preset(s);
  list.push_back(s);
  s.mask.preset = MaskPreset::none;
  apply_mask_preset(s);
  list.push_back(s);
  s.tgt_len = 9;
  s.num_heads = 4;
  s.mask.preset = MaskPreset::causal;
  apply_mask_preset(s);
  list.push_back(s);
  s.query = build_forward(s).inputs.query;
  s.query->data[4] = 2.5f;
  list.push_back(s);
  list.push_back(list[0]);
  Built reused;
  for (std::size_t k = 0; k < list.size(); ++k) {
    INFO("scenario " << k);
    build_forward_into(list[k], reused);
    const Built fresh = build_forward(list[k]);
    CHECK(reused.inputs.attn_mask.has_value() == fresh.inputs.attn_mask.has_value());
    if (reused.inputs.attn_mask && fresh.inputs.attn_mask) {
      CHECK(reused.inputs.attn_mask->dtype == fresh.inputs.attn_mask->dtype);
      CHECK(reused.inputs.attn_mask->values.shape == fresh.inputs.attn_mask->values.shape);
      CHECK(reused.inputs.attn_mask->values.data == fresh.inputs.attn_mask->values.data);
    }
    check_same_trace(mha::forward(reused.config, reused.weights, reused.inputs, reused.options),
                     mha::forward(fresh.config, fresh.weights, fresh.inputs, fresh.options));
  }
}

TEST_CASE("the seeded draws kept across a head-count change are those drawn afresh", "[state]") {
  // build_forward keeps its torch draws per thread and reuses them when the shapes drawn are the
  // same: a head-count change at plain MHA keeps them, a num_kv_heads change (GQA) draws again.
  Scenario s;
  s.tgt_len = 12;
  s.embed_dim = 16;
  s.seed = 5;
  auto fresh = [](const Scenario& x) {  // on a new thread: nothing kept
    Built b;
    std::thread([&] { b = build_forward(x); }).join();
    return b;
  };
  auto same_draws = [](const Built& a, const Built& b) {
    auto bits = [](const mha::Tensor<float>& x, const mha::Tensor<float>& y) {
      return x.shape == y.shape &&
             (x.data.empty() ||  // memcmp of an empty vector's null data() is UB
              std::memcmp(x.data.data(), y.data.data(), x.data.size() * sizeof(float)) == 0);
    };
    return bits(a.inputs.query, b.inputs.query) && bits(a.weights.in_proj_weight, b.weights.in_proj_weight) &&
           bits(a.weights.out_proj_weight, b.weights.out_proj_weight) &&
           bits(a.weights.in_proj_bias, b.weights.in_proj_bias);
  };
  for (const auto& [h0, g0, h1, g1] :
       std::vector<std::array<int, 4>>{{4, 0, 2, 0}, {2, 0, 8, 0}, {8, 2, 8, 4}, {8, 4, 4, 2}}) {
    INFO("num_heads " << h0 << " -> " << h1 << ", num_kv_heads " << g0 << " -> " << g1);
    s.num_heads = h0, s.num_kv_heads = g0;
    const Built before = build_forward(s);
    CHECK(same_draws(before, fresh(s)));
    s.num_heads = h1, s.num_kv_heads = g1;
    const Built after = build_forward(s);
    CHECK(same_draws(after, fresh(s)));
  }
  // And the GQA change did draw other shapes: k/v rows of in_proj_weight follow num_kv_heads·d_k.
  s.num_heads = 8, s.num_kv_heads = 2;
  const mha::Shape two = build_forward(s).weights.in_proj_weight.shape;
  s.num_kv_heads = 4;
  CHECK(build_forward(s).weights.in_proj_weight.shape != two);
}

TEST_CASE("edited weights and inputs drive the forward; undo restores the seed's", "[state]") {
  AppState s;
  s.recompute();
  const float before = s.result.forward->trace["output"].at({0, 0, 0});
  s.now = 1;
  edit(s, "edit weights", [](Scenario& x) { x.weights = build_forward(x).weights; });
  CHECK(s.result.forward->trace["output"].at({0, 0, 0}) == before);  // same values: same result
  s.now = 3;
  const float w0 = s.scenario().weights->out_proj_weight.data[0];
  s.apply(set_tensor_value("out_proj.weight", 0, w0 + 0.5f));  // what a drag on out_proj.weight[0, 0] does
  CHECK(s.result.forward->trace["output"].at({0, 0, 0}) != before);
  s.now = 5;
  s.apply(set_tensor_value("query", 0, 3.0f));
  CHECK(s.result.forward->trace["q"].at({0, 0, 0}) != 0);
  s.undo();
  s.undo();
  s.undo();
  CHECK_FALSE(s.scenario().weights);
  CHECK(s.result.forward->trace["output"].at({0, 0, 0}) == before);
}

TEST_CASE("the course notebook on screen meets the notebook's tolerance against torch", "[state]") {
  AppState s;
  s.start(load_scenario(std::string(MHA_ASSETS_DIR) + "/presets/course_notebook.json"));
  s.recompute();
  REQUIRE(s.result.valid());
  CHECK(s.result.forward->backend == mha::Backend::reference);
  // torch 1.13's output for this case (tests/fixtures/notebook/expected/module_output.npy), 8 values.
  const float torch_row0[8] = {0.07169950753450394f, 0.053410567343235016f, 0.33034420013427734f,
                               0.15891890227794647f, 0.06592436879873276f,  0.2343246191740036f,
                               0.12263026833534241f, 0.21004751324653625f};
  for (int e = 0; e < 8; ++e)
    CHECK(std::abs(s.result.forward->trace["output"].at({0, 0, e}) - torch_row0[e]) <=
          1e-8 + 1e-5 * std::abs(torch_row0[e]));
}

namespace {

// N = 2, L = 200, E = 64, H = 4 with a causal mask: computed on the worker. Waits for the first
// result and for the worker to pre-size its other workspaces.
void start_on_worker(AppState& s) {
  const Scenario start = causal_start(200, false);
  REQUIRE(forward_work(start) > kSyncWorkLimit);
  s.start(start);
  s.recompute();
  wait_idle(s);
  REQUIRE(s.result.valid());
  for (int i = 0; i < 4000 && !s.computer.settled(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK(s.computer.settled());
}

// The result on screen equals a full forward of the scenario, every stage bit for bit.
void check_full_forward(const AppState& s, const char* what) {
  INFO(what);
  const Built b = build_forward(s.scenario());
  check_same_trace(*s.result.forward, mha::forward(b.config, b.weights, b.inputs, b.options));
}

}  // namespace

TEST_CASE("value edits and head-count changes on the worker keep q, k and v, equal to a full forward",
          "[state]") {
  AppState s;
  start_on_worker(s);
  for (int k = 0; k < 4; ++k) {  // a token's value, then the head count, in turn
    s.now += 1;
    if (k % 2 == 0)
      s.apply(set_tensor_value("query", 64 * (97 * k + 5) + k, 0.25f * float(k + 1)));
    else
      s.apply(set_control("num_heads", s.scenario().num_heads == 4 ? "8" : "4"));
    wait_idle(s);
    CHECK(s.result.projections_reused);
    CHECK_FALSE(s.result.mask_rows_only);
    check_full_forward(s, k % 2 == 0 ? "a value edit" : "a head-count change");
  }
  // Other weights: the projections are made again.
  s.now += 1;
  s.apply(set_tensor_value("in_proj_weight", 3, 0.5f));
  wait_idle(s);
  CHECK_FALSE(s.result.projections_reused);
  check_full_forward(s, "a weights edit");
}

TEST_CASE("mask edits on the worker redo only their rows, equal to a full forward", "[state]") {
  AppState s;
  start_on_worker(s);
  auto check_full = [&](const char* what) { check_full_forward(s, what); };
  check_full("first result");
  // Cells in other rows each time. From the third edit on, the worker edits its own copy of the
  // result three edits old in place (the app holds only the result on screen and the one before):
  // the rows of the two edits in between are copied from the newest, the edited row recomputed.
  int in_place = 0;
  for (int k = 0; k < 6; ++k) {
    const auto before = s.result.forward;
    const int row = (50 + 40 * k) % 200;
    const bool blocked = std::isinf(s.scenario().mask.cells[std::size_t(row * 200 + 10 + k)]);
    s.now += 1;
    s.apply(paint_mask_cells({{row, 10 + k}}, !blocked));
    wait_idle(s);
    REQUIRE(s.result.forward != before);
    CHECK(s.result.mask_rows_only);
    if (k >= 2) CHECK(s.result.in_place);
    // The result names the rows that may differ from the one before it: the edited row, and every
    // other row holds the same bits in every head of both batch items.
    REQUIRE(s.result.rows_changed);
    CHECK(s.result.changed_since.lock() == before);
    CHECK(s.result.changed_since_generation != 0);
    const std::vector<char>& rows = *s.result.rows_changed;
    REQUIRE(rows.size() == 2 * 200);
    CHECK(rows[std::size_t(row)] == 1);
    CHECK(rows[std::size_t(200 + row)] == 1);
    const float* now = s.result.forward->trace["attn_weights"].storage->data();
    const float* was = before->trace["attn_weights"].storage->data();
    int differ_unflagged = 0;
    for (int n = 0; n < 2; ++n)
      for (int h = 0; h < 4; ++h)
        for (int i = 0; i < 200; ++i) {
          const std::size_t at = std::size_t(((n * 4 + h) * 200 + i) * 200);
          if (!rows[std::size_t(n * 200 + i)] && std::memcmp(now + at, was + at, 200 * sizeof(float)) != 0)
            ++differ_unflagged;
        }
    CHECK(differ_unflagged == 0);
    in_place += s.result.in_place;
    check_full("mask toggle");
  }
  CHECK(in_place >= 4);
  // A whole row blocked: NaN rows under torch's policy, counted.
  Cells row;
  for (int j = 0; j < 200; ++j) row.push_back({120, j});
  s.now += 1;
  s.apply(paint_mask_cells(row, true));
  wait_idle(s);
  CHECK(s.result.mask_rows_only);
  CHECK(s.result.forward->fully_masked_rows == 2 * 4);
  check_full("a fully masked row");
  // A value edit is a full forward again.
  s.now += 1;
  s.apply(set_tensor_value("query", 7, build_forward(s.scenario()).inputs.query.data[7] + 0.5f));
  wait_idle(s);
  CHECK_FALSE(s.result.mask_rows_only);
  check_full("value edit");
}

TEST_CASE("a drag's forwards reuse the worker's buffers while Compare keeps the result before it",
          "[state]") {
  AppState s;
  start_on_worker(s);
  const float x0 = build_forward(s.scenario()).inputs.query.data[3];
  // One gesture (the same control within a moment): one undo step, and `previous` (Compare's
  // before) stays the result from before the drag while the drag's results come and go. Its slot
  // is skipped: no forward of the drag allocates.
  const std::int64_t allocations = s.computer.allocations();
  for (int k = 0; k < 9; ++k) {
    REQUIRE(s.apply(set_tensor_value("query", 3, x0 + 0.01f * float(k + 1))));
    wait_idle(s);
    for (int i = 0; i < 4000 && !s.computer.settled(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    check_full_forward(s, "drag step");
  }
  CHECK(s.history.undo_steps() == 1);
  CHECK(s.computer.allocations() == allocations);
}

TEST_CASE("a frame waits for a forward that lands within its budget, and only then", "[state]") {
  AppState s;
  start_on_worker(s);
  // No edit this frame: nothing to wait for.
  CHECK_FALSE(s.hold_for_result(1e4));
  const auto before = s.result.forward;
  s.now += 1;
  REQUIRE(s.apply(set_tensor_value("query", 5, 0.25f)));
  CHECK(s.computer.expected_ms(s.scenario()) > 0);
  // A budget the forward fits in: the wait ends with it landed (unless it landed already), and the
  // next tick shows it.
  const bool busy = s.computer.busy();
  CHECK(s.hold_for_result(1e4) == busy);
  CHECK_FALSE(s.computer.busy());
  s.tick(s.now);
  CHECK(s.result.forward != before);
  check_full_forward(s, "held edit");
  // Asked once per request: a second call in the same frame does not wait.
  CHECK_FALSE(s.hold_for_result(1e4));
  // No budget left: the frame is drawn at once, and the result lands later.
  s.now += 1;
  REQUIRE(s.apply(set_tensor_value("query", 6, 0.5f)));
  CHECK_FALSE(s.hold_for_result(0));
  wait_idle(s);
  check_full_forward(s, "edit not held");
}

TEST_CASE("weights edits on the worker redo only the heads they move, equal to a full forward", "[state]") {
  AppState s;
  start_on_worker(s);
  auto check_full = [&](const char* what) { check_full_forward(s, what); };
  // A drag on one weight of W_q's head 1 (rows 16..31), then one of out_proj.
  int heads_only = 0;
  for (int k = 0; k < 5; ++k) {
    const std::int64_t at = (16 + 3) * 64 + k;
    s.now += 1;
    s.apply(set_tensor_value("in_proj_weight", at, 0.1f * float(k + 1)));
    wait_idle(s);
    if (k >= 3) CHECK(s.result.heads_only);
    heads_only += s.result.heads_only;
    check_full("W_q edit");
  }
  CHECK(heads_only >= 2);
  for (int k = 0; k < 4; ++k) {
    s.now += 1;
    s.apply(set_tensor_value("out_proj.weight", 5 + k, 0.25f));
    wait_idle(s);
    check_full("out_proj edit");
  }
  CHECK(s.result.heads_only);
}

TEST_CASE("the Heads view's kept rows equal a rebuild from scratch after each kind of edit", "[state]") {
  setenv("MHA_VERIFY_HEADS", "1", 1);  // each Heads rebuild is checked; a difference aborts
  mha::test::HeadlessUi ui;
  AppState s;
  s.start(causal_start(160, true));
  s.apply(show_view(FrameStats::kTab));  // Heads
  s.recompute();
  ui.settle(s);
  for (const char* stage : {"attn_weights", "scores_masked", "scores", "context"}) {
    INFO("stage " << stage);
    s.view().stage = stage;
    ui.frame(s);
    for (int k = 0; k < 4; ++k) {
      s.now += 1;
      if (k == 1) {
        s.apply(set_tensor_value("query", k * 5, s.scenario().query->data[std::size_t(k * 5)] + 0.25f));
      } else if (k == 3) {  // a whole row blocked, then open again next round
        const bool blocked = std::isinf(s.scenario().mask.cells[std::size_t(90 * 160)]);
        edit(s, "edit", [blocked](Scenario& x) {
          for (std::int64_t j = 0; j < 160; ++j)
            x.mask.cells[std::size_t(90 * 160 + j)] = blocked && j <= 90 ? 0.0f : -INFINITY;
        });
      } else {
        const bool blocked = std::isinf(s.scenario().mask.cells[std::size_t(40 * 160 + 3 + k)]);
        s.apply(paint_mask_cells({{40, 3 + k}}, !blocked));
      }
      ui.settle(s);
      ui.frame(s);
      REQUIRE(s.errors.empty());
    }
  }
  unsetenv("MHA_VERIFY_HEADS");
}

TEST_CASE("stages a result left out are computed off the UI thread when large, at once when small",
          "[state]") {
  StageComputer stages;
  std::atomic<int> woken{0};
  stages.on_done = [&] { ++woken; };
  auto left_out = [](std::int64_t L) {  // the output alone: every (N, H, L, S') stage left out
    mha::Config c;
    c.embed_dim = 32;
    c.num_heads = 4;
    mha::SeededCase<float> sc = mha::torch_seeded_case<float>(c, 3, 1, L, L);
    mha::Options o;
    o.stages = {"output"};
    auto r = std::make_shared<const mha::ForwardResult<float>>(mha::forward(c, sc.weights, sc.inputs, o));
    o.stages.clear();
    return std::pair{r, mha::forward(c, sc.weights, sc.inputs, o)};
  };
  // 4 × 600 × 600 weights: over the limit, so the thread computes them; the caller is told to wait.
  auto [large, full] = left_out(600);
  REQUIRE(4.0 * 600 * 600 >= StageComputer::kSyncValues);
  CHECK_FALSE(stages.ready(large, {"attn_weights", "attn_weights_avg"}));
  CHECK_FALSE(stages.ready(large, {"attn_weights", "attn_weights_avg"}));  // asked again: queued once
  REQUIRE(stages.wait_idle(20000));
  CHECK(woken == 2);
  CHECK(stages.ready(large, {"attn_weights", "attn_weights_avg"}));
  for (const char* name : {"attn_weights", "attn_weights_avg"}) {
    const mha::Stage<float>* got = mha::find_stage(*large, name, false);
    REQUIRE(got);
    CHECK(got->contiguous().identical(full.trace[name].contiguous()));
  }
  // 4 × 100 × 100: computed at once, here.
  auto [small, small_full] = left_out(100);
  CHECK(stages.ready(small, {"scores"}));
  REQUIRE(mha::find_stage(*small, "scores", false));
  CHECK(mha::find_stage(*small, "scores", false)
            ->contiguous()
            .identical(small_full.trace["scores"].contiguous()));
  // A stage that cannot be computed (not one computed on demand) is reported ready once tried: the
  // view then says why. A result let go of while queued is skipped.
  auto [other, other_full] = left_out(700);
  CHECK_FALSE(stages.ready(other, {"no_such_stage_", "attn_weights"}));
  REQUIRE(stages.wait_idle(20000));
  CHECK(stages.ready(other, {"no_such_stage_", "attn_weights"}));
  auto [dropped, dropped_full] = left_out(800);
  CHECK_FALSE(stages.ready(dropped, {"scores", "scores_scaled", "attn_weights"}));
  dropped.reset();
  CHECK(stages.wait_idle(20000));
  CHECK_FALSE(stages.busy());
}

TEST_CASE("Compare's before is the result before the edit, and none after a change of sizes", "[state]") {
  AppState s;
  s.recompute();
  REQUIRE(s.result.valid());
  const auto first = s.result.forward;
  s.now += 1;
  s.apply(set_control("seed", "7"));  // the same sizes: the result before it is kept
  CHECK(s.previous.forward == first);
  const auto second = s.result.forward;
  s.now += 1;
  s.apply(set_control("num_heads", "4"));  // the head count keeps N, L, S and E
  CHECK(s.previous.forward == second);
  s.now += 1;
  s.apply(set_control("tgt_len", "6"));  // another L: nothing to compare with
  CHECK_FALSE(s.previous.valid());
  s.undo();  // back to L = 4: the L = 6 result compares with nothing either
  CHECK_FALSE(s.previous.valid());
  s.now += 1;
  s.apply(set_control("seed", "8"));
  CHECK(s.previous.valid());
  Scenario other = s.scenario();
  other.batch = 2;
  s.load(other, "open");
  CHECK_FALSE(s.previous.valid());
}
