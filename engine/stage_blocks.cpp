// Level of detail for maps too large to hold: one on-demand stage of one head reduced to
// block×block patches (max or mean), computed a few row blocks at a time through stage_rows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "errors.hpp"
#include "mha.hpp"

namespace mha {

template <class T>
Tensor<T> stage_blocks(const ForwardResult<T>& r, const std::string& stage, std::int64_t n, std::int64_t h,
                       std::int64_t i0, std::int64_t j0, std::int64_t block, std::int64_t out_rows,
                       std::int64_t out_cols, BlockReduce reduce) {
  const Dims& d = r.dims;
  const std::int64_t L = d.L, Sp = d.S_total;
  if (block <= 0 || out_rows <= 0 || out_cols <= 0 || i0 < 0 || j0 < 0 || i0 + (out_rows - 1) * block >= L ||
      j0 + (out_cols - 1) * block >= Sp)
    throw ConfigError("blocks", std::to_string(out_rows) + "x" + std::to_string(out_cols) + " blocks of " +
                                    std::to_string(block) + " from (" + std::to_string(i0) + ", " +
                                    std::to_string(j0) + ") are outside (L, S') = (" + std::to_string(L) +
                                    ", " + std::to_string(Sp) + ")");
  Tensor<T> out({out_rows, out_cols});
  const std::int64_t rows_end = std::min(L, i0 + out_rows * block);
  // Whole patches per chunk, about 128 rows (the forward's largest task block) or one patch.
  const std::int64_t chunk = block * std::max<std::int64_t>(1, 128 / block);
  for (std::int64_t c0 = i0; c0 < rows_end; c0 += chunk) {
    const std::int64_t c1 = std::min(rows_end, c0 + chunk);
    const Tensor<T> rows = stage_rows(r, stage, n, h, c0, c1 - c0);  // (c1 - c0, S')
    for (std::int64_t pr = (c0 - i0) / block; pr * block + i0 < c1; ++pr) {
      const std::int64_t a0 = i0 + pr * block, a1 = std::min(c1, a0 + block);
      for (std::int64_t pc = 0; pc < out_cols; ++pc) {
        const std::int64_t b0 = j0 + pc * block, b1 = std::min(Sp, b0 + block);
        double acc = reduce == BlockReduce::mean ? 0.0 : -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (std::int64_t i = a0; i < a1; ++i)
          for (std::int64_t j = b0; j < b1; ++j) {
            const double v = double(rows.data[std::size_t((i - c0) * Sp + j)]);
            nan = nan || std::isnan(v);
            acc = reduce == BlockReduce::mean ? acc + v : std::max(acc, v);
          }
        const double count = double((a1 - a0) * (b1 - b0));
        out.data[std::size_t(pr * out_cols + pc)] =
            nan ? std::numeric_limits<T>::quiet_NaN() : T(reduce == BlockReduce::mean ? acc / count : acc);
      }
    }
  }
  return out;
}

template Tensor<float> stage_blocks<float>(const ForwardResult<float>&, const std::string&, std::int64_t,
                                           std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                           std::int64_t, std::int64_t, BlockReduce);
template Tensor<double> stage_blocks<double>(const ForwardResult<double>&, const std::string&, std::int64_t,
                                             std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                             std::int64_t, std::int64_t, BlockReduce);

}  // namespace mha
