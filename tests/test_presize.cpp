// Workspace pre-sizing (reserve): after it, a forward at those sizes allocates nothing and its
// results equal a fresh forward bit for bit; a result still held is never touched by it.
#include <catch2/catch.hpp>

#include "check_identical.hpp"
#include "errors.hpp"
#include "fixtures.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;

TEST_CASE("reserve allocates what the next forward needs, and that forward allocates nothing",
          "[workspace]") {
  for (const std::string& name : fixture_names()) {
    if (name == "float_attn_float_kpm" || fixture_meta(name)["dtype"] == "float64") continue;
    const Fixture<float> f = load_fixture<float>(name);
    for (Backend backend : {Backend::reference, Backend::eigen}) {
      INFO("case " << name << ", backend " << backend_name(backend));
      Options o = f.options;
      o.backend = backend;
      Workspace<float> ws;
      reserve(f.config, f.weights, f.inputs, o, ws);
      const std::int64_t allocated = ws.allocations();
      CHECK(allocated > 0);
      reserve(f.config, f.weights, f.inputs, o, ws);  // already fits: nothing new
      CHECK(ws.allocations() == allocated);
      ForwardResult<float> r;
      forward(f.config, f.weights, f.inputs, o, ws, r);
      CHECK(ws.allocations() == allocated);
      check_identical(r, forward(f.config, f.weights, f.inputs, o));
    }
  }
}

namespace {

// A result of `first` held while its workspace is reserved for `next`, as the app's screen holds
// one; then let go, and `next` computed into the workspace.
struct HeldThenReserved {
  Workspace<float> ws;
  ForwardResult<float> held, want_held, r;
  std::int64_t before = 0, reserved = 0, after = 0;  // allocations: before reserve, after it, after forward

  HeldThenReserved(const Config& c, const SeededCase<float>& first, const Config& c_next,
                   const SeededCase<float>& next) {
    forward(c, first.weights, first.inputs, Options{}, ws, held);
    want_held = forward(c, first.weights, first.inputs, Options{});
    before = ws.allocations();
    reserve(c_next, next.weights, next.inputs, Options{}, ws);
    reserved = ws.allocations();
    check_identical(held, want_held);  // reserve touched nothing the result holds
    held = ForwardResult<float>();     // the app lets go of a result before its workspace's next forward
    forward(c_next, next.weights, next.inputs, Options{}, ws, r);
    after = ws.allocations();
    check_identical(r, forward(c_next, next.weights, next.inputs, Options{}));
  }
};

}  // namespace

TEST_CASE("reserve follows size changes and leaves a held result alone", "[workspace]") {
  Config c4;
  c4.embed_dim = 16;
  c4.num_heads = 4;
  Config c2 = c4;  // a new head count (as the app's size field changes it) and a longer query
  c2.num_heads = 2;
  const HeldThenReserved h(c4, torch_seeded_case<float>(c4, 3, 2, 6, 7), c2,
                           torch_seeded_case<float>(c2, 5, 2, 40, 7));
  CHECK(h.reserved > h.before);  // q and the (N, H, L, S) arrays grew past 2x: new buffers
  CHECK(h.after == h.reserved);
}

TEST_CASE("reserve keeps the buffers a held result has when they fit the new sizes", "[workspace]") {
  // The app reserves its other workspaces after a head-count change while their results are still
  // on screen (current and previous). Replacing those buffers would fault in a second copy of each
  // for nothing: the result is let go before the workspace's next forward, which resizes in place.
  Config c8;
  c8.embed_dim = 32;
  c8.num_heads = 8;
  Config c4 = c8;
  c4.num_heads = 4;  // the (N, H, L, S) arrays halve: within 2x
  const HeldThenReserved h(c8, torch_seeded_case<float>(c8, 4, 2, 9, 9), c4,
                           torch_seeded_case<float>(c4, 4, 2, 9, 9));
  CHECK(h.reserved == h.before);  // kept, not resized under the holder
  CHECK(h.after == h.before);
}

TEST_CASE("reserve checks its inputs as forward does", "[workspace]") {
  const Fixture<float> f = load_fixture<float>("teaching");
  Inputs<float> bad = f.inputs;
  bad.query.shape.back() += 1;
  bad.query.data.resize(std::size_t(numel(bad.query.shape)));
  Workspace<float> ws;
  CHECK_THROWS_AS(reserve(f.config, f.weights, bad, f.options, ws), ShapeError);
  CHECK(ws.allocations() == 0);
}
