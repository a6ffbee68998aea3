// How fast two threads can stream bytes out to memory with non-temporal stores, as the Eigen path
// writes the trace's big arrays (docs/performance.md, "Floors": what bounds a full-trace forward).
// A measurement, not a test.
//   build/mha_stream_bw [MiB=512] [threads=2]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace {

void fill(float* p, std::size_t n) {  // n floats; p 16-byte aligned, n a multiple of 4
#if defined(__SSE2__)
  const __m128 one = _mm_set1_ps(1.0f);
  for (std::size_t i = 0; i < n; i += 4) _mm_stream_ps(p + i, one);
  _mm_sfence();
#else
  for (std::size_t i = 0; i < n; ++i) p[i] = 1.0f;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 512;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  if (mib == 0 || threads < 1) {
    std::fprintf(stderr, "usage: mha_stream_bw [MiB > 0] [threads >= 1]\n");
    return 2;
  }
  const std::size_t n = mib << 18;  // floats
  std::vector<float> buffer(n + 16);
  float* p = buffer.data() + (16 - reinterpret_cast<std::uintptr_t>(buffer.data()) % 64 / 4) % 16;
  std::printf("%zu MiB, %d threads, %s stores\n", mib, threads,
#if defined(__SSE2__)
              "non-temporal"
#else
              "plain"
#endif
  );
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
      pool.emplace_back(fill, p + n / 4 * t / threads * 4,
                        n / 4 * (t + 1) / threads * 4 - n / 4 * t / threads * 4);
    fill(p, n / 4 / threads * 4);
    for (std::thread& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  %.1f ms, %.1f GB/s\n", s * 1e3, double(n * sizeof(float)) / s / 1e9);
  }
  return p[n - 1] == 1.0f ? 0 : 1;
}
