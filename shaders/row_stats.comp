// Large-L attention without the (N, H, L, S') buffers, step 1: each row's max and log-sum-exp of
// scores_masked = (q_i / √d_k)·k_j + mask_ij, streamed over the keys (the FlashAttention idea), one
// work-group per (batch, head, query) row. weights_tile.comp then recomputes any tile exactly.
// Synchronisation as softmax.comp: memoryBarrierShared() + barrier() between a shared write and
// another invocation's read, barriers in uniform control flow only, any LOCAL_SIZE.
layout(local_size_x = LOCAL_SIZE) in;

layout(std430, binding = 0) readonly buffer Q { float q[]; };        // (N, L, E)
layout(std430, binding = 1) readonly buffer K { float k[]; };        // (N, S', G·d_k)
layout(std430, binding = 2) readonly buffer Mask { float mask[]; };  // (m_n, m_h, m_l, S'), each 1 or full
layout(std430, binding = 3) writeonly buffer RowMax { float row_max[]; };  // (N, H, L)
layout(std430, binding = 4) writeonly buffer RowLse { float row_lse[]; };  // (N, H, L)

layout(std140, binding = 0) uniform Params {
  int L;
  int S_total;
  int E;
  int H;
  int G;
  int d_k;
  float scale;  // √d_k
  int has_mask;
  int m_n;
  int m_h;
  int m_l;
};

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
  memoryBarrierShared();
  barrier();
  // Tree reduction for any LOCAL_SIZE: each step folds [upper, n) onto [0, n - upper); the trip
  // count depends on LOCAL_SIZE only.
  for (int n_left = LOCAL_SIZE; n_left > 1; n_left = (n_left + 1) / 2) {
    const int upper = (n_left + 1) / 2;
    if (t + upper < n_left) {
      const float m1 = part_max[t], m2 = part_max[t + upper];
      const float mm = m1 < m2 ? m2 : m1;
      const float l1 = m1 == NEG_INF ? 0.0 : part_sum[t] * exp(m1 - mm);
      const float l2 = m2 == NEG_INF ? 0.0 : part_sum[t + upper] * exp(m2 - mm);
      part_max[t] = mm;
      part_sum[t] = l1 + l2;
    }
    memoryBarrierShared();
    barrier();
  }
  if (t == 0) {
    row_max[nh * L + i] = part_max[0];
    // Every key blocked: max = -inf and lse = -inf; the tile shader applies the policy.
    float lse = part_max[0] == NEG_INF ? NEG_INF : part_max[0] + log(part_sum[0]);
#ifdef MHA_PERTURB
    // Test only (MHA_GPU_PERTURB=row_stats): the first row's log-sum-exp is 1e-5 too large, the
    // kind of error the self-check must refuse (gpu_backend.hpp, GpuBackend::self_check).
    if (nh == 0 && i == 0) lse += 1e-5;
#endif
    row_lse[nh * L + i] = lse;
  }
}
