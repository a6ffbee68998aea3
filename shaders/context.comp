// context = attn_weights @ v_heads: per (batch, head) z-layer, a TILE x TILE block of (query,
// channel), summing over keys in index order (`precise`), as the reference does. GQA: head h reads
// value head kv_head(h).
layout(local_size_x = TILE, local_size_y = TILE) in;

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

shared float ws[TILE][TILE + 1];  // weights[n, h, i0 + ly, j0 + lx]
shared float vs[TILE][TILE];      // v[n, j0 + ly, g·d_k + c0 + lx]

void main() {
  const int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);
  const int c0 = int(gl_WorkGroupID.x) * TILE, i0 = int(gl_WorkGroupID.y) * TILE;
  const int nh = int(gl_WorkGroupID.z), n = nh / H, h = nh % H, g = kv_head(h, H, G);
  const int kv = G * d_k;
  precise float acc = 0.0;
  for (int j0 = 0; j0 < S_total; j0 += TILE) {
    ws[ly][lx] = (i0 + ly < L && j0 + lx < S_total) ? weights[(nh * L + i0 + ly) * S_total + j0 + lx] : 0.0;
    vs[ly][lx] = (j0 + ly < S_total && c0 + lx < d_k) ? v[(n * S_total + j0 + ly) * kv + g * d_k + c0 + lx] : 0.0;
    memoryBarrierShared();
    barrier();
    const int m = min(TILE, S_total - j0);
    for (int j = 0; j < m; ++j) acc += ws[ly][j] * vs[j][lx];
    memoryBarrierShared();
    barrier();
  }
  const int i = i0 + ly, c = c0 + lx;
  if (i < L && c < d_k) context[(nh * L + i) * d_k + c] = acc;
}
