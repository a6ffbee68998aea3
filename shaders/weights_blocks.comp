// Large-L attention, step 3 (level of detail): each output pixel is the max or the mean of a
// block x block patch of attn_weights[n, h], recomputed exactly from q, k, the mask and the row's
// log-sum-exp as weights_tile.comp does; block = 1 gives the exact cells. A block holding a NaN
// weight is NaN. With to_image the pixel is also written through the colormap into an RGBA8 image,
// so the app draws it straight from GPU memory (no read-back).
layout(local_size_x = TILE, local_size_y = TILE) in;

layout(std430, binding = 0) readonly buffer Q { float q[]; };        // (N, L, E)
layout(std430, binding = 1) readonly buffer K { float k[]; };        // (N, S', G·d_k)
layout(std430, binding = 2) readonly buffer Mask { float mask[]; };  // (m_n, m_h, m_l, S')
layout(std430, binding = 3) readonly buffer RowLse { float row_lse[]; };  // (N, H, L)
layout(std430, binding = 4) writeonly buffer Out { float out_[]; };       // (out_rows, out_cols)
layout(std430, binding = 5) readonly buffer Lut { uint lut[]; };          // (256,) RGBA8, R low byte
layout(rgba8, binding = 0) writeonly uniform image2D image;               // (out_cols, out_rows)

layout(std140, binding = 0) uniform Params {
  int L;
  int S_total;
  int E;
  int H;
  int G;
  int d_k;
  float scale;
  int has_mask;
  int m_n;
  int m_h;
  int m_l;
  int n;
  int h;
  int i0;  // first query row and key column of the first block
  int j0;
  int block;  // cells per block side
  int out_rows;
  int out_cols;
  int reduce_mean;  // 0: max, 1: mean
  int to_image;
  float vmin;
  float vmax;
  int log_decades;  // 0: linear in [vmin, vmax]; k: log10 over k decades below vmax
  uint nan_color;
  uint blocked_color;
};

const float NEG_INF = uintBitsToFloat(0xff800000u);
const float NAN = uintBitsToFloat(0x7fc00000u);

void main() {
  const int c_ = int(gl_GlobalInvocationID.x), r_ = int(gl_GlobalInvocationID.y);
  if (r_ >= out_rows || c_ >= out_cols) return;
  const int i_begin = i0 + r_ * block, i_end = min(i_begin + block, L);
  const int j_begin = j0 + c_ * block, j_end = min(j_begin + block, S_total);
  const int g = kv_head(h, H, G), kv = G * d_k;
  float acc = reduce_mean != 0 ? 0.0 : NEG_INF;
  bool nan_seen = false, all_blocked = true;
  for (int i = i_begin; i < i_end; ++i) {
    const int q_at = (n * L + i) * E + h * d_k;
    const float lse = row_lse[(n * H + h) * L + i];
    for (int j = j_begin; j < j_end; ++j) {
      const int k_at = (n * S_total + j) * kv + g * d_k;
      precise float s = 0.0;
      for (int c = 0; c < d_k; ++c) s += (q[q_at + c] / scale) * k[k_at + c];
      if (has_mask != 0)
        s += mask[(((m_n > 1 ? n : 0) * m_h + (m_h > 1 ? h : 0)) * m_l + (m_l > 1 ? i : 0)) * S_total + j];
      if (s != NEG_INF) all_blocked = false;
#ifdef ZERO_FULLY_MASKED
      const float w = lse == NEG_INF ? 0.0 : (s == NEG_INF ? 0.0 * lse : exp(s - lse));
#else
      const float w = lse == NEG_INF ? NAN : (s == NEG_INF ? 0.0 * lse : exp(s - lse));
#endif
      if (isnan(w)) nan_seen = true;
      acc = reduce_mean != 0 ? acc + w : max(acc, w);
    }
  }
  const int count = (i_end - i_begin) * (j_end - j_begin);
  const float v = nan_seen ? NAN : (reduce_mean != 0 ? acc / float(count) : acc);
  out_[r_ * out_cols + c_] = v;
  if (to_image != 0) {
    uint rgba;
    if (nan_seen) {
      rgba = nan_color;
    } else if (all_blocked) {
      rgba = blocked_color;  // every key in the block masked out: grey, never "low"
    } else {
      const float t = log_decades > 0 ? clamp(1.0 + log(max(v, 1e-30) / vmax) / (log(10.0) * float(log_decades)), 0.0, 1.0)
                      : (vmax > vmin ? clamp((v - vmin) / (vmax - vmin), 0.0, 1.0) : 0.5);
      rgba = lut[int(t * 255.0 + 0.5)];
    }
    imageStore(image, ivec2(c_, r_), unpackUnorm4x8(rgba));
  }
}
