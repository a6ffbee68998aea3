// The Eigen path's kernels are compiled once per instruction set and picked at run time
// (engine/cpu_dispatch.hpp). Every copy this CPU can run is checked here against the reference,
// threaded, with masks, extras and grouped-query heads; ctest also runs the whole case table under
// MHA_CPU=sse2 and MHA_CPU=avx2 (CMakeLists.txt).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "cpu_dispatch.hpp"
#include "errors.hpp"
#include "fixtures.hpp"
#include "masks.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;

namespace {

// Big enough to start threads and span several blocks of query rows (L = 300, not a multiple of a
// block), S != L, a causal mask and padding that blocks every key of batch item 1 (NaN rows).
template <class T>
void check_kernels_against_reference(const std::string& kernels, std::int64_t heads, std::int64_t kv_heads,
                                     bool extras, double atol, double rtol) {
  Config c;
  c.embed_dim = 64;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  const std::int64_t N = 3, L = 300, S = 70;
  SeededCase<T> sc = torch_seeded_case<T>(c, 5, N, L, S);
  if (extras) {
    c.add_zero_attn = true;
    c.add_bias_kv = true;
    sc.weights.bias_k = Tensor<T>({1, 1, c.kv_embed_dim()}, T(0.25));
    sc.weights.bias_v = Tensor<T>({1, 1, c.kv_embed_dim()}, T(-0.5));
  }
  sc.inputs.attn_mask = causal_mask<T>(L, S);
  sc.inputs.key_padding_mask = key_padding_from_lengths<T>({S, 0, S / 2}, S);
  Options o;
  o.backend = Backend::reference;
  const ForwardResult<T> ref = forward(c, sc.weights, sc.inputs, o);
  o.backend = Backend::eigen;
  o.threads = 2;
  detail::ScopedCpuKernels use(kernels);
  REQUIRE(std::string(cpu_kernels()) == kernels);
  const ForwardResult<T> fast = forward(c, sc.weights, sc.inputs, o);
  REQUIRE(fast.trace.stages.size() == ref.trace.stages.size());
  for (std::size_t i = 0; i < ref.trace.stages.size(); ++i) {
    INFO("kernels " << kernels << ", stage " << ref.trace.stages[i].name);
    CHECK(mismatch(fast.trace.stages[i].contiguous(), ref.trace.stages[i].contiguous(), atol, rtol) == "");
  }
  CHECK(fast.fully_masked_rows == ref.fully_masked_rows);
}

}  // namespace

TEST_CASE("the kernels in use are the best this CPU runs, or the ones MHA_CPU names", "[cpu]") {
  const std::vector<std::string> supported = cpu_kernels_supported();
  REQUIRE(!supported.empty());
  CHECK(supported.front() == "sse2");  // every x86-64 runs it
  const char* env = std::getenv("MHA_CPU");
  if (env && *env) {
    // ctest's MHA_CPU runs: an unsupported name is reported as skipped there (SKIP_REGULAR_EXPRESSION
    // on the engine's stderr note), so here it must have been honoured.
    CHECK(std::string(cpu_kernels()) == env);
  } else {
    CHECK(std::string(cpu_kernels()) == supported.back());
  }
  CHECK_THROWS_AS(detail::ScopedCpuKernels("avx9000"), ConfigError);
}

TEST_CASE("every kernel copy this CPU runs agrees with the reference", "[cpu]") {
  for (const std::string& k : cpu_kernels_supported()) {
    check_kernels_against_reference<double>(k, 4, 4, false, 1e-12, 1e-10);
    check_kernels_against_reference<double>(k, 8, 2, true, 1e-12, 1e-10);  // grouped-query heads
    check_kernels_against_reference<float>(k, 4, 4, true, 1e-6, 1e-5);     // the table test's tolerance
  }
}

TEST_CASE("the yardstick GEMM of every kernel copy computes A·B", "[cpu]") {
  const std::int64_t n = 70;
  std::vector<float> A(std::size_t(n * n)), B(A.size()), C(A.size()), want(A.size(), 0.0f);
  for (std::size_t i = 0; i < A.size(); ++i) {
    A[i] = float(int(i % 7) - 3) * 0.5f;
    B[i] = float(int(i % 5) - 2) * 0.25f;
  }
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < n; ++k)
      for (std::int64_t j = 0; j < n; ++j)
        want[std::size_t(i * n + j)] += A[std::size_t(i * n + k)] * B[std::size_t(k * n + j)];
  for (const std::string& k : cpu_kernels_supported()) {
    detail::ScopedCpuKernels use(k);
    std::fill(C.begin(), C.end(), -1.0f);
    sgemm_rows(A.data(), B.data(), C.data(), n, 0, 30);
    sgemm_rows(A.data(), B.data(), C.data(), n, 30, n);
    INFO("kernels " << k);
    CHECK(C == want);  // small integers times powers of two: exact in any summation order
  }
}
