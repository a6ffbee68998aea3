// Large-L attention, step 2: one tile of attn_weights recomputed exactly from q, k, the mask and
// the row's log-sum-exp (row_stats.comp): weight_ij = exp((q_i / √d_k)·k_j + mask_ij − lse_i).
// Only the tile on screen is computed; a row with every key blocked is NaN (torch) or 0.
layout(local_size_x = TILE, local_size_y = TILE) in;

layout(std430, binding = 0) readonly buffer Q { float q[]; };        // (N, L, E)
layout(std430, binding = 1) readonly buffer K { float k[]; };        // (N, S', G·d_k)
layout(std430, binding = 2) readonly buffer Mask { float mask[]; };  // (m_n, m_h, m_l, S')
layout(std430, binding = 3) readonly buffer RowLse { float row_lse[]; };  // (N, H, L)
layout(std430, binding = 4) writeonly buffer Tile { float tile[]; };      // (rows, cols)

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
  int n;   // the tile's batch item and head
  int h;
  int i0;  // its first query row and key column, and its size
  int j0;
  int rows;
  int cols;
};

const float NEG_INF = uintBitsToFloat(0xff800000u);
const float NAN = uintBitsToFloat(0x7fc00000u);

void main() {
  const int c_ = int(gl_GlobalInvocationID.x), r_ = int(gl_GlobalInvocationID.y);
  if (r_ >= rows || c_ >= cols) return;
  const int i = i0 + r_, j = j0 + c_;
  const int g = kv_head(h, H, G), kv = G * d_k;
  const int q_at = (n * L + i) * E + h * d_k, k_at = (n * S_total + j) * kv + g * d_k;
  precise float s = 0.0;
  for (int c = 0; c < d_k; ++c) s += (q[q_at + c] / scale) * k[k_at + c];
  if (has_mask != 0)
    s += mask[(((m_n > 1 ? n : 0) * m_h + (m_h > 1 ? h : 0)) * m_l + (m_l > 1 ? i : 0)) * S_total + j];
  const float lse = row_lse[(n * H + h) * L + i];
  // A blocked key gives 0·lse: 0, or NaN when the row's lse is NaN (a NaN score), as the reference.
#ifdef ZERO_FULLY_MASKED
  tile[r_ * cols + c_] = lse == NEG_INF ? 0.0 : (s == NEG_INF ? 0.0 * lse : exp(s - lse));
#else
  tile[r_ * cols + c_] = lse == NEG_INF ? NAN : (s == NEG_INF ? 0.0 * lse : exp(s - lse));
#endif
}
