// Head concat: context (N, H, L, d_k) -> concat (N, L, H·d_k), torch's
// context.transpose(1, 2).contiguous().view(N, L, E). A grid-stride loop over concat's elements.
layout(local_size_x = LOCAL_SIZE) in;

layout(std430, binding = 0) readonly buffer Context { float context[]; };  // (N, H, L, d_k)
layout(std430, binding = 1) writeonly buffer Concat { float concat[]; };   // (N, L, E)

layout(std140, binding = 0) uniform Params {
  int N;
  int L;
  int H;
  int d_k;
};

void main() {
  const int E = H * d_k, total = N * L * E;
  const int step = int(gl_NumWorkGroups.x) * LOCAL_SIZE;
  for (int at = int(gl_GlobalInvocationID.x); at < total; at += step) {
    const int c = at % d_k, h = (at / d_k) % H, i = (at / E) % L, n = at / (L * E);
    concat[at] = context[((n * H + h) * L + i) * d_k + c];
  }
}
