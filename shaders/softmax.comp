// Mask + row softmax: scores_masked = scores_scaled + merged attn_mask (-inf where blocked), then
// attn_weights = softmax over keys, one work-group per (batch, head, query) row. A row whose every
// key is blocked is NaN (torch) or 0 (ZERO_FULLY_MASKED, the course notebook), and is counted.
// Synchronisation (docs/architecture.md): each shared write is published by memoryBarrierShared()
// and barrier() before another invocation reads it; every barrier() is in uniform control flow; the
// max and the sum reduce in separate arrays; scores_masked is only written, never read back.
layout(local_size_x = LOCAL_SIZE) in;

layout(std430, binding = 0) readonly buffer ScoresScaled { float scores_scaled[]; };  // (N, H, L, S')
layout(std430, binding = 1) readonly buffer Mask { float mask[]; };  // (m_n, m_h, m_l, S'), each 1 or full
layout(std430, binding = 2) writeonly buffer ScoresMasked { float scores_masked[]; };  // (N, H, L, S')
layout(std430, binding = 3) writeonly buffer Weights { float weights[]; };             // (N, H, L, S')
layout(std430, binding = 4) buffer Counter { uint fully_masked_rows; };

layout(std140, binding = 0) uniform Params {
  int L;
  int S_total;
  int H;
  int has_mask;
  int m_n;  // the merged mask's broadcast sizes: 1 (shared) or N, H, L
  int m_h;
  int m_l;
};

shared float part_max[LOCAL_SIZE];
shared float part_sum[LOCAL_SIZE];
shared uint row_has_nan;  // a NaN score (NaN/Inf inputs) is not a blocked key

const float NEG_INF = uintBitsToFloat(0xff800000u);
const float NAN = uintBitsToFloat(0x7fc00000u);

void main() {
  const int t = int(gl_LocalInvocationID.x);
  const int i = int(gl_WorkGroupID.x), nh = int(gl_WorkGroupID.y), n = nh / H, h = nh % H;
  const int row = (nh * L + i) * S_total;
  const int mask_row = (((m_n > 1 ? n : 0) * m_h + (m_h > 1 ? h : 0)) * m_l + (m_l > 1 ? i : 0)) * S_total;

  if (t == 0) row_has_nan = 0u;
  memoryBarrierShared();
  barrier();
  float row_max = NEG_INF;
  for (int j = t; j < S_total; j += LOCAL_SIZE) {
    const float s = has_mask != 0 ? scores_scaled[row + j] + mask[mask_row + j] : scores_scaled[row + j];
    scores_masked[row + j] = s;
    row_max = row_max < s ? s : row_max;  // std::max's rule: a NaN score never becomes the max
    if (isnan(s)) atomicOr(row_has_nan, 1u);
  }
  part_max[t] = row_max;
  memoryBarrierShared();
  barrier();
  // Tree reduction for any LOCAL_SIZE: each step folds [upper, n) onto [0, n - upper). The trip
  // count depends on LOCAL_SIZE only, so every invocation meets every barrier.
  for (int n_left = LOCAL_SIZE; n_left > 1; n_left = (n_left + 1) / 2) {
    const int upper = (n_left + 1) / 2;
    if (t + upper < n_left) part_max[t] = part_max[t] < part_max[t + upper] ? part_max[t + upper] : part_max[t];
    memoryBarrierShared();
    barrier();
  }
  row_max = part_max[0];
  // exp(-inf - -inf) would be NaN by IEEE rules, which is torch's answer; it is written explicitly
  // because GPU compilers may not keep IEEE NaN semantics.
  // A row of NaN scores also has row_max -inf; it is not fully masked: its NaN goes through the sum
  // to every weight, as in the reference and torch.
  const bool fully_masked = isinf(row_max) && row_max < 0.0 && row_has_nan == 0u;

  // The masked scores are recomputed (the same float addition) rather than read back from
  // scores_masked, so no invocation reads global memory written in this dispatch.
  float sum = 0.0;
  for (int j = t; j < S_total; j += LOCAL_SIZE) {
    const float s = has_mask != 0 ? scores_scaled[row + j] + mask[mask_row + j] : scores_scaled[row + j];
    sum += s == NEG_INF ? 0.0 : exp(s - row_max);
  }
  part_sum[t] = sum;
  memoryBarrierShared();
  barrier();
  for (int n_left = LOCAL_SIZE; n_left > 1; n_left = (n_left + 1) / 2) {
    const int upper = (n_left + 1) / 2;
    if (t + upper < n_left) part_sum[t] += part_sum[t + upper];
    memoryBarrierShared();
    barrier();
  }
  const float inv_denom = 1.0 / part_sum[0];

  // A NaN score makes the sum NaN, and then every weight of the row NaN (0 · NaN included), as in
  // the reference and torch.
  for (int j = t; j < S_total; j += LOCAL_SIZE) {
    const float s = has_mask != 0 ? scores_scaled[row + j] + mask[mask_row + j] : scores_scaled[row + j];
    const float e = s == NEG_INF ? 0.0 : exp(s - row_max);
#ifdef ZERO_FULLY_MASKED
    float w = fully_masked ? 0.0 : e * inv_denom;
#else
    float w = fully_masked ? NAN : e * inv_denom;
#endif
#ifdef MHA_PERTURB
    // Test only (MHA_GPU_PERTURB=softmax): one weight of the first row is 1e-5 too large, the kind
    // of error the self-check must refuse (gpu_backend.hpp, GpuBackend::self_check).
    if (nh == 0 && i == 0 && j == 1) w += 1e-5;
#endif
    weights[row + j] = w;
  }
  if (t == 0 && fully_masked) atomicAdd(fully_masked_rows, 1u);
}
