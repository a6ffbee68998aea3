// F.linear: y[r, o] = sum_i x[r, i] * W[o, i] + b[o], W of shape (out, in), for the q, k, v
// in-projections and the out-projection. Tiled as scores.comp: MM_TILE x MM_TILE outputs per
// work-group, MM_WORK x MM_WORK per invocation (rows ly + a·MM_THREADS, features lx + b·MM_THREADS),
// x and W staged in shared memory MM_DEPTH input features at a time, transposed. Each output sums in
// index order with fused multiply-add, as the reference (and torch's sgemm) does.
layout(local_size_x = MM_THREADS, local_size_y = MM_THREADS) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };   // (rows, in_features)
layout(std430, binding = 1) readonly buffer Wt { float w[]; };  // (out_features, in_features)
layout(std430, binding = 2) readonly buffer Bias { float b[]; };  // (out_features,) if has_bias
layout(std430, binding = 3) writeonly buffer Y { float y[]; };  // (rows', out_features)

layout(std140, binding = 0) uniform Params {
  int rows;
  int in_features;
  int out_features;
  int has_bias;
  // Source row r goes to row (r / src_block) * dst_block + r % src_block: the keys of batch item n
  // land before its bias_k / zero rows (src_block = S, dst_block = S_total). Otherwise both = rows.
  int src_block;
  int dst_block;
};

shared float xs[MM_DEPTH][MM_TILE + 1];  // x[r0 + r, t + c] at [c][r]
shared float ws[MM_DEPTH][MM_TILE + 1];  // W[o0 + o, t + c] at [c][o]

void main() {
  const int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);
  const int id = ly * MM_THREADS + lx;
  const int o0 = int(gl_WorkGroupID.x) * MM_TILE, r0 = int(gl_WorkGroupID.y) * MM_TILE;
  precise float acc[MM_WORK][MM_WORK];
  for (int a = 0; a < MM_WORK; ++a)
    for (int b_ = 0; b_ < MM_WORK; ++b_) acc[a][b_] = 0.0;
  for (int t = 0; t < in_features; t += MM_DEPTH) {
    // Consecutive invocations load consecutive input features of a row (contiguous in x and W).
    for (int e = id; e < MM_TILE * MM_DEPTH; e += MM_THREADS * MM_THREADS) {
      const int r = e / MM_DEPTH, c = e % MM_DEPTH;
      const bool in_c = t + c < in_features;
      xs[c][r] = (r0 + r < rows && in_c) ? x[(r0 + r) * in_features + t + c] : 0.0;
      ws[c][r] = (o0 + r < out_features && in_c) ? w[(o0 + r) * in_features + t + c] : 0.0;
    }
    memoryBarrierShared();
    barrier();
    const int n = min(MM_DEPTH, in_features - t);
    for (int i = 0; i < n; ++i) {
      float wr[MM_WORK];
      for (int b_ = 0; b_ < MM_WORK; ++b_) wr[b_] = ws[i][lx + b_ * MM_THREADS];
      for (int a = 0; a < MM_WORK; ++a) {
        const float xa = xs[i][ly + a * MM_THREADS];
        for (int b_ = 0; b_ < MM_WORK; ++b_) acc[a][b_] = fma(xa, wr[b_], acc[a][b_]);
      }
    }
    memoryBarrierShared();
    barrier();
  }
  for (int a = 0; a < MM_WORK; ++a) {
    const int r = r0 + ly + a * MM_THREADS;
    for (int b_ = 0; b_ < MM_WORK; ++b_) {
      const int o = o0 + lx + b_ * MM_THREADS;
      if (r < rows && o < out_features) {
        const int dst_row = (r / src_block) * dst_block + r % src_block;
        y[dst_row * out_features + o] = has_bias != 0 ? acc[a][b_] + b[o] : acc[a][b_];
      }
    }
  }
}
