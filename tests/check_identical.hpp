// Two forward results equal bit for bit: every stage (same names, shapes, strides, values, NaN where
// NaN) and the counts beside them. Shared by the workspace, pre-sizing and incremental tests.
#pragma once

#include <catch2/catch.hpp>

#include "fixtures.hpp"

namespace mha::test {

template <class T>
void check_identical(const ForwardResult<T>& a, const ForwardResult<T>& b) {
  REQUIRE(a.trace.stages.size() == b.trace.stages.size());
  for (std::size_t i = 0; i < a.trace.stages.size(); ++i) {
    const Stage<T>& x = a.trace.stages[i];
    const Stage<T>& y = b.trace.stages[i];
    INFO("stage " << x.name);
    REQUIRE(x.name == y.name);
    CHECK(x.shape == y.shape);
    CHECK(x.strides == y.strides);
    CHECK(mismatch(x.contiguous(), y.contiguous(), 0, 0) == "");
  }
  CHECK(a.fully_masked_rows == b.fully_masked_rows);
  CHECK(a.nonfinite_inputs == b.nonfinite_inputs);
  CHECK(a.warnings == b.warnings);
}

}  // namespace mha::test
