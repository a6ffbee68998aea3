// The Eigen forward's arithmetic, compiled once per instruction set (forward_kernels.cpp, built as
// sse2, avx2 and avx512 objects) and chosen at run time by forward_eigen.cpp. Only plain structs and
// raw pointers cross this boundary: no std:: or Eigen template is shared between the variants, so
// the linker cannot merge an AVX copy of one into the SSE2 path (tests/check_kernel_symbols.cmake).
#pragma once

#include <cstdint>

namespace mha::detail::kernels {

// Everything one forward's kernels read and write. Shapes with S' = S_total, kv = G·d_k.
template <class T>
struct Args {
  std::int64_t N = 0, L = 0, S = 0, Sp = 0, E = 0, H = 0, dk = 0, kv = 0, kdim = 0, vdim = 0;
  std::int64_t qdim() const { return H * dk; }  // q's width and the heads side by side (Dims::qdim)
  std::int64_t heads_per_kv = 1;  // H / G: query head h reads key/value head h / heads_per_kv
  const T* query = nullptr;       // (N, L, E)
  const T* key = nullptr;         // (N, S, kdim)
  const T* value = nullptr;       // (N, S, vdim)
  const T *w_q = nullptr, *w_k = nullptr, *w_v = nullptr, *w_o = nullptr;  // torch's (out, in)
  const T *b_q = nullptr, *b_k = nullptr, *b_v = nullptr, *b_o = nullptr;  // null when bias=False
  // Merged additive mask in its broadcast shape (n_size, h_size, l_size, S'), or null.
  const T* mask = nullptr;
  std::int64_t mask_n = 1, mask_h = 1, mask_l = 1;
  // Per row of the merged mask (mask_n·mask_h·mask_l rows): 1 + its last column that is not -inf (0:
  // every key blocked). Set only where no pre-softmax stage is written and every score and value is
  // finite (forward_eigen.cpp): the fused loop then leaves the blocked keys past that column out of
  // the products and the softmax, which changes no digit of what it writes. Null: nothing skipped.
  const std::int64_t* open_end = nullptr;
  bool fully_masked_zero = false;                  // a row with every key blocked gives 0 (else NaN, torch's)
  T *q = nullptr, *q_scaled = nullptr;             // (N, L, E)
  T *k = nullptr, *v = nullptr;                    // (N, S', kv)
  T *scores = nullptr, *scores_scaled = nullptr;   // (N, H, L, S')
  T *scores_masked = nullptr, *weights = nullptr;  // (N, H, L, S')
  T *context = nullptr, *concat = nullptr;         // (N, H, L, d_k), (N, L, E)
  T *output = nullptr, *weights_avg = nullptr;     // (N, L, E), (N, L, S')
  T* scratch = nullptr;                            // 64-byte aligned, scratch_per_thread each
  // The products' right-hand operands, packed by Table::pack_group and pack_out into panels of
  // columns, each panel (depth, panel width) row-major with zeros past the last column: per (n, g)
  // kᵀ (d_k, S') in k_panel columns at (n·G + g)·k_group, and v (S', d_k) in v_panel columns at
  // (n·G + g)·v_group; W_oᵀ (E, E) in o_panel columns. Set by Table::plan_packing.
  T *k_packed = nullptr, *v_packed = nullptr, *w_o_packed = nullptr;
  std::int64_t k_panel = 0, v_panel = 0, o_panel = 0, k_group = 0, v_group = 0, o_size = 0;
  // Few query rows (N·L ≤ 64): packing W_o would cost more than its product, so the out-projection
  // computes outputᵀ = W_o·concatᵀ instead, the concat rows packed into w_o_packed (the same
  // multiply-adds in the same order), in one piece (Table::out_projection).
  bool out_few_rows = false;
  // Row stride of the per-thread (rows, S') blocks: S' rounded up to 64 bytes, so every row starts
  // on a 64-byte boundary wherever its block starts (a vectorised row sum peels to that boundary).
  std::int64_t ld = 0;
  std::int64_t scratch_per_thread = 0, block = 0, blocks_per_item = 0;
  // Where the fused loop writes: row i of head h of item n of an (N, H, L, S') stage goes to
  // n·out_n_stride + h·out_h_stride + (i − out_row0)·S', of attn_weights_avg to
  // n·avg_n_stride + (i − out_row0)·S'. make_args sets the full trace's layout; a stage computed on
  // demand for one (n, h) sets the strides to 0 and out_row0 to its first row. A null output is a
  // stage nobody asked for: not written (and context is not computed when context and concat are null).
  std::int64_t out_n_stride = 0, out_h_stride = 0, avg_n_stride = 0, out_row0 = 0;
  std::int64_t head_begin = 0, head_end = 0;  // the heads the fused loop runs: [head_begin, head_end)
  std::int64_t q_row0 = 0;  // q_scaled holds rows q_row0.. of the (N·L, E) q / √d_k (0: all of them)
  // The weights overview (Options::weights_overview; null: none): each weights row the fused loop
  // finishes, and each row of the head average after every head of its task (which must run every
  // head), pooled to overview_columns values of overview_block keys (their largest; NaN for a NaN
  // row) and checked (weights_check.hpp) while it is in cache: (N, H, L, C), (N, L, C) and
  // (N, H + 1, L, 4) of entropy, its maximum, |row sum - 1| and the row's kind.
  T *overview_weights = nullptr, *overview_average = nullptr, *overview_checks = nullptr;
  std::int64_t overview_block = 0, overview_columns = 0;
  int threads = 1;
  bool timing = false;
  double score_divisor = 0;  // q is divided by this (0: √d_k, torch); see Options::score_divisor
  bool as_torch = false;     // round as torch at the notebook's sizes: rounds_as_torch below
};

// Below this many multiply-adds per head's product (L·S'·d_k) torch's bmm runs its plain loop (its
// baddbmm_cpu_kernel, acc += a·b) instead of BLAS. At those sizes, the course notebook's, the
// kernels round every stage as torch does and as the reference path does (forward_reference.cpp):
// the linear layers as one fused multiply-add chain in index order (BLAS sgemm's), the scores and
// the context as a plain multiply-then-add chain, the softmax with std::exp summed in key order. It
// costs nothing that matters there, and keeps the notebook inside its allclose(atol=1e-8) on every
// instruction set; above it the kernels sum as they are fastest.
// Set as Args::as_torch from the problem's sizes, once: every path over the same problem (a row
// redone, a stage on demand, a projection of some rows) then rounds alike.
constexpr std::int64_t kTorchPlainBmm = 400;
inline bool rounds_as_torch(std::int64_t L, std::int64_t Sp, std::int64_t d_k) {
  return L * Sp * d_k < kTorchPlainBmm;
}

// One thread's share of the fused loop's time and counts; padded so threads never share a cache line.
struct alignas(64) Tally {
  double scores = 0, mask_softmax = 0, average = 0, context = 0;
  std::int64_t fully_masked_rows = 0;
};

template <class T>
struct Table {
  // Part t of `threads` of the q, k, v projections (and q / √d_k); rows S.. of k, v are left alone.
  void (*in_projection)(const Args<T>& a, int t);
  // What in_projection's part t writes for the rows flagged in q_rows ((N·L) flags), k_rows and
  // v_rows ((N·S) flags; any may be null), with the same digits; every other row is left alone.
  void (*in_projection_rows)(const Args<T>& a, int t, const char* q_rows, const char* k_rows,
                             const char* v_rows);
  // Fused tasks [task0, task1): (batch item, block of query rows) through every head.
  void (*fused)(const Args<T>& a, int thread, std::int64_t task0, std::int64_t task1, Tally* tally);
  // Rows [r0, r1) of the out-projection.
  void (*out_projection)(const Args<T>& a, std::int64_t r0, std::int64_t r1);
  // Sets Args' panel widths, packed sizes (k_group, v_group, o_size) and ld from its sizes.
  void (*plan_packing)(Args<T>& a);
  // Packs the keys (keys) and the values (values) of batch item n, key/value head g; W_o.
  void (*pack_group)(const Args<T>& a, std::int64_t n, std::int64_t g, bool keys, bool values);
  void (*pack_out)(const Args<T>& a);
};

struct Variant {
  const char* name;  // "sse2", "avx2", "avx512"
  Table<float> f32;
  Table<double> f64;
  // C[r0:r1] = A[r0:r1]·B, row-major n×n: the yardstick GEMM of `mha bench --sgemm`.
  void (*sgemm)(const float* A, const float* B, float* C, std::int64_t n, std::int64_t r0, std::int64_t r1);
  // Columns [c0, c1) of y = x·W + b, Hugging Face's Conv1D (W stored [in, out], b may be null): x
  // (rows, in), y (rows, out), row-major. With gelu, y = gelu_new(y) (GPT-2's tanh approximation)
  // after. Split by columns, each thread packs only its part of W: at a few rows, packing W is
  // most of the work.
  void (*conv1d)(const float* x, const float* W, const float* b, float* y, std::int64_t rows, std::int64_t in,
                 std::int64_t out, std::int64_t c0, std::int64_t c1, bool gelu);
  // Rows [r0, r1) of y = A·x, A row-major (rows, cols): the LM head at the last position.
  void (*gemv)(const float* A, const float* x, float* y, std::int64_t cols, std::int64_t r0, std::int64_t r1);
  // n elements of a stored weight type (kWeightF32, kWeightF16, kWeightBF16; little-endian, any
  // alignment) widened to float.
  void (*widen)(const void* src, int type, std::int64_t n, float* dst);
  // Columns [c0, c1) of y (rows, out) = x (rows, in)·Wᵀ for W (out, in) row-major of `type`: torch's
  // F.linear without bias, read in place. F16 and BF16 rows of W are widened `tile` at a time into
  // scratch (tile·in floats) and multiplied from there; F32 W (4-byte aligned) is read directly.
  void (*linear)(const float* x, const void* W, int type, float* y, std::int64_t rows, std::int64_t in,
                 std::int64_t out, std::int64_t c0, std::int64_t c1, float* scratch, std::int64_t tile);
  // Rows [r0, r1) of y = A·x for A (·, cols) of `type`, widened as linear widens W.
  void (*gemv_typed)(const void* A, int type, const float* x, float* y, std::int64_t cols, std::int64_t r0,
                     std::int64_t r1, float* scratch, std::int64_t tile);
  // How many of n stored elements of `type` are NaN or infinite.
  std::int64_t (*nonfinite)(const void* src, int type, std::int64_t n);
};

// The stored weight types the typed kernels read.
constexpr int kWeightF32 = 0, kWeightF16 = 1, kWeightBF16 = 2;

namespace sse2 {
const Variant& variant();
}
namespace avx2 {
const Variant& variant();  // AVX2 + FMA
}
namespace avx512 {
const Variant& variant();  // AVX-512 F, BW, VL, DQ + AVX2 + FMA
}

}  // namespace mha::detail::kernels
