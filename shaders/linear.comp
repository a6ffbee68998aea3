// F.linear: y[r, o] = sum_i x[r, i] * W[o, i] + b[o], W of shape (out, in), as a TILE x TILE tiled
// matmul. Used for the q, k, v in-projections and the out-projection. Each output sums in index
// order with fused multiply-add, as the reference (and torch's sgemm) does.
layout(local_size_x = TILE, local_size_y = TILE) in;

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

shared float xs[TILE][TILE];      // x[r0 + ly, t + lx]
shared float ws[TILE][TILE + 1];  // W[o0 + ly, t + lx]; +1 avoids bank conflicts on ws[lx][i]

void main() {
  const int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);
  const int o0 = int(gl_WorkGroupID.x) * TILE, r0 = int(gl_WorkGroupID.y) * TILE;
  const int o = o0 + lx, r = r0 + ly;
  precise float acc = 0.0;
  for (int t = 0; t < in_features; t += TILE) {
    const int c = t + lx;
    xs[ly][lx] = (r0 + ly < rows && c < in_features) ? x[(r0 + ly) * in_features + c] : 0.0;
    ws[ly][lx] = (o0 + ly < out_features && c < in_features) ? w[(o0 + ly) * in_features + c] : 0.0;
    memoryBarrierShared();
    barrier();
    const int n = min(TILE, in_features - t);
    for (int i = 0; i < n; ++i) acc = fma(xs[ly][i], ws[lx][i], acc);
    memoryBarrierShared();
    barrier();
  }
  if (r < rows && o < out_features) {
    const int dst_row = (r / src_block) * dst_block + r % src_block;
    y[dst_row * out_features + o] = has_bias != 0 ? acc + b[o] : acc;
  }
}
