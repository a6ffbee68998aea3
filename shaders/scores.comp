// Per-head scores: scores = q_h·k_gᵀ and scores_scaled = (q_h / √d_k)·k_gᵀ (torch scales q before
// the product), for one (batch, head) per work-group layer z and an MM_TILE x MM_TILE block of
// (query, key). Each invocation computes MM_WORK x MM_WORK of them, rows ly + a·MM_THREADS and
// columns lx + b·MM_THREADS, so that neighbouring invocations touch neighbouring shared and global
// addresses. q and k reach shared memory MM_DEPTH channels at a time, transposed ([channel][row],
// one float of padding against bank conflicts); q / √d_k is divided once as it is loaded.
// Every output sums its channels in index order with plain multiply and add (`precise`: no fma),
// as the reference's per-head loop does.
layout(local_size_x = MM_THREADS, local_size_y = MM_THREADS) in;

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

shared float qs[MM_DEPTH][MM_TILE + 1];   // q[n, i0 + r, h·d_k + c0 + c] at [c][r]
shared float qss[MM_DEPTH][MM_TILE + 1];  // the same / √d_k
shared float ks[MM_DEPTH][MM_TILE + 1];   // k[n, j0 + r, g·d_k + c0 + c] at [c][r]

void main() {
  const int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);
  const int t = ly * MM_THREADS + lx;
  const int j0 = int(gl_WorkGroupID.x) * MM_TILE, i0 = int(gl_WorkGroupID.y) * MM_TILE;
  const int nh = int(gl_WorkGroupID.z), n = nh / H, h = nh % H, g = kv_head(h, H, G);
  const int kv = G * d_k;
  precise float raw[MM_WORK][MM_WORK];
  precise float scaled[MM_WORK][MM_WORK];
  for (int a = 0; a < MM_WORK; ++a)
    for (int b = 0; b < MM_WORK; ++b) {
      raw[a][b] = 0.0;
      scaled[a][b] = 0.0;
    }
  for (int c0 = 0; c0 < d_k; c0 += MM_DEPTH) {
    // Consecutive invocations load consecutive channels of a row (contiguous in q and k).
    for (int e = t; e < MM_TILE * MM_DEPTH; e += MM_THREADS * MM_THREADS) {
      const int r = e / MM_DEPTH, c = e % MM_DEPTH;
      const bool in_c = c0 + c < d_k;
      const float qv = (i0 + r < L && in_c) ? q[(n * L + i0 + r) * E + h * d_k + c0 + c] : 0.0;
      qs[c][r] = qv;
      qss[c][r] = qv / scale;
      ks[c][r] = (j0 + r < S_total && in_c) ? k[(n * S_total + j0 + r) * kv + g * d_k + c0 + c] : 0.0;
    }
    memoryBarrierShared();
    barrier();
    const int m = min(MM_DEPTH, d_k - c0);
    for (int cc = 0; cc < m; ++cc) {
      float kr[MM_WORK];
      for (int b = 0; b < MM_WORK; ++b) kr[b] = ks[cc][lx + b * MM_THREADS];
      for (int a = 0; a < MM_WORK; ++a) {
        const float qa = qs[cc][ly + a * MM_THREADS], qsa = qss[cc][ly + a * MM_THREADS];
        for (int b = 0; b < MM_WORK; ++b) {
          raw[a][b] += qa * kr[b];
          scaled[a][b] += qsa * kr[b];
        }
      }
    }
    memoryBarrierShared();
    barrier();
  }
  for (int a = 0; a < MM_WORK; ++a) {
    const int i = i0 + ly + a * MM_THREADS;
    for (int b = 0; b < MM_WORK; ++b) {
      const int j = j0 + lx + b * MM_THREADS;
      if (i < L && j < S_total) {
        const int at = (nh * L + i) * S_total + j;
        scores[at] = raw[a][b];
        scores_scaled[at] = scaled[a][b];
      }
    }
  }
}
