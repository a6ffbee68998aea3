// Every bad input gets a typed error that names the argument and the expected shape or type —
// never a crash, never a silent broadcast.
#include <catch2/catch.hpp>

#include "errors.hpp"
#include "masks.hpp"
#include "torch_rng.hpp"

using namespace mha;
using Catch::Contains;

namespace {

struct Case {
  Config c;
  SeededCase<float> sc;
  Options o;
  Case(std::int64_t N = 3, std::int64_t L = 4, std::int64_t S = 4, std::int64_t E = 8, std::int64_t H = 2) {
    c.embed_dim = E;
    c.num_heads = H;
    sc = torch_seeded_case<float>(c, 0, N, L, S);
  }
  ForwardResult<float> run() const { return forward(c, sc.weights, sc.inputs, o); }
};

Mask<float> mask_of(Shape shape, MaskDType dtype = MaskDType::boolean) {
  Mask<float> m;
  m.dtype = dtype;
  m.values = Tensor<float>(std::move(shape));
  return m;
}

}  // namespace

TEST_CASE("sizes that cannot work", "[bad]") {
  Config c;
  c.embed_dim = 6;
  c.num_heads = 4;
  REQUIRE_THROWS_WITH(validate(c), Contains("embed_dim 6 not divisible by num_heads 4"));
  c.embed_dim = 8;
  c.num_kv_heads = 3;
  REQUIRE_THROWS_AS(validate(c), ConfigError);
  REQUIRE_THROWS_WITH(validate(c), Contains("num_kv_heads 3 does not divide num_heads 4"));
  c.num_kv_heads = 0;
  c.embed_dim = 0;
  REQUIRE_THROWS_WITH(validate(c), Contains("embed_dim must be positive, got 0"));
  c.embed_dim = 8;
  c.num_heads = -2;
  REQUIRE_THROWS_WITH(validate(c), Contains("num_heads must be positive"));
  c.num_heads = 2;
  REQUIRE_THROWS_AS(torch_seeded_case<float>(c, 0, 0, 4, 4), ConfigError);
}

TEST_CASE("query, key and value shapes that disagree", "[bad]") {
  Case k;
  k.sc.inputs.key = Tensor<float>({2, 4, 8});
  REQUIRE_THROWS_AS(k.run(), ShapeError);
  REQUIRE_THROWS_WITH(k.run(), Contains("key: expected shape (3, 4, 8)"));
  Case v;
  v.sc.inputs.value = Tensor<float>({3, 5, 8});
  REQUIRE_THROWS_WITH(v.run(), Contains("value: expected shape (3, 4, 8)"));
  Case e;
  e.sc.inputs.query = Tensor<float>({3, 4, 6});
  REQUIRE_THROWS_WITH(e.run(), Contains("expecting embedding dimension of 8"));
  Case d;
  d.sc.inputs.query = Tensor<float>({3, 4, 8, 1});
  REQUIRE_THROWS_WITH(d.run(), Contains("4-D query"));
  Case mix;
  mix.sc.inputs.key = Tensor<float>({4, 8});
  REQUIRE_THROWS_WITH(mix.run(), Contains("expected key and value to be 3-D"));
  Case held;  // a tensor whose data does not fill its shape
  held.sc.inputs.query.data.pop_back();
  REQUIRE_THROWS_WITH(held.run(), Contains("query: shape (3, 4, 8) needs 96 values, holds 95"));
  Case empty;
  empty.sc.inputs.query = Tensor<float>({3, 0, 8});
  REQUIRE_THROWS_AS(empty.run(), ShapeError);
}

TEST_CASE("weights of the wrong shape or missing", "[bad]") {
  Case a;
  a.sc.weights.in_proj_weight = Tensor<float>({24, 9});
  REQUIRE_THROWS_WITH(a.run(), Contains("in_proj_weight: expected shape (24, 8)"));
  Case b;
  b.sc.weights.out_proj_weight = Tensor<float>();
  REQUIRE_THROWS_WITH(b.run(), Contains("out_proj.weight: missing"));
  Case c;
  c.c.bias = false;  // biases present but bias=False
  REQUIRE_THROWS_WITH(c.run(), Contains("in_proj_bias was given but bias=False"));
  Case d;
  d.c.add_bias_kv = true;
  REQUIRE_THROWS_WITH(d.run(), Contains("bias_k: missing; expected shape (1, 1, 8)"));
}

TEST_CASE("masks of the wrong shape, with the (N, L, S) vs (N·H, L, S) confusion explained", "[bad]") {
  Case a;
  a.sc.inputs.attn_mask = mask_of({4, 5});
  REQUIRE_THROWS_WITH(a.run(), Contains("2D attn_mask is (4, 5), but should be (4, 4)"));

  Case course;  // the course notebook's failing run: (N, L, S) where torch wants (N·H, L, S)
  course.sc.inputs.attn_mask = mask_of({3, 4, 4});
  REQUIRE_THROWS_AS(course.run(), ShapeError);
  REQUIRE_THROWS_WITH(course.run(), Contains("should be (6, 4, 4)"));
  REQUIRE_THROWS_WITH(course.run(), Contains("one per batch item, as the course material builds it"));
  REQUIRE_THROWS_WITH(course.run(), Contains("repeat_interleave(num_heads, dim=0)"));
  course.o.attn_mask_layout = MaskLayout::per_batch;  // asked for explicitly, it works
  REQUIRE_NOTHROW(course.run());

  Case other_way;
  other_way.o.attn_mask_layout = MaskLayout::per_batch;
  other_way.sc.inputs.attn_mask = mask_of({6, 4, 4});
  REQUIRE_THROWS_WITH(other_way.run(), Contains("That is torch's (N·num_heads, L, S) layout"));

  Case four_d;
  four_d.sc.inputs.attn_mask = mask_of({3, 2, 4, 4});
  REQUIRE_THROWS_WITH(four_d.run(), Contains("got a 4-D tensor"));

  Case kpm;
  kpm.sc.inputs.key_padding_mask = mask_of({3, 5});
  REQUIRE_THROWS_WITH(kpm.run(), Contains("key_padding_mask: expecting shape (3, 4) (N, S)"));
}

TEST_CASE("mask dtypes torch forbids", "[bad]") {
  Case u8;
  u8.sc.inputs.key_padding_mask = mask_of({3, 4}, MaskDType::uint8);
  REQUIRE_THROWS_AS(u8.run(), DtypeError);
  REQUIRE_THROWS_WITH(u8.run(), Contains("only bool and floating types of key_padding_mask"));
  Case ff;
  ff.sc.inputs.attn_mask = mask_of({4, 4}, MaskDType::floating);
  ff.sc.inputs.key_padding_mask = mask_of({3, 4}, MaskDType::floating);
  REQUIRE_THROWS_AS(ff.run(), DtypeError);
  REQUIRE_THROWS_WITH(ff.run(), Contains("Use a bool key_padding_mask"));
  Case bf;  // bool attn_mask + float kpm is legal: logical_or of non-zero
  bf.sc.inputs.attn_mask = mask_of({4, 4});
  bf.sc.inputs.key_padding_mask = mask_of({3, 4}, MaskDType::floating);
  REQUIRE_NOTHROW(bf.run());
}

TEST_CASE("sizes whose trace would not fit are refused before allocating", "[bad]") {
  Case a;
  a.o.max_trace_bytes = 1000;
  try {
    a.run();
    FAIL("expected TooLargeError");
  } catch (const TooLargeError& e) {
    CHECK(e.bytes == trace_bytes(dims_for(a.c, 3, 4, 4), sizeof(float), false));
    CHECK(e.bytes > 1000);
    CHECK(e.limit_bytes == 1000);
    CHECK_THAT(e.what(), Contains("nothing was allocated"));
  }
  // A million tokens: ~4·10^12 scores per head, refused by the seeded generator before it draws.
  Config c;
  c.embed_dim = 1024;
  c.num_heads = 16;
  REQUIRE_THROWS_AS(torch_seeded_case<float>(c, 0, 1, 1000000, 1000000), TooLargeError);
  CHECK(trace_bytes(dims_for(c, 1, 1000000, 1000000), 4, false) > (std::uint64_t(1) << 40));
}
