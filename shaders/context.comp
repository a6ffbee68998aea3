// context = attn_weights @ v_heads: per (batch, head) z-layer, an MM_TILE x MM_TILE block of
// (query, channel). Each invocation computes MM_WORK x MM_WORK of them, rows ly + a·MM_THREADS and
// channels lx + b·MM_THREADS; the weights and v reach shared memory MM_DEPTH keys at a time.
// Every output sums over keys in index order (`precise`: no fma), as the reference does.
// GQA: head h reads value head kv_head(h).
layout(local_size_x = MM_THREADS, local_size_y = MM_THREADS) in;

layout(std430, binding = 0) readonly buffer Weights { float weights[]; };  // (N, H, L, S')
layout(std430, binding = 1) readonly buffer V { float v[]; };              // (N, S', G·d_k)
layout(std430, binding = 2) writeonly buffer Context { float context[]; };  // (N, H, L, d_k)

layout(std140, binding = 0) uniform Params {
  int L;
  int S_total;
  int H;
  int G;
  int d_k;
};

shared float ws[MM_DEPTH][MM_TILE + 1];  // weights[n, h, i0 + r, j0 + j] at [j][r]
shared float vs[MM_DEPTH][MM_TILE + 1];  // v[n, j0 + j, g·d_k + c0 + c] at [j][c]

void main() {
  const int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);
  const int t = ly * MM_THREADS + lx;
  const int c0 = int(gl_WorkGroupID.x) * MM_TILE, i0 = int(gl_WorkGroupID.y) * MM_TILE;
  const int nh = int(gl_WorkGroupID.z), n = nh / H, h = nh % H, g = kv_head(h, H, G);
  const int kv = G * d_k;
  precise float acc[MM_WORK][MM_WORK];
  for (int a = 0; a < MM_WORK; ++a)
    for (int b = 0; b < MM_WORK; ++b) acc[a][b] = 0.0;
  for (int j0 = 0; j0 < S_total; j0 += MM_DEPTH) {
    // Consecutive invocations load consecutive keys of a weights row, and consecutive channels of
    // a v row: both contiguous in memory.
    for (int e = t; e < MM_TILE * MM_DEPTH; e += MM_THREADS * MM_THREADS) {
      const int r = e / MM_DEPTH, j = e % MM_DEPTH;
      ws[j][r] = (i0 + r < L && j0 + j < S_total) ? weights[(nh * L + i0 + r) * S_total + j0 + j] : 0.0;
      const int vj = e / MM_TILE, vc = e % MM_TILE;
      vs[vj][vc] =
          (j0 + vj < S_total && c0 + vc < d_k) ? v[(n * S_total + j0 + vj) * kv + g * d_k + c0 + vc] : 0.0;
    }
    memoryBarrierShared();
    barrier();
    const int m = min(MM_DEPTH, S_total - j0);
    for (int jj = 0; jj < m; ++jj) {
      float vr[MM_WORK];
      for (int b = 0; b < MM_WORK; ++b) vr[b] = vs[jj][lx + b * MM_THREADS];
      for (int a = 0; a < MM_WORK; ++a) {
        const float wa = ws[jj][ly + a * MM_THREADS];
        for (int b = 0; b < MM_WORK; ++b) acc[a][b] += wa * vr[b];
      }
    }
    memoryBarrierShared();
    barrier();
  }
  for (int a = 0; a < MM_WORK; ++a) {
    const int i = i0 + ly + a * MM_THREADS;
    for (int b = 0; b < MM_WORK; ++b) {
      const int c = c0 + lx + b * MM_THREADS;
      if (i < L && c < d_k) context[(nh * L + i) * d_k + c] = acc[a][b];
    }
  }
}
