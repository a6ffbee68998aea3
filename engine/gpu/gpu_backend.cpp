// The GPU path's host side (see gpu_backend.hpp): uploads the checked problem into shader storage
// buffers, runs one compute program per operation in the reference's order, reads every stage back
// into the engine's buffers, and turns every GL failure into a DeviceError.
#include "gpu/gpu_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include "cost.hpp"
#include "errors.hpp"
#include "forward_detail.hpp"
#include "gpu/egl_context.hpp"
#include "gpu/gl_util.hpp"
#include "gpu/shader.hpp"
#include "torch_rng.hpp"

namespace mha::gpu {

static_assert(std::is_same_v<GlName, GLuint> && std::is_same_v<GLint, int>,
              "gpu_backend.hpp names GL objects and limits without the GL header");

double forward_multiply_adds(const Dims& d) {
  return cost::multiply_adds(cost::shape(d));
}

GpuBackend::GpuBackend(LaunchSizes sizes) : sizes_(sizes) {}

std::unique_ptr<GpuBackend> GpuBackend::headless(LaunchSizes sizes) {
  std::unique_ptr<GpuBackend> g(new GpuBackend(sizes));
  try {
    g->egl_ = EglContext::create();
    g->context_description_ = g->egl_->description();
    // Released after each call, as the app's contexts are: the Large L view prepares on a thread of
    // its own and draws tiles on the UI thread.
    g->release_ = [egl = g->egl_.get()] { egl->release(); };
  } catch (const DeviceError& e) {
    g->unavailable_ = e.what();
  }
  return g;
}

std::unique_ptr<GpuBackend> GpuBackend::with_context(std::function<void()> make_current,
                                                     std::function<void()> release, std::string description,
                                                     LaunchSizes sizes) {
  std::unique_ptr<GpuBackend> g(new GpuBackend(sizes));
  g->make_current_ = std::move(make_current);
  g->release_ = std::move(release);
  g->context_description_ = std::move(description);
  return g;
}

std::unique_ptr<GpuBackend> GpuBackend::unavailable(std::string why) {
  std::unique_ptr<GpuBackend> g(new GpuBackend(LaunchSizes{}));
  g->unavailable_ = std::move(why);
  return g;
}

GpuBackend::~GpuBackend() {
  if (!programs_built_ && buffers_.empty() && !blocks_texture_) return;
  try {  // GL objects die with a current context only
    if (egl_) egl_->make_current();
    if (make_current_) make_current_();
    for (auto& [name, program] : programs_) glDeleteProgram(program->id);
    for (auto& [name, b] : buffers_) glDeleteBuffers(1, &b.id);
    if (params_buffer_) glDeleteBuffers(1, &params_buffer_);
    if (blocks_texture_) glDeleteTextures(1, &blocks_texture_);
    if (release_) release_();
  } catch (const DeviceError&) {
  }
}

void GpuBackend::release_buffers() {
  if (buffers_.empty()) return;
  Release release{release_};
  probe();
  for (auto& [name, b] : buffers_) glDeleteBuffers(1, &b.id);
  buffers_.clear();
  rows_ready_ = false;
  stages_ready_ = false;
}

bool GpuBackend::prefers(const Dims& d, bool full_trace) {
  if (full_trace || calibrating_ || !available() || d.qdim() != d.E ||
      forward_multiply_adds(d) < kAutoMinMultiplyAdds)
    return false;
  if (renderer_.empty()) {
    Release release{release_};
    try {
      probe();
    } catch (const DeviceError&) {
      return false;  // unavailable_ holds the reason; forward() would report it
    }
  }
  if (software_) return false;
  if (!calibration_.done && calibration_.why.empty()) calibrate_auto();
  return calibration_.done &&
         calibration_.gpu_ms(forward_multiply_adds(d)) < calibration_.cpu_ms(forward_multiply_adds(d));
}

AutoCalibration GpuBackend::calibrate_auto() {
  Config c;
  c.embed_dim = 64;
  c.num_heads = 4;
  const Dims small = dims_for(c, 1, 64, 64);
  c.embed_dim = 512;
  c.num_heads = 8;
  return calibrate_auto(small, dims_for(c, 1, 512, 512));
}

bool GpuBackend::software_renderer() {
  if (!available()) return false;
  if (renderer_.empty()) {
    Release release{release_};
    try {
      probe();
    } catch (const DeviceError&) {
      return false;
    }
  }
  return software_;
}

AutoCalibration GpuBackend::calibrate_auto(const Dims& small, const Dims& large, int threads) {
  AutoCalibration cal;
  const auto start = std::chrono::steady_clock::now();
  calibrating_ = true;
  try {
    // Best of three output-only forwards of `d` on `backend`, after one that warms up (shaders,
    // buffers, pages); nullopt when the GPU forward fell back (the reason goes to cal.why).
    auto best_ms = [&](const Dims& d, Backend backend) -> std::optional<double> {
      Config c;
      c.embed_dim = d.E;
      c.num_heads = d.H;
      const SeededCase<float> sc = torch_seeded_case<float>(c, 0, d.N, d.L, d.S);
      Options o;
      o.backend = backend;
      o.device = this;
      o.threads = threads;
      o.stages = {"output"};
      Workspace<float> ws;
      ForwardResult<float> r;
      double best = std::numeric_limits<double>::infinity();
      for (int run = 0; run < 4; ++run) {
        const auto t0 = std::chrono::steady_clock::now();
        mha::forward(c, sc.weights, sc.inputs, o, ws, r);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (r.backend != backend) {
          cal.why = "the GPU forward fell back: " + r.fallback_reason;
          return std::nullopt;
        }
        if (run > 0) best = std::min(best, ms);
      }
      return best;
    };
    const double m0 = forward_multiply_adds(small), m1 = forward_multiply_adds(large);
    const std::optional<double> g0 = best_ms(small, Backend::gpu),
                                g1 = g0 ? best_ms(large, Backend::gpu) : g0;
    if (g0 && g1) {
      const double c0 = *best_ms(small, Backend::eigen), c1 = *best_ms(large, Backend::eigen);
      // Through both points; a slope below 0 (noise at tiny sizes) is taken as 0 from the larger.
      cal.gpu_ms_per_madd = std::max(0.0, (*g1 - *g0) / (m1 - m0));
      cal.cpu_ms_per_madd = std::max(0.0, (c1 - c0) / (m1 - m0));
      cal.gpu_fixed_ms = std::max(0.0, *g1 - cal.gpu_ms_per_madd * m1);
      cal.cpu_fixed_ms = std::max(0.0, c1 - cal.cpu_ms_per_madd * m1);
      const double slope = cal.cpu_ms_per_madd - cal.gpu_ms_per_madd;
      cal.crossover_madds = slope > 0 ? std::max(0.0, (cal.gpu_fixed_ms - cal.cpu_fixed_ms) / slope)
                                      : std::numeric_limits<double>::infinity();
      cal.done = true;
      char line[256];
      std::snprintf(line, sizeof line,
                    "output-only forward: gpu %.3g ms + %.3g ms per 10^9 multiply-adds, cpu %.3g ms + %.3g "
                    "ms per 10^9; the GPU is chosen from %.3g multiply-adds",
                    cal.gpu_fixed_ms, cal.gpu_ms_per_madd * 1e9, cal.cpu_fixed_ms, cal.cpu_ms_per_madd * 1e9,
                    cal.crossover_madds);
      cal.why = line;
    }
  } catch (const Error& e) {
    cal.done = false;
    cal.why = std::string("the calibration failed: ") + e.what();
  }
  calibrating_ = false;
  cal.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  calibration_ = cal;
  return cal;
}

void GpuBackend::probe() {
  if (!unavailable_.empty()) throw DeviceError("gpu", unavailable_);
  if (egl_) egl_->make_current();
  if (make_current_) make_current_();
  if (renderer_.empty()) {
    const int version = epoxy_gl_version();
    const char* vendor = reinterpret_cast<const char*>(glGetString(GL_VENDOR));
    const char* renderer = reinterpret_cast<const char*>(glGetString(GL_RENDERER));
    const char* gl_version = reinterpret_cast<const char*>(glGetString(GL_VERSION));
    gl_vendor_ = vendor ? vendor : "?";
    gl_renderer_ = renderer ? renderer : "?";
    gl_version_ = gl_version ? gl_version : "?";
    renderer_ = gl_renderer_ + ", OpenGL " + gl_version_ + "; " + context_description_;
    software_ = renderer && (std::strstr(renderer, "llvmpipe") || std::strstr(renderer, "softpipe"));
    if (version < 43) {
      unavailable_ = "compute shaders need OpenGL 4.3; this context is " + renderer_;
      throw DeviceError("gpu", unavailable_);
    }
    GLint64 block = 0;
    glGetInteger64v(GL_MAX_SHADER_STORAGE_BLOCK_SIZE, &block);
    device_max_block_ = std::uint64_t(block);
    glGetIntegerv(GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS, &max_invocations_);
    glGetIntegeri_v(GL_MAX_COMPUTE_WORK_GROUP_SIZE, 0, &max_size_x_);
    glGetIntegeri_v(GL_MAX_COMPUTE_WORK_GROUP_SIZE, 1, &max_size_y_);
    glGetIntegerv(GL_MAX_COMPUTE_SHARED_MEMORY_SIZE, &max_shared_bytes_);
  }
}

const Program& GpuBackend::program(const std::string& name) const {
  return *programs_.at(name);
}

void GpuBackend::bind() {
  probe();
  if (!build_error_.empty()) throw DeviceError("shader", build_error_);
  if (programs_built_) return;
  // The largest shared arrays: softmax.comp's two LOCAL_SIZE floats, scores.comp's three
  // MM_DEPTH x (MM_TILE + 1) floats.
  const std::int64_t tile = sizes_.tile, local = sizes_.local_size;
  const std::int64_t mm_tile = sizes_.product_tile, mm_work = sizes_.product_work,
                     mm_depth = sizes_.product_depth;
  const std::int64_t mm_threads = mm_work > 0 ? mm_tile / mm_work : 0;
  const std::int64_t shared_bytes = std::max(2 * local + 1, 3 * mm_depth * (mm_tile + 1)) * 4;
  if (mm_tile < 1 || mm_work < 1 || mm_depth < 1 || mm_tile % mm_work != 0)
    throw DeviceError("gpu", "product tile sizes MM_TILE=" + std::to_string(mm_tile) + ", MM_WORK=" +
                                 std::to_string(mm_work) + ", MM_DEPTH=" + std::to_string(mm_depth) +
                                 ": each must be positive and MM_TILE a multiple of MM_WORK");
  if (tile < 1 || local < 1 || tile * tile > max_invocations_ || tile > max_size_x_ || tile > max_size_y_ ||
      local > max_invocations_ || local > max_size_x_ || mm_threads * mm_threads > max_invocations_ ||
      mm_threads > max_size_x_ || mm_threads > max_size_y_ || shared_bytes > max_shared_bytes_)
    throw DeviceError(
        "gpu", "work-group sizes TILE=" + std::to_string(tile) + ", LOCAL_SIZE=" + std::to_string(local) +
                   ", MM_TILE=" + std::to_string(mm_tile) + " / MM_WORK=" + std::to_string(mm_work) +
                   ", MM_DEPTH=" + std::to_string(mm_depth) + " do not fit this device (at most " +
                   std::to_string(max_invocations_) + " invocations, " + std::to_string(max_size_x_) + " x " +
                   std::to_string(max_size_y_) + ", " + std::to_string(max_shared_bytes_) +
                   " bytes of shared memory)");
  const Defines tile_d = {{"TILE", std::to_string(tile)}};
  const Defines product_d = {{"MM_TILE", std::to_string(mm_tile)},
                             {"MM_WORK", std::to_string(mm_work)},
                             {"MM_DEPTH", std::to_string(mm_depth)},
                             {"MM_THREADS", std::to_string(mm_threads)}};
  const Defines local_d = {{"LOCAL_SIZE", std::to_string(local)}};
  Defines local_zero = local_d;
  local_zero.push_back({"ZERO_FULLY_MASKED", "1"});
  Defines tile_zero = tile_d;
  tile_zero.push_back({"ZERO_FULLY_MASKED", "1"});
  auto build = [&](const char* key, const char* file, const Defines& defines,
                   std::vector<std::string> snippets) {
    programs_[key] = std::make_unique<Program>(build_compute_program(file, defines, snippets));
  };
  try {
    perturbation();  // a misspelt MHA_GPU_PERTURB is an error, not a check that found nothing
    build("linear", "linear.comp", product_d, {});
    build("scores", "scores.comp", product_d, {"gqa.glsl"});
    build("softmax_nan", "softmax.comp", local_d, {});
    build("softmax_zero", "softmax.comp", local_zero, {});
    build("context", "context.comp", product_d, {"gqa.glsl"});
    build("concat", "concat.comp", local_d, {});
    build("average", "average.comp", local_d, {});
    build("row_stats", "row_stats.comp", local_d, {"gqa.glsl"});
    build("tile_nan", "weights_tile.comp", tile_d, {"gqa.glsl"});
    build("tile_zero", "weights_tile.comp", tile_zero, {"gqa.glsl"});
    build("blocks_nan", "weights_blocks.comp", tile_d, {"gqa.glsl"});
    build("blocks_zero", "weights_blocks.comp", tile_zero, {"gqa.glsl"});
  } catch (const DeviceError& e) {
    build_error_ = e.what();  // the same failure every time; do not recompile on each forward
    for (auto& [name, program] : programs_) glDeleteProgram(program->id);
    programs_.clear();
    throw;
  }
  glGenBuffers(1, &params_buffer_);
  programs_built_ = true;
}

GLuint GpuBackend::buffer(const std::string& name, std::uint64_t bytes) {
  bytes = std::max<std::uint64_t>(bytes, 4);  // an empty SSBO binding is an error; keep one float
  const std::uint64_t limit =
      max_buffer_bytes_ ? std::min(max_buffer_bytes_, device_max_block_) : device_max_block_;
  if (bytes > limit)
    throw DeviceError("gpu", "buffer " + name + " needs " + std::to_string(bytes) +
                                 " bytes, more than GL_MAX_SHADER_STORAGE_BLOCK_SIZE allows here (" +
                                 std::to_string(limit) + " bytes)");
  if (bytes / 4 > std::uint64_t(std::numeric_limits<std::int32_t>::max()))
    throw DeviceError("gpu", "buffer " + name + ": more than 2^31 floats, past the shaders' int indices");
  Ssbo& b = buffers_[name];
  if (!b.id) glGenBuffers(1, &b.id);
  glBindBuffer(GL_SHADER_STORAGE_BUFFER, b.id);
  if (b.bytes != bytes) {
    glBufferData(GL_SHADER_STORAGE_BUFFER, GLsizeiptr(bytes), nullptr, GL_DYNAMIC_COPY);
    b.bytes = bytes;
    if (glGetError() == GL_OUT_OF_MEMORY) {
      b.bytes = 0;
      throw DeviceError(
          "gpu", "GL_OUT_OF_MEMORY allocating buffer " + name + " (" + std::to_string(bytes) + " bytes)");
    }
  }
  return b.id;
}

GLuint GpuBackend::upload(const std::string& name, const float* data, std::uint64_t count) {
  const GLuint id = buffer(name, count * sizeof(float));
  if (data && count) glBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, GLsizeiptr(count * sizeof(float)), data);
  return id;
}

void GpuBackend::run_linear(GLuint x, GLuint w, GLuint bias, GLuint y, std::int64_t rows, std::int64_t in,
                            std::int64_t out, bool has_bias, std::int64_t src_block, std::int64_t dst_block) {
  const std::int64_t mm_tile = sizes_.product_tile;
  if (groups(rows, mm_tile) > kMaxGroups || groups(out, mm_tile) > kMaxGroups)
    throw DeviceError("gpu", "more than 65535·MM_TILE rows or features for one projection");
  Params params(program("linear"));
  params.set("rows", int(rows))
      .set("in_features", int(in))
      .set("out_features", int(out))
      .set("has_bias", int(has_bias))
      .set("src_block", int(src_block))
      .set("dst_block", int(dst_block));
  dispatch(params, params_buffer_, {x, w, bias, y}, groups(out, mm_tile), groups(rows, mm_tile), 1);
}

GpuBackend::Projected GpuBackend::upload_inputs(const detail::Problem<float>& p) {
  const Dims& d = p.d;
  const std::int64_t N = d.N, L = d.L, S = d.S, Sp = d.S_total, E = d.E, kv = d.G * d.d_k;
  Projected r;
  r.query = upload("query", p.query->data(), std::uint64_t(N * L * E));
  r.key = upload("key", p.key->data(), std::uint64_t(N * S * d.kdim));
  r.value = upload("value", p.value->data(), std::uint64_t(N * S * d.vdim));
  r.w_q = upload("w_q", p.w_q, std::uint64_t(E * E));
  r.w_k = upload("w_k", p.w_k, std::uint64_t(kv * d.kdim));
  r.w_v = upload("w_v", p.w_v, std::uint64_t(kv * d.vdim));
  r.w_o = upload("w_o", p.w_o, std::uint64_t(E * E));
  r.b_q = upload("b_q", p.b_q, p.b_q ? std::uint64_t(E) : 0);
  r.b_k = upload("b_k", p.b_k, p.b_k ? std::uint64_t(kv) : 0);
  r.b_v = upload("b_v", p.b_v, p.b_v ? std::uint64_t(kv) : 0);
  r.b_o = upload("b_o", p.b_o, p.b_o ? std::uint64_t(E) : 0);
  r.bias_k = upload("bias_k", p.bias_k, p.bias_k ? std::uint64_t(kv) : 0);
  r.bias_v = upload("bias_v", p.bias_v, p.bias_v ? std::uint64_t(kv) : 0);
  r.mask = upload("mask", p.mask ? p.mask->values.data() : nullptr,
                  p.mask ? std::uint64_t(p.mask->values.size()) : 0);
  r.q = buffer("q", std::uint64_t(N * L * E) * 4);    // (N, L, E)
  r.k = buffer("k", std::uint64_t(N * Sp * kv) * 4);  // (N, S', G·d_k)
  r.v = buffer("v", std::uint64_t(N * Sp * kv) * 4);  // (N, S', G·d_k)
  return r;
}

void GpuBackend::project(const detail::Problem<float>& p, const Projected& r) {
  const Dims& d = p.d;
  const std::int64_t N = d.N, L = d.L, S = d.S, Sp = d.S_total, E = d.E, kv = d.G * d.d_k;
  // bias_k / bias_v become key/value row S of each batch item and the zero row comes last, as
  // torch cats them; the projection writes rows 0..S-1 of each block.
  run_linear(r.query, r.w_q, r.b_q, r.q, N * L, E, E, p.b_q != nullptr, N * L, N * L);
  run_linear(r.key, r.w_k, r.b_k, r.k, N * S, d.kdim, kv, p.b_k != nullptr, S, Sp);
  run_linear(r.value, r.w_v, r.b_v, r.v, N * S, d.vdim, kv, p.b_v != nullptr, S, Sp);
  std::int64_t extra_row = S;
  if (p.bias_k) {
    for (std::int64_t n = 0; n < N; ++n) {
      const GLintptr at = GLintptr((n * Sp + extra_row) * kv * 4);
      glBindBuffer(GL_COPY_READ_BUFFER, r.bias_k);
      glBindBuffer(GL_COPY_WRITE_BUFFER, r.k);
      glCopyBufferSubData(GL_COPY_READ_BUFFER, GL_COPY_WRITE_BUFFER, 0, at, GLsizeiptr(kv * 4));
      glBindBuffer(GL_COPY_READ_BUFFER, r.bias_v);
      glBindBuffer(GL_COPY_WRITE_BUFFER, r.v);
      glCopyBufferSubData(GL_COPY_READ_BUFFER, GL_COPY_WRITE_BUFFER, 0, at, GLsizeiptr(kv * 4));
    }
    ++extra_row;
  }
  if (p.add_zero_attn)
    for (std::int64_t n = 0; n < N; ++n)
      for (GLuint id : {r.k, r.v}) {
        glBindBuffer(GL_SHADER_STORAGE_BUFFER, id);
        glClearBufferSubData(GL_SHADER_STORAGE_BUFFER, GL_R32F, GLintptr((n * Sp + extra_row) * kv * 4),
                             GLsizeiptr(kv * 4), GL_RED, GL_FLOAT, nullptr);
      }
  glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT);
}

void GpuBackend::forward(const detail::Problem<float>& p, detail::Buffers<float>& b, StageTimes* times) {
  ensure_trusted();
  Release release{release_};
  bind();
  rows_ready_ = false;  // the q, k and mask buffers are about to be overwritten
  stages_ready_ = false;
  if (times) *times = StageTimes{};
  using Clock = std::chrono::steady_clock;
  Clock::time_point phase_start = Clock::now();
  // Ends a timed phase: waits for the GPU, adds the wall time since the last phase ended.
  auto phase = [&](double StageTimes::*field) {
    if (!times) return;
    glFinish();
    const Clock::time_point now = Clock::now();
    times->*field += std::chrono::duration<double, std::milli>(now - phase_start).count();
    phase_start = now;
  };
  glGetError();  // start from a clean error state: earlier errors are not ours
  const Dims& d = p.d;
  const std::int64_t N = d.N, L = d.L, Sp = d.S_total, E = d.E, H = d.H, G = d.G, dk = d.d_k;
  // The shaders take q and the heads side by side at the model's width E.
  if (d.qdim() != E)
    throw DeviceError("gpu", "heads of an explicit width (num_heads·head_dim = " + std::to_string(d.qdim()) +
                                 ", not embed_dim " + std::to_string(E) + ") run on the CPU");
  if (L > kMaxGroups || N * H > kMaxGroups || groups(Sp, sizes_.product_tile) > kMaxGroups)
    throw DeviceError(
        "gpu", "L, N·num_heads and S'/MM_TILE must stay within 65535 work-groups (L=" + std::to_string(L) +
                   ", N·H=" + std::to_string(N * H) + ", S'=" + std::to_string(Sp) + ")");
  const std::uint64_t scores_n = std::uint64_t(N * H * L * Sp);

  // Every buffer is sized (and checked against the device's limit) before any work is queued.
  const GLuint scores = buffer("scores", scores_n * 4);                                  // (N, H, L, S')
  const GLuint scores_scaled = buffer("scores_scaled", scores_n * 4);                    // (N, H, L, S')
  const GLuint scores_masked = buffer("scores_masked", scores_n * 4);                    // (N, H, L, S')
  const GLuint weights = buffer("attn_weights", scores_n * 4);                           // (N, H, L, S')
  const GLuint context = buffer("context", std::uint64_t(N * H * L * dk) * 4);           // (N, H, L, d_k)
  const GLuint concat = buffer("concat", std::uint64_t(N * L * E) * 4);                  // (N, L, E)
  const GLuint output = buffer("output", std::uint64_t(N * L * E) * 4);                  // (N, L, E)
  const GLuint weights_avg = buffer("attn_weights_avg", std::uint64_t(N * L * Sp) * 4);  // (N, L, S')
  const GLuint counter = buffer("fully_masked_rows", 4);
  const GLuint zero = 0;
  glBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, 4, &zero);
  const Projected in = upload_inputs(p);
  check_gl("while uploading the inputs");
  if (times) {
    glFinish();
    phase_start = Clock::now();  // uploads are not a phase: the Eigen path's inputs are in place
  }
  // 1. In-projections.
  project(p, in);
  const GLuint q = in.q, k = in.k, v = in.v, mask = in.mask, w_o = in.w_o, b_o = in.b_o;
  phase(&StageTimes::projections);

  // 2. Scores per head (GQA: head h reads key head h / (H/G)).
  const GLuint mm_tile = GLuint(sizes_.product_tile), local = GLuint(sizes_.local_size);
  {
    Params params(program("scores"));
    params.set("L", int(L))
        .set("S_total", int(Sp))
        .set("E", int(E))
        .set("H", int(H))
        .set("G", int(G))
        .set("d_k", int(dk))
        .set("scale", std::sqrt(float(dk)));
    dispatch(params, params_buffer_, {q, k, scores, scores_scaled}, groups(Sp, mm_tile), groups(L, mm_tile),
             GLuint(N * H));
  }
  phase(&StageTimes::scores);
  // 3. Mask + softmax, one work-group per row.
  {
    Params params(program(p.fully_masked == FullyMasked::zero ? "softmax_zero" : "softmax_nan"));
    params.set("L", int(L))
        .set("S_total", int(Sp))
        .set("H", int(H))
        .set("has_mask", int(bool(p.mask)))
        .set("m_n", p.mask ? int(p.mask->n_size) : 1)
        .set("m_h", p.mask ? int(p.mask->h_size) : 1)
        .set("m_l", p.mask ? int(p.mask->l_size) : 1);
    dispatch(params, params_buffer_, {scores_scaled, mask, scores_masked, weights, counter}, GLuint(L),
             GLuint(N * H), 1);
  }
  phase(&StageTimes::mask_softmax);
  // 4. weights·v and head concat, out-projection, head average.
  {
    Params params(program("context"));
    params.set("L", int(L)).set("S_total", int(Sp)).set("H", int(H)).set("G", int(G)).set("d_k", int(dk));
    dispatch(params, params_buffer_, {weights, v, context}, groups(dk, mm_tile), groups(L, mm_tile),
             GLuint(N * H));
  }
  {
    Params params(program("concat"));
    params.set("N", int(N)).set("L", int(L)).set("H", int(H)).set("d_k", int(dk));
    dispatch(params, params_buffer_, {context, concat}, std::min(kMaxGroups, groups(N * L * E, local)), 1, 1);
  }
  phase(&StageTimes::context);
  run_linear(concat, w_o, b_o, output, N * L, E, E, p.b_o != nullptr, N * L, N * L);  // the out-projection
  phase(&StageTimes::out_proj);
  {
    Params params(program("average"));
    params.set("N", int(N)).set("L", int(L)).set("H", int(H)).set("S_total", int(Sp));
    dispatch(params, params_buffer_, {weights, weights_avg}, std::min(kMaxGroups, groups(N * L * Sp, local)),
             1, 1);
  }
  phase(&StageTimes::average);
  check_gl("while running the compute shaders");

  // 5. Read the stages asked for back into the engine's buffers (the trace's storage); a null
  // buffer is a stage nobody asked for (Options::stages). Every stage stays on the GPU until the
  // next forward or prepare_rows (read_stage).
  auto read = [&](GLuint id, const detail::Buffer<float>& into) {
    if (!into) return;
    glBindBuffer(GL_SHADER_STORAGE_BUFFER, id);
    glGetBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, GLsizeiptr(into->size() * sizeof(float)), into->data());
  };
  read(q, b.q);
  read(k, b.k);
  read(v, b.v);
  read(scores, b.scores);
  read(scores_scaled, b.scores_scaled);
  read(scores_masked, b.scores_masked);
  read(weights, b.weights);
  read(context, b.context);
  read(concat, b.concat);
  read(output, b.output);
  read(weights_avg, b.weights_avg);
  GLuint fully_masked = 0;
  glBindBuffer(GL_SHADER_STORAGE_BUFFER, counter);
  glGetBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, 4, &fully_masked);
  b.fully_masked_rows = std::int64_t(fully_masked);
  check_gl("while reading the results back");
  phase(&StageTimes::read_back);
  stages_ready_ = true;
  stages_dims_ = d;
}

Tensor<float> GpuBackend::read_stage(const std::string& stage, std::int64_t n, std::int64_t h) {
  if (!stages_ready_)
    throw ConfigError("stage",
                      "read_stage: no forward's stages are on the GPU (none yet, or prepare_rows or "
                      "release_buffers since)");
  const Dims& d = stages_dims_;
  const bool per_head = stage != "attn_weights_avg";
  const std::int64_t cols = stage == "context" ? d.d_k : d.S_total;
  if (stage != "scores" && stage != "scores_scaled" && stage != "scores_masked" && stage != "attn_weights" &&
      stage != "context" && stage != "attn_weights_avg")
    throw ConfigError("stage", "read_stage: \"" + stage +
                                   "\" is not one of scores, scores_scaled, scores_masked, attn_weights, "
                                   "context, attn_weights_avg");
  if (n < 0 || n >= d.N || h < 0 || h >= (per_head ? d.H : 1))
    throw ConfigError("stage", "read_stage: (n, h) = (" + std::to_string(n) + ", " + std::to_string(h) +
                                   ") is outside (N, H) = (" + std::to_string(d.N) + ", " +
                                   std::to_string(per_head ? d.H : 1) + ") of " + stage);
  Release release{release_};
  probe();
  Tensor<float> out({d.L, cols});  // (L, S') or (L, d_k)
  const std::int64_t plane = d.L * cols, at = (per_head ? n * d.H + h : n) * plane;
  glBindBuffer(GL_SHADER_STORAGE_BUFFER, buffers_.at(stage).id);
  glGetBufferSubData(GL_SHADER_STORAGE_BUFFER, GLintptr(at * 4), GLsizeiptr(plane * 4), out.data.data());
  check_gl("while reading a stage back");
  return out;
}

}  // namespace mha::gpu
