// The Large L view drawn headless (NullTextures): on the CPU (the on-demand forward, tiles from
// stage_blocks) and with the GPU path on a headless EGL context (level of detail when zoomed out,
// exact cells after zooming in, no recompute while nothing moves), and the CPU taking over, with the
// reason, where the GPU is missing or fails.
// No GL 4.3 context: WARN and skip the GPU part; with CI=true in the environment: FAIL instead.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "compute.hpp"
#include "gpu/gpu_backend.hpp"
#include "panels/panels.hpp"
#include "ui_harness.hpp"

using namespace mha::app;
using namespace mha::studio;
using mha::test::HeadlessUi;

namespace {

// The headless GPU backend, or null after a WARN (FAIL under CI=true) naming the reason.
std::unique_ptr<mha::gpu::GpuBackend> headless_or_skip() {
  std::unique_ptr<mha::gpu::GpuBackend> gpu = mha::gpu::GpuBackend::headless();
  if (gpu->available()) return gpu;
  const char* ci = std::getenv("CI");
  if (ci && std::string(ci) == "true") FAIL("CI=true and no GL 4.3 context: " << gpu->unavailable_reason());
  WARN("GPU part skipped: " << gpu->unavailable_reason());
  return nullptr;
}
}  // namespace

// Frames until the view has drawn a map on `cpu` (the CPU path) or the GPU, with its work done.
void frames_until_drawn(HeadlessUi& ui, AppState& state, bool cpu, ImVec2 size = ImVec2(640, 360)) {
  for (int f = 0; f < 4000; ++f) {
    ui.frame(state, size);
    const LargeViewInfo& i = large_view_info(ui.env.panels);
    if ((cpu ? i.cpu : i.gpu) && !i.computing) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ui.frame(state, size);  // the tile that arrived is drawn
}

// N = 1, E = 16, H = 2, computed and settled, with the Large L tab asked for.
void open_small_on_large_tab(HeadlessUi& ui, AppState& state) {
  Scenario small;
  small.batch = 1;
  small.embed_dim = 16;
  small.num_heads = 2;
  state.start(small);
  state.recompute();
  ui.settle(state);
  state.apply(show_view(ViewTab::large_l));
}

TEST_CASE("Large L view: no GPU path: the CPU computes what is on screen, and says why", "[ui][large]") {
  REQUIRE(std::string(view_info(ViewTab::large_l).name) == "Large L");
  HeadlessUi ui;
  auto gpu = mha::gpu::GpuBackend::unavailable("test: no OpenGL 4.3 here");
  ui.env.large_gpu = gpu.get();
  AppState state;
  state.recompute();
  ui.settle(state);
  REQUIRE(state.result.valid());
  state.apply(show_view(ViewTab::large_l));
  const int uploads = ui.textures.uploads();
  frames_until_drawn(ui, state, true);
  CHECK_FALSE(large_view_info(ui.env.panels).gpu);
  CHECK(large_view_info(ui.env.panels).cpu);
  CHECK_FALSE(large_view_info(ui.env.panels).cpu_heatmap);
  CHECK(large_view_info(ui.env.panels).cpu_reason == "test: no OpenGL 4.3 here");
  CHECK(large_view_info(ui.env.panels).len == 1024);
  // The on-demand forward keeps q, k, v, context and the output: far below the full trace.
  CHECK(large_view_info(ui.env.panels).gpu_bytes * 8 < large_view_info(ui.env.panels).trace_bytes);
  CHECK(ui.textures.uploads() > uploads);  // the tile's texture
  // No backend at all: the same path, never a crash.
  large_view_reset(ui.env.panels);
  ui.env.large_gpu = nullptr;
  frames_until_drawn(ui, state, true);
  CHECK(large_view_info(ui.env.panels).cpu);
  CHECK_THAT(large_view_info(ui.env.panels).cpu_reason, Catch::Contains("without the GPU path"));
  large_view_reset(ui.env.panels);
}

TEST_CASE(
    "Large L view on the CPU: block LOD zoomed out, exact cells zoomed in, the reference's weight "
    "under the pointer",
    "[ui][large]") {
  HeadlessUi ui;
  ui.env.large_device = LargeDevice::cpu;
  ui.env.large_len = 1024;
  ui.env.large_causal = true;
  AppState state;
  open_small_on_large_tab(ui, state);
  frames_until_drawn(ui, state, true);
  const LargeViewInfo first = large_view_info(ui.env.panels);
  REQUIRE(first.cpu);
  CHECK(first.cpu_reason == "chosen in \"compute on\"");
  CHECK(first.block > 1);  // 1024 cells do not fit the ~500 px map: each pixel is a block
  ui.frame(state, ImVec2(640, 360));
  CHECK(large_view_info(ui.env.panels).tiles_rendered == 0);  // nothing moved: no recompute
  // Zoom in with the wheel until the cells are exact; each step computes a new tile.
  for (int step = 0; step < 6 && large_view_info(ui.env.panels).block > 1; ++step) {
    ImGui::GetIO().MouseWheel = 1;
    ui.frame(state, ImVec2(640, 360));
    frames_until_drawn(ui, state, true);
  }
  REQUIRE(large_view_info(ui.env.panels).block == 1);
  const LargeViewInfo info = large_view_info(ui.env.panels);
  REQUIRE(info.hover_i >= 0);
  REQUIRE(info.hover_j >= 0);
  // The hovered cell's value is the reference path's weight at the (q, k) the view names.
  Scenario s = state.scenario();
  s.tgt_len = s.src_len = 1024;
  s.separate_qkv = false;
  Built b = build_forward(s);
  mha::Mask<float> causal;
  causal.values = mha::Tensor<float>({1024, 1024});
  for (std::int64_t i = 0; i < 1024; ++i)
    for (std::int64_t j = i + 1; j < 1024; ++j) causal.values.data[std::size_t(i * 1024 + j)] = 1;
  b.inputs.attn_mask = causal;
  mha::Options o = b.options;
  o.backend = mha::Backend::eigen;
  o.stages = {"output"};
  const mha::ForwardResult<float> od = mha::forward(b.config, b.weights, b.inputs, o);
  const float want =
      mha::stage_rows(od, "attn_weights", 0, 0, info.hover_i, 1).data[std::size_t(info.hover_j)];
  CHECK(info.hover_value == want);  // the same on-demand arithmetic: bit for bit
  large_view_reset(ui.env.panels);
}

TEST_CASE("Large L view on the GPU: block LOD zoomed out, exact cells zoomed in", "[ui][large][gpu]") {
  std::unique_ptr<mha::gpu::GpuBackend> gpu = headless_or_skip();
  if (!gpu) return;
  HeadlessUi ui;
  ui.env.large_gpu = gpu.get();
  ui.env.large_device = LargeDevice::gpu;  // auto computes on the CPU where the GPU is llvmpipe
  ui.env.large_len = 1024;
  AppState state;
  open_small_on_large_tab(ui, state);
  // The row statistics are computed on the view's own thread; frames go on meanwhile.
  bool computing_seen = false;
  for (int f = 0; f < 4000 && !large_view_info(ui.env.panels).gpu; ++f) {
    ui.frame(state, ImVec2(640, 360));
    computing_seen = computing_seen || large_view_info(ui.env.panels).computing;
    if (large_view_info(ui.env.panels).computing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(computing_seen);
  const LargeViewInfo first = large_view_info(ui.env.panels);
  REQUIRE(first.gpu);
  CHECK(first.len == 1024);
  CHECK(first.block > 1);  // 1024 cells do not fit the ~500 px map: each pixel is a block
  // q, k, v and the row statistics only: far below the full trace's (N, H, L, S) stages.
  CHECK(first.gpu_bytes * 8 < first.trace_bytes);
  ui.frame(state, ImVec2(640, 360));
  CHECK(large_view_info(ui.env.panels).tiles_rendered == 0);  // nothing moved: no recompute, no read-back
  // Zoom in with the wheel until the cells are exact.
  for (int step = 0; step < 6 && large_view_info(ui.env.panels).block > 1; ++step) {
    ImGui::GetIO().MouseWheel = 1;
    ui.frame(state, ImVec2(640, 360));
    CHECK(large_view_info(ui.env.panels).tiles_rendered == 1);
  }
  CHECK(large_view_info(ui.env.panels).block == 1);
  CHECK(large_view_info(ui.env.panels).gpu);
  large_view_wait(ui.env.panels);
}

TEST_CASE("Large L view: the GPU path fails while preparing: the CPU computes it, and says why",
          "[ui][large][gpu]") {
  std::unique_ptr<mha::gpu::GpuBackend> gpu = headless_or_skip();
  if (!gpu) return;
  gpu->set_max_buffer_bytes(4096);  // the (N, L, E) inputs at L = 1024 do not fit: DeviceError
  HeadlessUi ui;
  ui.env.large_gpu = gpu.get();
  ui.env.large_device = LargeDevice::gpu;
  ui.env.large_len = 1024;
  AppState state;
  state.recompute();
  ui.settle(state);
  state.apply(show_view(ViewTab::large_l));
  for (int f = 0;
       f < 4000 && (f < 2 || large_view_info(ui.env.panels).computing || !large_view_info(ui.env.panels).cpu);
       ++f) {
    REQUIRE(ui.frame(state) > 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK_FALSE(large_view_info(ui.env.panels).gpu);
  CHECK(large_view_info(ui.env.panels).cpu);
  CHECK_THAT(large_view_info(ui.env.panels).cpu_reason,
             Catch::StartsWith("the GPU path failed") && Catch::Contains("GL_MAX_SHADER_STORAGE_BLOCK_SIZE"));
  large_view_reset(ui.env.panels);
}

// The screen-to-cell mapping end to end: the value the view reads back under the pointer is the
// reference path's attn_weights at the (q, k) the view names, on the same problem.
TEST_CASE("Large L view: the hovered cell's value is the reference's weight there", "[ui][large][gpu]") {
  std::unique_ptr<mha::gpu::GpuBackend> gpu = headless_or_skip();
  if (!gpu) return;
  HeadlessUi ui;
  ui.env.large_gpu = gpu.get();
  ui.env.large_device = LargeDevice::gpu;
  ui.env.large_len = 256;  // fits the map at 1 px per cell or more: exact cells
  AppState state;
  Scenario two;
  two.batch = 2;
  state.start(two);
  state.recompute();
  ui.settle(state);
  state.apply(show_view(ViewTab::large_l));
  for (int f = 0; f < 4000 && !large_view_info(ui.env.panels).gpu; ++f) {
    ui.frame(state, ImVec2(600, 380));
    if (large_view_info(ui.env.panels).computing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ui.frame(state, ImVec2(600, 380));
  const LargeViewInfo info = large_view_info(ui.env.panels);
  REQUIRE(info.gpu);
  REQUIRE(info.block == 1);
  REQUIRE(info.hover_i >= 0);
  REQUIRE(info.hover_j >= 0);
  // The view's problem: the scenario at L = S = 256, self-attention, no mask (large.cpp).
  Scenario s = state.scenario();
  s.tgt_len = s.src_len = 256;
  s.separate_qkv = false;
  const Built b = build_forward(s);
  mha::Options o = b.options;
  o.backend = mha::Backend::reference;
  const mha::ForwardResult<float> ref = mha::forward(b.config, b.weights, b.inputs, o);
  const float want = ref.trace["attn_weights"].at({0, 0, info.hover_i, info.hover_j});  // batch 0, head 0
  CHECK_THAT(info.hover_value,
             Catch::Matchers::WithinAbs(want, 1e-6) || Catch::Matchers::WithinRel(want, 1e-5f));
  large_view_reset(ui.env.panels);
}
