// Weight matrices read in place, and the two products the model runners take with them. The Eigen
// path widens tiles of rows into a float scratch per thread, sized to stay in a core's L2 cache
// while the tile is multiplied; the reference path widens one row at a time and sums in double.
#include "model/weight_matrix.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_dispatch.hpp"
#include "errors.hpp"
#include "kernels/forward_kernels.hpp"
#include "parallel.hpp"

namespace mha {

namespace {

int kernel_type(DType d) {
  return d == DType::f32   ? detail::kernels::kWeightF32
         : d == DType::f16 ? detail::kernels::kWeightF16
                           : detail::kernels::kWeightBF16;
}

// Rows of W widened per tile: about 128K floats (512 KB), at least 16 rows, a multiple of 16.
std::int64_t tile_rows(std::int64_t cols) {
  constexpr std::int64_t kTileFloats = 128 * 1024;
  return std::max<std::int64_t>(16, kTileFloats / std::max<std::int64_t>(cols, 1) / 16 * 16);
}

// Each calling thread's scratch, grown to the largest asked for: `threads` tiles of `per` floats. The
// forward's worker threads are started per product, so the caller's thread keeps it for them.
float* scratch_for(int threads, std::int64_t per) {
  thread_local std::vector<float> scratch;
  const std::size_t need = std::size_t(threads) * std::size_t(per);
  if (scratch.size() < need) scratch.resize(need);
  return scratch.data();
}

}  // namespace

WeightMatrix::WeightMatrix(Tensor<float> t) {
  if (t.dim() != 2) throw ShapeError("weight", "a weight matrix is 2-D, got shape " + shape_str(t.shape));
  auto held = std::make_shared<std::vector<float>>(std::move(t.data));
  dtype = DType::f32;
  shape = t.shape;
  data = reinterpret_cast<const unsigned char*>(held->data());
  owner = std::move(held);
}

WeightMatrix::WeightMatrix(DType dt, Shape s, const unsigned char* bytes, std::shared_ptr<const void> keep,
                           const std::string& name) {
  if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16)
    throw DtypeError(name, name + ": dtype " + std::string(dtype_name(dt)) +
                               " is not a weight type the products read (F32, F16 or BF16)");
  if (s.size() != 2) throw ShapeError(name, name + ": a weight matrix is 2-D, got shape " + shape_str(s));
  if (dt == DType::f32 && reinterpret_cast<std::uintptr_t>(bytes) % alignof(float) != 0) {
    // The file placed it off a float boundary: hold an aligned copy.
    auto held = std::make_shared<std::vector<float>>(std::size_t(mha::numel(s)));
    std::memcpy(held->data(), bytes, held->size() * sizeof(float));
    bytes = reinterpret_cast<const unsigned char*>(held->data());
    keep = std::move(held);
  }
  dtype = dt;
  shape = std::move(s);
  data = bytes;
  owner = std::move(keep);
}

void WeightMatrix::row(std::int64_t r, float* out) const {
  const std::size_t es = dtype_size(dtype);
  convert_elements(dtype, data + std::size_t(r) * std::size_t(cols()) * es, cols(), out);
}

float WeightMatrix::at(std::int64_t r, std::int64_t c) const {
  float v = 0;
  const std::size_t es = dtype_size(dtype);
  convert_elements(dtype, data + (std::size_t(r) * std::size_t(cols()) + std::size_t(c)) * es, 1, &v);
  return v;
}

Tensor<float> WeightMatrix::to_tensor() const {
  if (empty()) return {};
  Tensor<float> t(shape);
  convert_elements(dtype, data, numel(), t.ptr());
  return t;
}

std::int64_t WeightMatrix::nonfinite() const {
  return empty() ? 0 : count_nonfinite_elements(data, kernel_type(dtype), numel());
}

bool WeightMatrix::same_values(const WeightMatrix& o) const {
  if (shape != o.shape) return false;
  if (dtype == o.dtype) return data == o.data || std::memcmp(data, o.data, nbytes()) == 0;
  std::vector<float> a(static_cast<std::size_t>(cols())), b(static_cast<std::size_t>(cols()));
  for (std::int64_t r = 0; r < rows(); ++r) {
    row(r, a.data());
    o.row(r, b.data());
    if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

void linear(const float* x, const WeightMatrix& W, float* y, std::int64_t rows, Backend backend,
            int threads) {
  const std::int64_t out = W.rows(), in = W.cols();
  if (backend == Backend::reference) {
    std::vector<float> w(static_cast<std::size_t>(in));
    for (std::int64_t j = 0; j < out; ++j) {
      W.row(j, w.data());
      for (std::int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (std::int64_t i = 0; i < in; ++i) acc += double(x[r * in + i]) * w[std::size_t(i)];
        y[r * out + j] = float(acc);
      }
    }
    return;
  }
  const int n = detail::thread_count(threads, 2.0 * double(rows) * double(in) * double(out));
  const std::int64_t tile = tile_rows(in), blocks = (out + 15) / 16;
  const int used = int(std::min<std::int64_t>(n, blocks));
  float* scratch = W.dtype == DType::f32 ? nullptr : scratch_for(used, tile * in);
  detail::parallel_ranges(used, blocks, [&](int t, std::int64_t b0, std::int64_t b1) {
    linear_typed_columns(x, W.data, kernel_type(W.dtype), y, rows, in, out, b0 * 16, std::min(b1 * 16, out),
                         scratch ? scratch + std::int64_t(t) * tile * in : nullptr, tile);
  });
}

void matvec(const WeightMatrix& W, const float* x, float* y, Backend backend, int threads) {
  const std::int64_t V = W.rows(), C = W.cols();
  if (backend == Backend::reference) {
    std::vector<float> w(static_cast<std::size_t>(C));
    for (std::int64_t v = 0; v < V; ++v) {
      W.row(v, w.data());
      double acc = 0;
      for (std::int64_t k = 0; k < C; ++k) acc += double(x[k]) * w[std::size_t(k)];
      y[v] = float(acc);
    }
    return;
  }
  const int n = int(std::min<std::int64_t>(detail::thread_count(threads, 2.0 * double(V * C)), V));
  const std::int64_t tile = tile_rows(C);
  float* scratch = W.dtype == DType::f32 ? nullptr : scratch_for(std::max(n, 1), tile * C);
  detail::parallel_ranges(n, V, [&](int t, std::int64_t v0, std::int64_t v1) {
    gemv_typed_rows(W.data, kernel_type(W.dtype), x, y, C, v0, v1,
                    scratch ? scratch + std::int64_t(t) * tile * C : nullptr, tile);
  });
}

}  // namespace mha
