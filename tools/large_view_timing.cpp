// Times the Large L view's frames headless (the real panel code, NullTextures, the GPU path on a
// headless EGL context): time until the map is on screen (row statistics on the view's thread +
// the first tile) and the slowest frame meanwhile, an idle frame, each
// wheel step from the fitted zoom down to exact cells, with 4 pan frames at each zoom, down to 4 px per cell.
//   build/mha_large_timing 4096        (the default scenario: N=3, E=8, H=2, as the course notebook)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "gpu/gpu_backend.hpp"
#include "panels/panels.hpp"
#include "ui_harness.hpp"

using namespace mha::app;
using namespace mha::studio;

int main(int argc, char** argv) {
  auto gpu = mha::gpu::GpuBackend::headless();
  if (!gpu->available()) {
    std::fprintf(stderr, "no GL 4.3 context: %s\n", gpu->unavailable_reason().c_str());
    return 1;
  }
  mha::test::HeadlessUi ui;
  ui.env.large_gpu = gpu.get();
  ui.env.large_device = LargeDevice::gpu;  // this tool times the GPU path, llvmpipe included
  ui.env.large_len = argc > 1 ? std::atoll(argv[1]) : 4096;
  AppState state;
  state.recompute();
  ui.settle(state);
  state.apply(mha::studio::show_view(mha::studio::ViewTab::large_l));
  auto timed = [&](ImVec2 mouse, bool down) {
    const auto t0 = std::chrono::steady_clock::now();
    ui.frame(state, mouse, down);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  const ImVec2 c(500, 300);  // over the map in a 1280x720 layout
  int exact_steps = 0;       // wheel steps at block 1: 1, 2 and 4 px per cell
  // The tab opens; the row statistics run on the view's thread while frames go on (one every 16 ms).
  const auto t_open = std::chrono::steady_clock::now();
  double worst_while_computing = 0;
  for (int f = 0; f < 100000 && !large_view_info(ui.env.panels).gpu; ++f) {
    const double ms = timed(c, false);
    if (large_view_info(ui.env.panels).computing) {
      worst_while_computing = std::max(worst_while_computing, ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(16));
    }
  }
  const double first =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_open).count();
  std::printf(
      "L=S=%lld: map on screen %.0f ms after the tab opened (row statistics + tile), block %lld; "
      "slowest frame meanwhile %.1f ms\n",
      (long long)ui.env.large_len, first, (long long)large_view_info(ui.env.panels).block,
      worst_while_computing);
  const double idle = timed(c, false);  // before the printf: argument order is unspecified
  std::printf("idle frame %.1f ms, tiles recomputed %d\n", idle,
              large_view_info(ui.env.panels).tiles_rendered);
  // Each wheel step in, then 4 pan frames (a drag of 30, 20 px each) at that zoom.
  for (int z = 0; z < 14 && large_view_info(ui.env.panels).block >= 1; ++z) {
    ImGui::GetIO().MouseWheel = 1;
    const double step = timed(c, false);
    const long long block = (long long)large_view_info(ui.env.panels).block;
    timed(c, true);  // press
    double sum = 0, worst = 0;
    for (int f = 1; f <= 4; ++f) {
      const double ms = timed(ImVec2(c.x - 30 * f, c.y - 20 * f), true);
      sum += ms;
      worst = std::max(worst, ms);
    }
    timed(c, false);  // release
    std::printf("wheel step to block %lld: %.0f ms; pan frames there: mean %.1f ms, worst %.1f ms\n", block,
                step, sum / 4, worst);
    if (block == 1 && ++exact_steps == 3) break;
  }
  return 0;
}
