// `mha gpu-check`: runs the GPU path's self-check (known-answer problems on the GPU and on the
// reference path, GpuBackend::self_check) on a headless GL context and prints the driver, every
// case's largest difference per stage, and the verdict. Exit 0: the GPU path is trusted on this
// driver; 1: refused (or no GPU path at all); 2: usage error.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#ifdef MHA_HAS_GPU
#include "gpu/gpu_backend.hpp"
#endif

namespace mha::cli {

namespace {

struct GpuCheckArgs {
  std::string tile, local_size;  // parsed here, so that a bad value exits 2 like any usage error
  bool calibrate = false;
};

// A positive int no larger than 1024 (GL's largest guaranteed work-group side), or -1.
int parse_size(const std::string& text) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  const int v = std::stoi(text);
  return v >= 1 && v <= 1024 ? v : -1;
}

}  // namespace

std::function<int()> add_gpu_check(CLI::App& app) {
  auto a = std::make_shared<GpuCheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gpu-check", "Run the GPU path's self-check: known-answer cases on the GPU against the reference path");
  cmd->allow_extras();  // reported here, with exit status 2
  cmd->add_option("--tile", a->tile, "work-group tile side (TILE) to check instead of the default 16");
  cmd->add_option("--local-size", a->local_size,
                  "work-group size of the row reductions (LOCAL_SIZE) instead of the default 256");
  cmd->add_flag("--calibrate", a->calibrate,
                "then time output-only forwards on the GPU and the CPU, as --backend auto does before it "
                "first chooses the GPU, and print where auto would choose which (seconds on llvmpipe)");
  return [a, cmd]() -> int {
    if (!cmd->remaining().empty()) {
      std::fprintf(stderr, "mha gpu-check: unknown argument %s\n", cmd->remaining().front().c_str());
      return 2;
    }
#ifdef MHA_HAS_GPU
    gpu::LaunchSizes sizes;
    for (auto [text, name, into] : {std::make_tuple(a->tile, "--tile", &sizes.tile),
                                    std::make_tuple(a->local_size, "--local-size", &sizes.local_size)}) {
      if (text.empty()) continue;
      *into = parse_size(text);
      if (*into < 0) {
        std::fprintf(stderr, "mha gpu-check: %s %s: expected an integer from 1 to 1024\n", name,
                     text.c_str());
        return 2;
      }
    }
    std::unique_ptr<gpu::GpuBackend> backend = gpu::GpuBackend::headless(sizes);
    const gpu::SelfCheckReport r = backend->self_check();
    std::printf("GL vendor:    %s\n", r.vendor.empty() ? "(no context)" : r.vendor.c_str());
    std::printf("GL renderer:  %s\n", r.renderer.empty() ? "(no context)" : r.renderer.c_str());
    std::printf("GL version:   %s\n", r.version.empty() ? "(no context)" : r.version.c_str());
    std::printf("context:      %s\n", r.context.empty() ? "(none)" : r.context.c_str());
    std::printf("launch sizes: TILE=%d, LOCAL_SIZE=%d, MM_TILE=%d, MM_WORK=%d, MM_DEPTH=%d\n", r.sizes.tile,
                r.sizes.local_size, r.sizes.product_tile, r.sizes.product_work, r.sizes.product_depth);
    for (const gpu::SelfCheckReport::Case& k : r.cases) {
      std::printf("\ncase %s: %s\n", k.name.c_str(), k.what.c_str());
      for (const gpu::SelfCheckReport::Stage& st : k.stages)
        std::printf("  %-20s max |diff| %-10.3g %s%s\n", st.name.c_str(), st.max_abs_diff,
                    st.first_mismatch.empty() ? "ok" : "MISMATCH: ", st.first_mismatch.c_str());
    }
    std::printf("\nself-check took %.0f ms (tolerance atol 1e-6 + rtol 1e-6 x |reference|)\n",
                r.milliseconds);
    if (r.trusted) {
      std::printf("verdict: trusted: every stage of every case agrees with the reference path\n");
      if (a->calibrate) {
        // The calibration prefers() runs, then its choice at the bench's named sizes.
        const gpu::AutoCalibration cal = backend->calibrate_auto();
        Config c;
        std::printf("\nauto calibration (%.0f ms): %s\n", cal.milliseconds, cal.why.c_str());
        if (!cal.done) return 1;
        std::printf("%-8s %14s %14s %14s  %s\n", "size", "multiply-adds", "gpu ms (pred)", "cpu ms (pred)",
                    "auto, output only");
        for (auto [name, E, H, L] :
             {std::make_tuple("medium", 512, 8, 512), std::make_tuple("large", 512, 8, 2048),
              std::make_tuple("xl", 1024, 16, 4096)}) {
          c.embed_dim = E;
          c.num_heads = H;
          const double m = gpu::forward_multiply_adds(dims_for(c, 1, L, L));
          std::printf("%-8s %14.3g %14.3f %14.3f  %s\n", name, m, cal.gpu_ms(m), cal.cpu_ms(m),
                      backend->prefers(dims_for(c, 1, L, L), false) ? "gpu" : "cpu");
        }
        std::printf(
            "(auto never chooses a software renderer, whatever these say, nor the GPU for a full trace)\n");
      }
      return 0;
    }
    std::printf("verdict: refused: %s\n", r.reason.c_str());
    return 1;
#else
    std::printf("verdict: refused: this mha was built without the GPU path (MHA_BUILD_GPU=OFF)\n");
    return 1;
#endif
  };
}

}  // namespace mha::cli
