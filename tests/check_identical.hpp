// Two forward results equal bit for bit: every stage (same names, shapes, strides, values, NaN where
// NaN) and the counts beside them. Shared by the workspace, pre-sizing and incremental tests.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>

#include "fixtures.hpp"
#include "weights_check.hpp"

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
  CHECK(a.overview.block == b.overview.block);
  CHECK(a.overview.columns == b.overview.columns);
  if (a.overview.valid() && b.overview.valid()) {
    auto same_bits = [](const std::shared_ptr<const std::vector<T>>& x,
                        const std::shared_ptr<const std::vector<T>>& y) {
      return x->size() == y->size() && std::memcmp(x->data(), y->data(), x->size() * sizeof(T)) == 0;
    };
    CHECK(same_bits(a.overview.weights, b.overview.weights));
    CHECK(same_bits(a.overview.average, b.overview.average));
    CHECK(same_bits(a.overview.checks, b.overview.checks));
  }
}

// `r`'s weights overview against the same reduction of `full`'s attn_weights and attn_weights_avg
// (a result of the same problem that keeps them): each column the largest weight of its keys (NaN
// for a NaN row), bit for bit; each row's check weights_check::check_row's, the visible keys and
// the row's kind exactly, the entropy and the row sum's error within float rounding (the fused loop
// takes the entropy from the scores: check_softmax_row).
template <class T>
void check_overview(const ForwardResult<T>& r, const ForwardResult<T>& full, std::int64_t block) {
  const Dims& d = full.dims;
  const WeightsOverview<T>& o = r.overview;
  REQUIRE(o.valid());
  CHECK(o.block == block);
  const std::int64_t Sp = d.S_total, C = (Sp + block - 1) / block;
  REQUIRE(o.columns == C);
  const Tensor<T> w = full.trace["attn_weights"].contiguous();
  const Tensor<T> avg = full.trace["attn_weights_avg"].contiguous();
  const Stage<T>* mask_stage = full.trace.find("attn_mask");
  const Tensor<T> mask = mask_stage ? mask_stage->contiguous() : Tensor<T>();  // (N, H, L, S')
  REQUIRE(o.weights->size() == std::size_t(d.N * d.H * d.L * C));
  REQUIRE(o.average->size() == std::size_t(d.N * d.L * C));
  REQUIRE(o.checks->size() == std::size_t(d.N * (d.H + 1) * d.L * 4));
  int bad = 0;
  for (std::int64_t n = 0; n < d.N; ++n)
    for (std::int64_t h = 0; h <= d.H; ++h)
      for (std::int64_t i = 0; i < d.L; ++i) {
        const bool average = h == d.H;
        const T* row =
            average ? avg.data.data() + (n * d.L + i) * Sp : w.data.data() + ((n * d.H + h) * d.L + i) * Sp;
        const weights_check::PlaneOf<T> p{row, Sp, 1, 1, int(Sp)};
        const weights_check::PlaneOf<T> m{
            mask_stage && !average ? mask.data.data() + ((n * d.H + h) * d.L + i) * Sp : nullptr, Sp, 1, 1,
            int(Sp)};
        const weights_check::RowPart part = weights_check::check_row(p, m.p ? &m : nullptr, 0);
        const T* got_checks = o.checks->data() + ((n * (d.H + 1) + h) * d.L + i) * 4;
        const bool ordinary = part.kind == weights_check::RowPart::ordinary;
        if (got_checks[3] != T(part.kind) || got_checks[1] != T(part.ent_max) ||
            (ordinary && (std::fabs(double(got_checks[0]) - part.ent) > 1e-4 ||
                          std::fabs(double(got_checks[2]) - part.err) > 2e-6)))
          ++bad;
        const T* got = average ? o.average->data() + (n * d.L + i) * C
                               : o.weights->data() + ((n * d.H + h) * d.L + i) * C;
        for (std::int64_t c = 0; c < C; ++c) {
          T top = row[c * block];
          for (std::int64_t j = c * block; j < std::min(Sp, (c + 1) * block); ++j)
            top = std::isnan(row[j]) || std::isnan(top) ? std::numeric_limits<T>::quiet_NaN()
                                                        : std::max(top, row[j]);
          if (std::memcmp(&top, got + c, sizeof top) != 0 && !(std::isnan(top) && std::isnan(got[c]))) ++bad;
        }
      }
  CHECK(bad == 0);
}

}  // namespace mha::test
