// A real GL_OUT_OF_MEMORY from the driver, not a simulated one: after a first GPU forward has built
// the shaders, the process's address space is capped (RLIMIT_AS, soft limit) a few MiB above what
// it maps now, so the driver's allocation for the next, larger forward fails (llvmpipe keeps
// buffers in host memory; a hardware driver maps them). The engine must fall back to the CPU with
// the reason, into the workspace allocated before the cap, and give the CPU's numbers; once the
// cap is lifted the same backend computes on the GPU again. Its own executable: the cap is
// process-wide. Under ASan/TSan (their allocators reserve terabytes and abort when a map fails)
// the case WARNs and returns; the default build runs it in ctest.
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "fixtures.hpp"
#include "gpu/gpu_backend.hpp"
#include "torch_rng.hpp"

using namespace mha;
using namespace mha::test;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Bytes of address space mapped now (VmSize in /proc/self/status).
std::uint64_t mapped_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  std::uint64_t kib = 0;
  while (f >> key) {
    if (key == "VmSize:") {
      f >> kib;
      return kib * 1024;
    }
    f.ignore(1 << 20, '\n');
  }
  FAIL("no VmSize in /proc/self/status");
  return 0;
}

// Caps RLIMIT_AS (the soft limit only, so that it can be lifted again) for its lifetime.
struct AddressSpaceCap {
  rlimit saved{};
  explicit AddressSpaceCap(std::uint64_t bytes) {
    REQUIRE(getrlimit(RLIMIT_AS, &saved) == 0);
    rlimit capped = saved;
    capped.rlim_cur = rlim_t(bytes);
    REQUIRE(setrlimit(RLIMIT_AS, &capped) == 0);
  }
  ~AddressSpaceCap() { setrlimit(RLIMIT_AS, &saved); }
};

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

}  // namespace

TEST_CASE("GPU out of memory (a real GL_OUT_OF_MEMORY): the CPU result, the reason, then the GPU again",
          "[gpu]") {
  if (kSanitized) {
    WARN("skipped under a sanitizer: its allocator aborts when the capped address space runs out");
    return;
  }
  std::unique_ptr<gpu::GpuBackend> gpu = gpu::GpuBackend::headless();
  if (!gpu->available()) {
    if (in_ci()) FAIL("CI=true and no GL 4.3 context: " << gpu->unavailable_reason());
    WARN("skipped: " << gpu->unavailable_reason());
    return;
  }
  Config c;
  c.embed_dim = 32;
  c.num_heads = 4;
  Options o;
  o.device = gpu.get();

  // Shaders built and the context's own memory mapped, on a small problem.
  const SeededCase<float> small = torch_seeded_case<float>(c, 3, 1, 8, 8);
  o.backend = Backend::gpu;
  REQUIRE(forward(c, small.weights, small.inputs, o).backend == Backend::gpu);

  // (1, 4, 1024, 1024) scores, weights, ...: the GPU buffers need about 50 MiB, far past the cap.
  const SeededCase<float> big = torch_seeded_case<float>(c, 5, 1, 1024, 1024);
  Workspace<float> ws;
  ForwardResult<float> cpu, r;
  o.backend = Backend::eigen;
  forward(c, big.weights, big.inputs, o, ws, cpu);
  o.backend = Backend::gpu;
  forward(c, big.weights, big.inputs, o, ws, r);  // the workspace's buffers, mapped before the cap
  REQUIRE(r.backend == Backend::gpu);
  gpu->release_buffers();  // the next forward must allocate its GPU buffers again

  {
    const AddressSpaceCap cap(mapped_bytes() + (8u << 20));
    forward(c, big.weights, big.inputs, o, ws, r);
  }
  INFO("renderer: " << gpu->renderer());
  CHECK(r.backend == Backend::eigen);
  CHECK_THAT(r.fallback_reason, Catch::Contains("GL_OUT_OF_MEMORY"));
  CHECK(mismatch(r.output(), cpu.output(), 0, 0) == "");
  CHECK(mismatch(r.attn_weights(false), cpu.attn_weights(false), 0, 0) == "");

  // Memory is back: the same backend computes on the GPU, with the GPU's tolerance.
  forward(c, big.weights, big.inputs, o, ws, r);
  CHECK(r.backend == Backend::gpu);
  CHECK(r.fallback_reason == "");
  CHECK(mismatch(r.output(), cpu.output(), 1e-6, 1e-5) == "");
}
