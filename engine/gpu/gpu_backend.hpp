// The GPU path: mha::DeviceForward on GLSL 4.30 compute shaders (shaders/*.comp). It fills the
// engine's buffers for float32 forwards, so the trace is the CPU paths' trace; every failure (no
// GL 4.3 context, a shader that fails to build, buffers past the device's limits, GL_OUT_OF_MEMORY,
// a driver that fails the self-check) is a DeviceError, on which the engine computes on the CPU and
// reports the reason.
// Its users see no GL header: GL object names are GlName here (GLuint, checked in gpu_backend.cpp),
// and only engine/gpu/*.cpp include libepoxy.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mha.hpp"

namespace mha::gpu {

class EglContext;
struct Program;

// A GL object name (a buffer, a texture): GLuint, without the GL header.
using GlName = unsigned int;

// Work-group sizes, injected into the shaders as #defines when they are built. Any positive values
// within the device's limits give the same numbers up to summation order; tests vary them to shake
// out code that assumes one size (shaders/softmax.comp's reductions take any LOCAL_SIZE).
struct LaunchSizes {
  int tile = 16;         // TILE: the large-L tile and block shaders run TILE x TILE
  int local_size = 256;  // LOCAL_SIZE: softmax and row_stats (one work-group per row), concat, average
  // The matrix products (linear, scores, context): MM_TILE x MM_TILE outputs per work-group, MM_WORK x
  // MM_WORK of them per invocation, so (MM_TILE / MM_WORK)² invocations (MM_THREADS per side); the
  // operands go through shared memory MM_DEPTH channels (scores) or keys (context) at a time.
  int product_tile = 64;   // MM_TILE, a multiple of product_work
  int product_work = 4;    // MM_WORK
  int product_depth = 16;  // MM_DEPTH
};

// What GpuBackend::self_check found: the driver, and for every known-answer case and stage the
// largest |GPU − reference| and the first value outside atol 1e-6 + rtol 1e-6·|reference| (NaN and
// ±inf must sit in the same places), the tolerance of tests/test_gpu.cpp.
struct SelfCheckReport {
  std::string vendor, renderer, version, context;  // GL_VENDOR, GL_RENDERER, GL_VERSION; EGL/app
  LaunchSizes sizes;
  struct Stage {
    std::string name;            // "attn_weights", "row_lse", "fully_masked_rows"
    double max_abs_diff = 0;     // over the finite pairs; inf where NaN/inf places differ
    std::string first_mismatch;  // "" when every value is within tolerance
  };
  struct Case {
    std::string name;  // "tiles"
    std::string what;  // the sizes and features it covers
    std::vector<Stage> stages;
  };
  std::vector<Case> cases;
  bool completed = false;  // every case ran on the GPU (false: `reason` says why the check could not)
  bool trusted = false;
  // Refused: "GPU self-check failed on <renderer> (OpenGL <version>): case tiles, stage
  // attn_weights, index 1 = [0, 0, 0, 1] of (2, 2, 37, 263): got ..., expected ... (|diff| ...,
  // allowed ...); the GPU path is not used on this driver". Or why the check could not run.
  std::string reason;
  double milliseconds = 0;  // the whole check, GPU and reference
};

// Backend::automatic runs on the GPU only when the caller reads a subset of the stages
// (Options::stages: with every stage read back the GPU lost to the CPU at every size on an NVIDIA
// H100, the read-back being most of it; docs/performance.md, "GPU path"), on a hardware GPU whose
// driver passed the self-check, and where this machine's own timings say the GPU is faster: the
// first such question times both paths (AutoCalibration) and the answer follows from them. Below
// this many multiply-adds the GPU is not even asked (a teaching-sized forward takes microseconds on
// the CPU, and no GPU dispatch is that short).
constexpr double kAutoMinMultiplyAdds = 1e6;

// What `auto` measured on this machine: each path's time for an output-only forward as
// fixed + per_madd · multiply-adds, fitted through two problems (the best of three runs each, after
// a warm-up), so that prefers() compares predicted times rather than a threshold set elsewhere.
struct AutoCalibration {
  bool done = false;  // measured (false: `why` says why not, and auto keeps to the CPU)
  std::string why;    // why not measured, or a one-line summary of what was
  double gpu_fixed_ms = 0, gpu_ms_per_madd = 0;
  double cpu_fixed_ms = 0, cpu_ms_per_madd = 0;
  double crossover_madds = 0;  // where the predicted times meet (inf: the CPU is faster at every size)
  double milliseconds = 0;     // the calibration's own cost
  // The predicted times of one forward of `madds` multiply-adds.
  double gpu_ms(double madds) const { return gpu_fixed_ms + gpu_ms_per_madd * madds; }
  double cpu_ms(double madds) const { return cpu_fixed_ms + cpu_ms_per_madd * madds; }
};

// Multiply-adds of one forward at these sizes: N·L·E·E (q) + 2·N·S·kdim·G·d_k (k, v)
// + 2·N·H·L·S'·d_k (scores, weights·v) + N·L·E·E (out).
double forward_multiply_adds(const Dims& d);

class GpuBackend : public DeviceForward {
 public:
  // A headless EGL context of its own (CLI, tests). Never throws: when no context can be made the
  // backend is unavailable and every forward falls back with that reason.
  static std::unique_ptr<GpuBackend> headless(LaunchSizes sizes = {});
  // The caller's context (the app's hidden GLFW context): `make_current` is called on the thread
  // of each forward before any GL call, and `release` after its last, so that the context is
  // never left current on a thread that may end (a context is current on one thread at a time).
  static std::unique_ptr<GpuBackend> with_context(std::function<void()> make_current,
                                                  std::function<void()> release, std::string description,
                                                  LaunchSizes sizes = {});
  // No context could be made (the app's GL 4.3 context failed): every forward falls back with `why`.
  static std::unique_ptr<GpuBackend> unavailable(std::string why);
  ~GpuBackend() override;

  const char* name() const override { return "gpu"; }
  // A full trace, or below kAutoMinMultiplyAdds: no, without touching GL. A software renderer
  // (llvmpipe, softpipe), an unavailable context or a refused driver: no. Otherwise the first call
  // runs calibrate_auto() (about 0.1-0.3 s on a hardware GPU, once per backend) and the answer is
  // whether the GPU's predicted time is the smaller. See kAutoMinMultiplyAdds.
  bool prefers(const Dims& d, bool full_trace = true) override;
  // Times output-only forwards of two sizes (`small` and `large`, e.g. (1, 64, 64, 4) and
  // (1, 512, 512, 8)) on the GPU and on the Eigen path with `threads` (Options::threads), the
  // self-check first, and keeps the fit for prefers(). Runs on software renderers too when called
  // directly (mha gpu-check --calibrate, the tests); prefers() never calls it there. Never throws.
  AutoCalibration calibrate_auto(const Dims& small, const Dims& large, int threads = 0);
  // The same on the two problems prefers() uses: (1, 64, 64) with E = 64, H = 4 and (1, 512, 512)
  // with E = 512, H = 8.
  AutoCalibration calibrate_auto();
  const AutoCalibration& auto_calibration() const { return calibration_; }
  // With `times`, each phase ends in glFinish so that its wall time can be taken (slower overall);
  // reading the stages back is its own phase (read_back). threads is 0: the GPU's own.
  // Only the stages asked for (Options::stages) are copied back; all of them stay on the GPU for
  // read_stage.
  // The first forward (or prepare_rows) on a driver runs self_check() first; see there.
  void forward(const detail::Problem<float>& p, detail::Buffers<float>& b, StageTimes* times) override;

  // The known-answer check that decides whether this driver's numbers can be trusted: small
  // problems that cross every tile and work-group edge (L past TILE, S' past LOCAL_SIZE, d_k and E
  // past TILE, ragged), float and bool masks with key_padding_mask, a fully masked row under both
  // policies, GQA, add_bias_kv, add_zero_attn, and the large-L row statistics and tiles, each run on
  // the GPU and on the reference path and compared stage by stage at the tests' tolerance. Run
  // once per process for each driver (vendor, renderer, version, launch sizes): a forward or
  // prepare_rows on a refused driver throws DeviceError with the report's reason, so gpu and auto
  // compute on the CPU and say why. Calling it runs the check again and records its verdict.
  // It takes 0.15-0.25 s on llvmpipe (docs/architecture.md, "GPU memory and synchronisation
  // rules"). Never throws: where the check cannot run (no context, a shader that does not build)
  // the report says why, and no verdict is recorded, so the next forward tries again.
  SelfCheckReport self_check();

  // Large L without the (N, H, L, S') stages (the FlashAttention idea): projects q and k on the
  // GPU and keeps only each row's max and log-sum-exp of scores_masked; weights_tile then
  // recomputes exactly the attn_weights tile asked for, weight = exp(s·q_i·k_j + mask − lse_i).
  // float32; the mask is held merged, as the engine merges it (a (L, S) mask is L·S floats). The
  // scores' divisor is Options::score_divisor's where one is set (the what-if), as on the CPU.
  // Throws the engine's input errors, or DeviceError (no CPU fallback here). A forward() in
  // between reuses the buffers: call prepare_rows again before the next tile.
  struct RowStats {
    Tensor<float> row_max;  // (N, H, L)  -inf where every key is blocked
    Tensor<float> row_lse;  // (N, H, L)  log Σ_j exp(scores_masked[n, h, i, j])
  };
  RowStats prepare_rows(const Config& c, const Weights<float>& w, const Inputs<float>& in, const Options& o);
  // attn_weights[n, h, i0 : i0 + rows, j0 : j0 + cols], (rows, cols); throws ConfigError outside.
  Tensor<float> weights_tile(std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t rows,
                             std::int64_t j0, std::int64_t cols);
  // Level of detail for a zoomed-out map: (out_rows, out_cols), each the max or the mean of the
  // block×block patch of attn_weights[n, h] from (i0 + r·block, j0 + c·block), clipped at L and S'
  // (a ragged edge block reduces the cells it has); a patch holding a NaN weight is NaN. block 1
  // gives exactly weights_tile. Throws ConfigError outside, DeviceError as weights_tile.
  enum class BlockReduce { max, mean };
  Tensor<float> weights_blocks(std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t j0,
                               std::int64_t block, std::int64_t out_rows, std::int64_t out_cols,
                               BlockReduce r);
  // The same values drawn through `lut` (256 RGBA8 colours, R in the low byte, t = (v − vmin) /
  // (vmax − vmin)) into an RGBA8 texture (out_cols wide, out_rows tall, top row first) that the
  // backend owns and reuses; NaN patches get nan_rgba, patches with every key blocked blocked_rgba.
  // log_decades > 0: t = 1 + log10(v / vmax) / log_decades instead (small weights stay visible).
  // Nothing is read back: the GL name is valid in every context sharing objects with this one, and
  // the texture is complete (glFinish) when this returns.
  GlName weights_blocks_texture(std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t j0,
                                std::int64_t block, std::int64_t out_rows, std::int64_t out_cols,
                                BlockReduce r, const std::uint32_t* lut, float vmin, float vmax,
                                std::uint32_t nan_rgba, std::uint32_t blocked_rgba, int log_decades = 0);
  // One (batch item, head) slice of a stage the last forward() left on the GPU, read back now
  // whether or not the forward copied it: "scores", "scores_scaled", "scores_masked",
  // "attn_weights" (L, S') or "context" (L, d_k); "attn_weights_avg" (L, S') with h = 0. Throws
  // ConfigError for another name, an index outside, or when no forward's stages are there (none
  // yet, or prepare_rows / release_buffers since); DeviceError on a GL failure.
  Tensor<float> read_stage(const std::string& stage, std::int64_t n, std::int64_t h);
  // Bytes of every GPU buffer this backend holds now.
  std::uint64_t buffer_bytes() const;
  // Frees every GPU buffer (the shaders stay built); the next forward allocates afresh.
  void release_buffers();

  bool available() const { return unavailable_.empty(); }
  const std::string& unavailable_reason() const { return unavailable_; }
  // "llvmpipe (LLVM 15.0.6, 256 bits), OpenGL 4.5 (Core Profile) Mesa 22.3.6; EGL surfaceless
  // (Mesa)"; known after the first forward that reached the context.
  const std::string& renderer() const { return renderer_; }
  // Whether the context is a software renderer (llvmpipe, softpipe), asking GL first if it was not
  // asked yet; false when no context can be had (available() then says so).
  bool software_renderer();
  const LaunchSizes& launch_sizes() const { return sizes_; }
  // Refuse buffers above this many bytes even where the device allows more (tests of the
  // out-of-memory fallback); 0: the device's GL_MAX_SHADER_STORAGE_BLOCK_SIZE only.
  void set_max_buffer_bytes(std::uint64_t bytes) { max_buffer_bytes_ = bytes; }

 private:
  explicit GpuBackend(LaunchSizes sizes);
  void probe();  // context current, GL 4.3 checked, renderer and limits known; throws DeviceError
  void bind();   // probe() + launch sizes checked + programs built; throws DeviceError
  // Throws DeviceError unless this driver passed self_check (running it the first time).
  void ensure_trusted();
  SelfCheckReport run_self_check();                       // the cases; the caller holds the verdicts' lock
  std::string driver_key() const;                         // what a verdict is recorded under
  const Program& program(const std::string& name) const;  // built by bind()
  // The inputs, weights and mask on the GPU, and the q, k, v buffers the projections fill.
  struct Projected {
    GlName query = 0, key = 0, value = 0, w_q = 0, w_k = 0, w_v = 0, w_o = 0, b_q = 0, b_k = 0, b_v = 0,
           b_o = 0;
    GlName bias_k = 0, bias_v = 0, mask = 0, q = 0, k = 0, v = 0;
  };
  Projected upload_inputs(const detail::Problem<float>& p);
  void project(const detail::Problem<float>& p, const Projected& r);  // q, k, v + bias_k / zero rows
  void run_linear(GlName x, GlName w, GlName bias, GlName y, std::int64_t rows, std::int64_t in,
                  std::int64_t out, bool has_bias, std::int64_t src_block, std::int64_t dst_block);
  GlName buffer(const std::string& name, std::uint64_t bytes);  // sized SSBO, reused across forwards
  GlName upload(const std::string& name, const float* data, std::uint64_t count);

  std::unique_ptr<EglContext> egl_;
  std::function<void()> make_current_, release_;
  std::string context_description_, unavailable_, renderer_, build_error_;
  std::string gl_vendor_, gl_renderer_, gl_version_;
  LaunchSizes sizes_;
  bool software_ = false;  // llvmpipe / softpipe
  AutoCalibration calibration_;
  bool calibrating_ = false;  // calibrate_auto's own forwards are running
  bool programs_built_ = false;
  bool trusted_ = false;   // this driver passed self_check
  bool checking_ = false;  // self_check's own forwards are running
  std::uint64_t max_buffer_bytes_ = 0, device_max_block_ = 0;
  int max_invocations_ = 0, max_size_x_ = 0, max_size_y_ = 0, max_shared_bytes_ = 0;
  std::map<std::string, std::unique_ptr<Program>> programs_;  // "linear", "softmax_nan", ...
  GlName params_buffer_ = 0;                                  // each dispatch's Params block
  struct Ssbo {
    GlName id = 0;
    std::uint64_t bytes = 0;
  };
  std::map<std::string, Ssbo> buffers_;
  GlName blocks_texture_ = 0;  // weights_blocks_texture's RGBA8 target, resized as asked
  int blocks_texture_w_ = 0, blocks_texture_h_ = 0;
  // weights_blocks and weights_blocks_texture: one dispatch of weights_blocks.comp.
  void run_blocks(std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t j0, std::int64_t block,
                  std::int64_t out_rows, std::int64_t out_cols, BlockReduce r, GlName out, bool to_image,
                  float vmin, float vmax, std::uint32_t nan_rgba, std::uint32_t blocked_rgba,
                  int log_decades);
  // The last forward()'s sizes, while its stages are still in the buffers (read_stage).
  bool stages_ready_ = false;
  Dims stages_dims_;
  // What prepare_rows left for weights_tile (rows_ready_ is false after a forward()).
  bool rows_ready_ = false;
  Dims rows_dims_;
  FullyMasked rows_policy_ = FullyMasked::nan;
  bool rows_has_mask_ = false;
  std::int64_t rows_m_n_ = 1, rows_m_h_ = 1, rows_m_l_ = 1;  // the merged mask's broadcast sizes
  float rows_scale_ = 1;  // what q is divided by: √d_k, or Options::score_divisor
};

}  // namespace mha::gpu
