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

TEST_CASE("reserve follows size changes and leaves a held result alone", "[workspace]") {
  Workspace<float> ws;
  ForwardResult<float> held;
  Config c4;
  c4.embed_dim = 16;
  c4.num_heads = 4;
  const SeededCase<float> four = torch_seeded_case<float>(c4, 3, 2, 6, 7);
  forward(c4, four.weights, four.inputs, Options{}, ws, held);
  const ForwardResult<float> want_held = forward(c4, four.weights, four.inputs, Options{});

  // A new head count (as the app's size field changes it) and a longer query.
  Config c2 = c4;
  c2.num_heads = 2;
  const SeededCase<float> two = torch_seeded_case<float>(c2, 5, 2, 40, 7);
  const std::int64_t before = ws.allocations();
  reserve(c2, two.weights, two.inputs, Options{}, ws);
  CHECK(ws.allocations() > before);  // q and the (N, H, L, S) arrays grew past 2x: new buffers
  check_identical(held, want_held);  // and the held ones, k and v among them, are untouched
  const std::int64_t reserved = ws.allocations();
  held = ForwardResult<float>();  // the app lets go of a result before its workspace's next forward
  ForwardResult<float> r;
  forward(c2, two.weights, two.inputs, Options{}, ws, r);
  CHECK(ws.allocations() == reserved);
  check_identical(r, forward(c2, two.weights, two.inputs, Options{}));
}

TEST_CASE("reserve keeps the buffers a held result has when they fit the new sizes", "[workspace]") {
  // The app reserves its other workspaces after a head-count change while their results are still
  // on screen (current and previous). Replacing those buffers would fault in a second copy of each
  // for nothing: the result is let go before the workspace's next forward, which resizes in place.
  Workspace<float> ws;
  ForwardResult<float> held;
  Config c8;
  c8.embed_dim = 32;
  c8.num_heads = 8;
  const SeededCase<float> eight = torch_seeded_case<float>(c8, 4, 2, 9, 9);
  forward(c8, eight.weights, eight.inputs, Options{}, ws, held);
  const ForwardResult<float> want_held = forward(c8, eight.weights, eight.inputs, Options{});
  const std::int64_t allocated = ws.allocations();

  Config c4 = c8;
  c4.num_heads = 4;  // the (N, H, L, S) arrays halve: within 2x
  const SeededCase<float> four = torch_seeded_case<float>(c4, 4, 2, 9, 9);
  reserve(c4, four.weights, four.inputs, Options{}, ws);
  CHECK(ws.allocations() == allocated);
  check_identical(held, want_held);  // kept, not resized under the holder

  held = ForwardResult<float>();
  ForwardResult<float> r;
  forward(c4, four.weights, four.inputs, Options{}, ws, r);
  CHECK(ws.allocations() == allocated);
  check_identical(r, forward(c4, four.weights, four.inputs, Options{}));
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
