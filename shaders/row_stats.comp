// Large-L attention without the (N, H, L, S') buffers, step 1: each row's max and log-sum-exp of
// scores_masked = (q_i / √d_k)·k_j + mask_ij, streamed over the keys (the FlashAttention idea), one
// work-group per (batch, head, query) row. weights_tile.comp then recomputes any tile exactly.
layout(local_size_x = LOCAL_SIZE) in;

layout(std430, binding = 0) readonly buffer Q { float q[]; };        // (N, L, E)
layout(std430, binding = 1) readonly buffer K { float k[]; };        // (N, S', G·d_k)
layout(std430, binding = 2) readonly buffer Mask { float mask[]; };  // (m_n, m_h, m_l, S'), each 1 or full
layout(std430, binding = 3) writeonly buffer RowMax { float row_max[]; };  // (N, H, L)
layout(std430, binding = 4) writeonly buffer RowLse { float row_lse[]; };  // (N, H, L)

uniform int L;
uniform int S_total;
uniform int E;
uniform int H;
uniform int G;
uniform int d_k;
uniform float scale;  // √d_k
uniform int has_mask;
uniform int m_n;
uniform int m_h;
uniform int m_l;

shared float part_max[LOCAL_SIZE];
shared float part_sum[LOCAL_SIZE];

const float NEG_INF = uintBitsToFloat(0xff800000u);

void main() {
  const int t = int(gl_LocalInvocationID.x);
  const int i = int(gl_WorkGroupID.x), nh = int(gl_WorkGroupID.y), n = nh / H, h = nh % H;
  const int g = kv_head(h, H, G), kv = G * d_k;
  const int q_at = (n * L + i) * E + h * d_k;
  const int mask_row = (((m_n > 1 ? n : 0) * m_h + (m_h > 1 ? h : 0)) * m_l + (m_l > 1 ? i : 0)) * S_total;

  // Online max and sum of exp over this thread's keys. A NaN score never becomes the max
  // (std::max's rule, as the reference) but makes the sum NaN, so the row's weights are NaN.
  float m = NEG_INF, l = 0.0;
  for (int j = t; j < S_total; j += LOCAL_SIZE) {
    const int k_at = (n * S_total + j) * kv + g * d_k;
    precise float s = 0.0;
    for (int c = 0; c < d_k; ++c) s += (q[q_at + c] / scale) * k[k_at + c];
    if (has_mask != 0) s += mask[mask_row + j];
    if (s == NEG_INF) continue;
    if (m < s) {
      l = l * exp(m - s) + 1.0;  // m = -inf at the first key: 0 · exp(-inf) = 0
      m = s;
    } else {
      l += exp(s - m);
    }
  }
  part_max[t] = m;
  part_sum[t] = l;
  barrier();
  for (int stride = LOCAL_SIZE / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      const float m1 = part_max[t], m2 = part_max[t + stride];
      const float mm = m1 < m2 ? m2 : m1;
      const float l1 = m1 == NEG_INF ? 0.0 : part_sum[t] * exp(m1 - mm);
      const float l2 = m2 == NEG_INF ? 0.0 : part_sum[t + stride] * exp(m2 - mm);
      part_max[t] = mm;
      part_sum[t] = l1 + l2;
    }
    barrier();
  }
  if (t == 0) {
    row_max[nh * L + i] = part_max[0];
    // Every key blocked: max = -inf and lse = -inf; the tile shader applies the policy.
    row_lse[nh * L + i] = part_max[0] == NEG_INF ? NEG_INF : part_max[0] + log(part_sum[0]);
  }
}
