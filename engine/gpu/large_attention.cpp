// The GPU path for large L (see GpuBackend::prepare_rows in gpu_backend.hpp): each row's max and
// log-sum-exp streamed over the keys with no (L, S) buffer, then exact recompute of any tile of
// attn_weights from them (the FlashAttention idea).
#include <algorithm>
#include <cmath>

#include "errors.hpp"
#include "forward_detail.hpp"
#include "gpu/gl_util.hpp"
#include "gpu/gpu_backend.hpp"
#include "gpu/shader.hpp"
#include "masks.hpp"

namespace mha::gpu {

namespace {

// The sizes and mask layout that row_stats.comp, the tile shader and weights_blocks.comp all read.
// scale: what q is divided by (√d_k, or Options::score_divisor's what-if).
void set_problem(Params& params, const Dims& d, float scale, bool has_mask, std::int64_t m_n,
                 std::int64_t m_h, std::int64_t m_l) {
  params.set("L", int(d.L))
      .set("S_total", int(d.S_total))
      .set("E", int(d.E))
      .set("H", int(d.H))
      .set("G", int(d.G))
      .set("d_k", int(d.d_k))
      .set("scale", scale)
      .set("has_mask", int(has_mask))
      .set("m_n", int(m_n))
      .set("m_h", int(m_h))
      .set("m_l", int(m_l));
}

// Where a tile starts: batch item n, head h, query row i0, key j0.
void set_origin(Params& params, std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t j0) {
  params.set("n", int(n)).set("h", int(h)).set("i0", int(i0)).set("j0", int(j0));
}

}  // namespace

GpuBackend::RowStats GpuBackend::prepare_rows(const Config& c, const Weights<float>& w,
                                              const Inputs<float>& in, const Options& o) {
  // The engine's checks and mask merge, then the same normalised problem the forward paths get.
  detail::Problem<float> p;
  p.d = check_inputs(c, w, in, o);
  p.mask = merge_masks(p.d, in.attn_mask, in.key_padding_mask, o.attn_mask_layout, nullptr);
  p.fully_masked = o.fully_masked;
  p.score_divisor = o.score_divisor;  // the shaders divide q by the uniform `scale`: a what-if too
  auto batch_first = [&](const Tensor<float>& t) {
    auto out = std::make_shared<std::vector<float>>(t.data);
    if (p.d.batched && !c.batch_first) {  // (L, N, F) -> (N, L, F)
      const std::int64_t L = t.shape[0], N = t.shape[1], F = t.shape[2];
      for (std::int64_t l = 0; l < L; ++l)
        for (std::int64_t n = 0; n < N; ++n)
          std::copy_n(t.data.begin() + (l * N + n) * F, F, out->begin() + (n * L + l) * F);
    }
    return out;
  };
  p.query = batch_first(in.query);
  p.key = batch_first(in.key);
  p.value = batch_first(in.value);
  const std::int64_t E = p.d.E, kv = p.d.G * p.d.d_k;
  p.w_q = w.in_proj_weight.empty() ? w.q_proj_weight.ptr() : w.in_proj_weight.ptr();
  p.w_k = w.in_proj_weight.empty() ? w.k_proj_weight.ptr() : p.w_q + E * E;
  p.w_v = w.in_proj_weight.empty() ? w.v_proj_weight.ptr() : p.w_k + kv * E;
  if (c.bias) {
    p.b_q = w.in_proj_bias.ptr();
    p.b_k = p.b_q + E;
    p.b_v = p.b_k + kv;
    p.b_o = w.out_proj_bias.ptr();
  }
  p.w_o = w.out_proj_weight.ptr();
  if (c.add_bias_kv) {
    p.bias_k = w.bias_k.ptr();
    p.bias_v = w.bias_v.ptr();
  }
  p.add_zero_attn = c.add_zero_attn;

  ensure_trusted();
  Release release{release_};
  bind();
  glGetError();
  rows_ready_ = false;
  stages_ready_ = false;  // q and k are about to be overwritten
  const Dims& d = p.d;
  const std::int64_t N = d.N, L = d.L, H = d.H;
  if (L > kMaxGroups || N * H > kMaxGroups)
    throw DeviceError("gpu", "L and N·num_heads must stay within 65535 work-groups");
  const GLuint row_max = buffer("row_max", std::uint64_t(N * H * L) * 4);  // (N, H, L)
  const GLuint row_lse = buffer("row_lse", std::uint64_t(N * H * L) * 4);  // (N, H, L)
  const Projected r = upload_inputs(p);
  project(p, r);
  Params params(program("row_stats"));
  set_problem(params, d, p.scale(), bool(p.mask), p.mask ? p.mask->n_size : 1, p.mask ? p.mask->h_size : 1,
              p.mask ? p.mask->l_size : 1);
  dispatch(params, params_buffer_, {r.q, r.k, r.mask, row_max, row_lse}, GLuint(L), GLuint(N * H), 1);

  RowStats stats{Tensor<float>({N, H, L}), Tensor<float>({N, H, L})};
  glBindBuffer(GL_SHADER_STORAGE_BUFFER, row_max);
  glGetBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, GLsizeiptr(N * H * L * 4), stats.row_max.ptr());
  glBindBuffer(GL_SHADER_STORAGE_BUFFER, row_lse);
  glGetBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, GLsizeiptr(N * H * L * 4), stats.row_lse.ptr());
  check_gl("while computing the row statistics");
  rows_dims_ = d;
  rows_policy_ = o.fully_masked;
  rows_scale_ = p.scale();
  rows_has_mask_ = bool(p.mask);
  rows_m_n_ = p.mask ? p.mask->n_size : 1;
  rows_m_h_ = p.mask ? p.mask->h_size : 1;
  rows_m_l_ = p.mask ? p.mask->l_size : 1;
  rows_ready_ = true;
  return stats;
}

Tensor<float> GpuBackend::weights_tile(std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t rows,
                                       std::int64_t j0, std::int64_t cols) {
  if (!rows_ready_)
    throw ConfigError("tile", "weights_tile: call prepare_rows first (again after a forward)");
  const Dims& d = rows_dims_;
  if (n < 0 || n >= d.N || h < 0 || h >= d.H || rows <= 0 || cols <= 0 || i0 < 0 || j0 < 0 ||
      i0 + rows > d.L || j0 + cols > d.S_total)
    throw ConfigError("tile", "weights_tile: (n=" + std::to_string(n) + ", h=" + std::to_string(h) +
                                  ", rows " + std::to_string(i0) + "+" + std::to_string(rows) + ", cols " +
                                  std::to_string(j0) + "+" + std::to_string(cols) +
                                  ") is outside (N, H, L, S') = " + shape_str({d.N, d.H, d.L, d.S_total}));
  Release release{release_};
  bind();
  glGetError();
  const GLuint tile = buffer("tile", std::uint64_t(rows * cols) * 4);  // (rows, cols)
  if (groups(rows, sizes_.tile) > kMaxGroups || groups(cols, sizes_.tile) > kMaxGroups)
    throw DeviceError("gpu", "a tile of more than 65535·TILE rows or columns");
  Params params(program(rows_policy_ == FullyMasked::zero ? "tile_zero" : "tile_nan"));
  set_problem(params, d, rows_scale_, rows_has_mask_, rows_m_n_, rows_m_h_, rows_m_l_);
  set_origin(params, n, h, i0, j0);
  params.set("rows", int(rows)).set("cols", int(cols));
  dispatch(params, params_buffer_,
           {buffers_["q"].id, buffers_["k"].id, buffers_["mask"].id, buffers_["row_lse"].id, tile},
           groups(cols, sizes_.tile), groups(rows, sizes_.tile), 1);
  Tensor<float> out({rows, cols});
  glBindBuffer(GL_SHADER_STORAGE_BUFFER, tile);
  glGetBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, GLsizeiptr(rows * cols * 4), out.ptr());
  check_gl("while recomputing a weights tile");
  return out;
}

void GpuBackend::run_blocks(std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t j0,
                            std::int64_t block, std::int64_t out_rows, std::int64_t out_cols, BlockReduce r,
                            GLuint out, bool to_image, float vmin, float vmax, std::uint32_t nan_rgba,
                            std::uint32_t blocked_rgba, int log_decades) {
  Params params(program(rows_policy_ == FullyMasked::zero ? "blocks_zero" : "blocks_nan"));
  set_problem(params, rows_dims_, rows_scale_, rows_has_mask_, rows_m_n_, rows_m_h_, rows_m_l_);
  set_origin(params, n, h, i0, j0);
  params.set("block", int(block))
      .set("out_rows", int(out_rows))
      .set("out_cols", int(out_cols))
      .set("reduce_mean", int(r == BlockReduce::mean))
      .set("to_image", int(to_image))
      .set("vmin", vmin)
      .set("vmax", vmax)
      .set("log_decades", log_decades)
      .set("nan_color", nan_rgba)
      .set("blocked_color", blocked_rgba);
  const GLuint lut = buffer("lut", 256 * 4);  // (256,) RGBA8; weights_blocks_texture fills it
  dispatch(params, params_buffer_,
           {buffers_["q"].id, buffers_["k"].id, buffers_["mask"].id, buffers_["row_lse"].id, out, lut},
           groups(out_cols, sizes_.tile), groups(out_rows, sizes_.tile), 1);
}

namespace {
void check_blocks(const Dims& d, bool ready, std::int64_t tile, std::int64_t n, std::int64_t h,
                  std::int64_t i0, std::int64_t j0, std::int64_t block, std::int64_t out_rows,
                  std::int64_t out_cols) {
  if (!ready) throw ConfigError("tile", "weights_blocks: call prepare_rows first (again after a forward)");
  if (n < 0 || n >= d.N || h < 0 || h >= d.H || block <= 0 || out_rows <= 0 || out_cols <= 0 || i0 < 0 ||
      j0 < 0 || i0 + (out_rows - 1) * block >= d.L || j0 + (out_cols - 1) * block >= d.S_total)
    throw ConfigError("tile", "weights_blocks: (n=" + std::to_string(n) + ", h=" + std::to_string(h) +
                                  ", from (" + std::to_string(i0) + ", " + std::to_string(j0) + "), " +
                                  std::to_string(out_rows) + "x" + std::to_string(out_cols) + " blocks of " +
                                  std::to_string(block) +
                                  ") is outside (N, H, L, S') = " + shape_str({d.N, d.H, d.L, d.S_total}));
  if (groups(out_rows, tile) > kMaxGroups || groups(out_cols, tile) > kMaxGroups)
    throw DeviceError("gpu", "more than 65535·TILE blocks a side");
}
}  // namespace

Tensor<float> GpuBackend::weights_blocks(std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t j0,
                                         std::int64_t block, std::int64_t out_rows, std::int64_t out_cols,
                                         BlockReduce r) {
  check_blocks(rows_dims_, rows_ready_, sizes_.tile, n, h, i0, j0, block, out_rows, out_cols);
  Release release{release_};
  bind();
  glGetError();
  const GLuint out = buffer("blocks", std::uint64_t(out_rows * out_cols) * 4);  // (out_rows, out_cols)
  run_blocks(n, h, i0, j0, block, out_rows, out_cols, r, out, false, 0, 1, 0, 0, 0);
  Tensor<float> values({out_rows, out_cols});
  glBindBuffer(GL_SHADER_STORAGE_BUFFER, out);
  glGetBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, GLsizeiptr(out_rows * out_cols * 4), values.ptr());
  check_gl("while reducing weights into blocks");
  return values;
}

GLuint GpuBackend::weights_blocks_texture(std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t j0,
                                          std::int64_t block, std::int64_t out_rows, std::int64_t out_cols,
                                          BlockReduce r, const std::uint32_t* lut, float vmin, float vmax,
                                          std::uint32_t nan_rgba, std::uint32_t blocked_rgba,
                                          int log_decades) {
  check_blocks(rows_dims_, rows_ready_, sizes_.tile, n, h, i0, j0, block, out_rows, out_cols);
  Release release{release_};
  bind();
  glGetError();
  if (!blocks_texture_ || blocks_texture_w_ != out_cols || blocks_texture_h_ != out_rows) {
    if (!blocks_texture_) glGenTextures(1, &blocks_texture_);
    glBindTexture(GL_TEXTURE_2D, blocks_texture_);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);  // no mipmaps: complete at level 0
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
    glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, GLsizei(out_cols), GLsizei(out_rows), 0, GL_RGBA,
                 GL_UNSIGNED_BYTE, nullptr);
    blocks_texture_w_ = int(out_cols);
    blocks_texture_h_ = int(out_rows);
  }
  glBindBuffer(GL_SHADER_STORAGE_BUFFER, buffer("lut", 256 * 4));
  glBufferSubData(GL_SHADER_STORAGE_BUFFER, 0, 256 * 4, lut);
  // The float values still go to a buffer (the shader writes both); hover reads use weights_blocks.
  const GLuint out = buffer("blocks", std::uint64_t(out_rows * out_cols) * 4);
  glBindImageTexture(0, blocks_texture_, 0, GL_FALSE, 0, GL_WRITE_ONLY, GL_RGBA8);
  run_blocks(n, h, i0, j0, block, out_rows, out_cols, r, out, true, vmin, vmax, nan_rgba, blocked_rgba,
             log_decades);
  glMemoryBarrier(GL_TEXTURE_FETCH_BARRIER_BIT | GL_SHADER_IMAGE_ACCESS_BARRIER_BIT);
  glFinish();  // another context (the app's window) samples it next
  check_gl("while drawing weights into a texture");
  return blocks_texture_;
}

std::uint64_t GpuBackend::buffer_bytes() const {
  std::uint64_t total = 0;
  for (const auto& [name, b] : buffers_) total += b.bytes;
  return total;
}

}  // namespace mha::gpu
