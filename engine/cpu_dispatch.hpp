// Which compiled copy of the Eigen path's kernels runs: the portable build carries sse2, avx2 (+FMA)
// and avx512 copies (engine/kernels/) and picks the best this CPU runs, once per process. The
// environment variable MHA_CPU=sse2|avx2|avx512 asks for a lower one (tests, comparisons).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mha {

// The kernels forward() uses now, e.g. "avx512".
const char* cpu_kernels();
// The kernels compiled into this binary that this CPU can run, lowest first.
std::vector<std::string> cpu_kernels_supported();

// C[r0:r1] = A[r0:r1]·B for row-major n×n matrices, with the same kernels' Eigen: the yardstick GEMM
// of `mha bench --sgemm`.
void sgemm_rows(const float* A, const float* B, float* C, std::int64_t n, std::int64_t r0, std::int64_t r1);

// Columns [c0, c1) of y (rows, out) = x·W + b with W stored [in, out] (Hugging Face's Conv1D; b may
// be null), then gelu_new when asked: the model runner's MLP on the same kernels as the attention.
void conv1d_columns(const float* x, const float* W, const float* b, float* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out, std::int64_t c0, std::int64_t c1, bool gelu);
// Rows [r0, r1) of y = A·x for a row-major A (·, cols).
void gemv_rows(const float* A, const float* x, float* y, std::int64_t cols, std::int64_t r0, std::int64_t r1);

// The same products reading a weight matrix as stored (kernels::kWeightF32, kWeightF16 or kWeightBF16
// in forward_kernels.hpp): columns [c0, c1) of y (rows, out) = x (rows, in)·Wᵀ for W (out, in), and
// rows [r0, r1) of y = A·x. Half types are widened `tile` rows at a time into scratch (tile·in or
// tile·cols floats, the caller's thread's own). And n stored elements widened to float.
void linear_typed_columns(const float* x, const void* W, int type, float* y, std::int64_t rows,
                          std::int64_t in, std::int64_t out, std::int64_t c0, std::int64_t c1, float* scratch,
                          std::int64_t tile);
void gemv_typed_rows(const void* A, int type, const float* x, float* y, std::int64_t cols, std::int64_t r0,
                     std::int64_t r1, float* scratch, std::int64_t tile);
void widen_elements(const void* src, int type, std::int64_t n, float* dst);
// How many of n stored elements are NaN or infinite, counted on every hardware thread: a model's
// open reads each weight once for this.
std::int64_t count_nonfinite_elements(const void* src, int type, std::int64_t n);

namespace detail {
// For tests: forward() uses `name`'s kernels while this lives. Throws ConfigError for a name this
// CPU cannot run. Not for use while another thread runs a forward.
class ScopedCpuKernels {
 public:
  explicit ScopedCpuKernels(const std::string& name);
  ~ScopedCpuKernels();
  ScopedCpuKernels(const ScopedCpuKernels&) = delete;
  ScopedCpuKernels& operator=(const ScopedCpuKernels&) = delete;

 private:
  const void* previous_;
};
}  // namespace detail

}  // namespace mha
