// Head-averaged weights: attn_weights_avg = attn_weights.sum(dim=1) / num_heads, what
// need_weights=True returns by default. Sums heads in order, as the reference. Grid-stride loop.
layout(local_size_x = LOCAL_SIZE) in;

layout(std430, binding = 0) readonly buffer Weights { float weights[]; };          // (N, H, L, S')
layout(std430, binding = 1) writeonly buffer WeightsAvg { float weights_avg[]; };  // (N, L, S')

layout(std140, binding = 0) uniform Params {
  int N;
  int L;
  int S_total;
  int H;
};

void main() {
  const int total = N * L * S_total, plane = L * S_total;
  const int step = int(gl_NumWorkGroups.x) * LOCAL_SIZE;
  for (int at = int(gl_GlobalInvocationID.x); at < total; at += step) {
    const int n = at / plane, ij = at % plane;
    precise float sum = 0.0;
    for (int h = 0; h < H; ++h) sum += weights[(n * H + h) * plane + ij];
    weights_avg[at] = sum / float(H);
  }
}
