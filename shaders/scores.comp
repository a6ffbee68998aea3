// Per-head scores: scores = q_h·k_gᵀ and scores_scaled = (q_h / √d_k)·k_gᵀ (torch scales q before
// the product), for one (batch, head) per work-group layer z and a TILE x TILE block of (query, key).
// Plain sums in index order (`precise`: no contraction to fma), as the reference's per-head loop.
layout(local_size_x = TILE, local_size_y = TILE) in;

layout(std430, binding = 0) readonly buffer Q { float q[]; };  // (N, L, E): head h is columns h·d_k…
layout(std430, binding = 1) readonly buffer K { float k[]; };  // (N, S', G·d_k)
layout(std430, binding = 2) writeonly buffer Scores { float scores[]; };               // (N, H, L, S')
layout(std430, binding = 3) writeonly buffer ScoresScaled { float scores_scaled[]; };  // (N, H, L, S')

layout(std140, binding = 0) uniform Params {
  int L;
  int S_total;
  int E;
  int H;
  int G;
  int d_k;
  float scale;  // √d_k
};

shared float qs[TILE][TILE];      // q[n, i0 + ly, h·d_k + c0 + lx]
shared float ks[TILE][TILE + 1];  // k[n, j0 + ly, g·d_k + c0 + lx]

void main() {
  const int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);
  const int j0 = int(gl_WorkGroupID.x) * TILE, i0 = int(gl_WorkGroupID.y) * TILE;
  const int nh = int(gl_WorkGroupID.z), n = nh / H, h = nh % H, g = kv_head(h, H, G);
  const int kv = G * d_k;
  precise float raw = 0.0, scaled = 0.0;
  for (int c0 = 0; c0 < d_k; c0 += TILE) {
    const int c = c0 + lx;
    qs[ly][lx] = (i0 + ly < L && c < d_k) ? q[(n * L + i0 + ly) * E + h * d_k + c] : 0.0;
    ks[ly][lx] = (j0 + ly < S_total && c < d_k) ? k[(n * S_total + j0 + ly) * kv + g * d_k + c] : 0.0;
    memoryBarrierShared();
    barrier();
    const int m = min(TILE, d_k - c0);
    for (int cc = 0; cc < m; ++cc) {
      raw += qs[ly][cc] * ks[lx][cc];
      scaled += (qs[ly][cc] / scale) * ks[lx][cc];
    }
    memoryBarrierShared();
    barrier();
  }
  const int i = i0 + ly, j = j0 + lx;
  if (i < L && j < S_total) {
    const int at = (nh * L + i) * S_total + j;
    scores[at] = raw;
    scores_scaled[at] = scaled;
  }
}
