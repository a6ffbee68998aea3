// The course notebook's case (torch.manual_seed(42), nn.MultiheadAttention(8, 2, bias=False)) through
// the installed engine, its weights printed, then drawn per head with the installed exporter.
//   attention_heads OUT.png
#include <mha/masks.hpp>
#include <mha/mha.hpp>
#include <mha/stage_export.hpp>
#include <mha/torch_rng.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: attention_heads OUT.png\n");
    return 2;
  }
  mha::Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.bias = false;
  const mha::SeededCase<float> nb = mha::torch_seeded_case<float>(c, /*seed=*/42, /*N=*/3, /*L=*/4, /*S=*/4);
  mha::Options o;
  o.backend = mha::Backend::reference;  // rounds as torch does
  const mha::ForwardResult<float> r = mha::forward(c, nb.weights, nb.inputs, o);

  const mha::Stage<float>& w = r.trace["attn_weights"];  // (N, H, L, S)
  std::printf("attn_weights %s, first row of head 0: %.4f %.4f %.4f %.4f\n", mha::shape_str(w.shape).c_str(),
              w.at({0, 0, 0, 0}), w.at({0, 0, 0, 1}), w.at({0, 0, 0, 2}), w.at({0, 0, 0, 3}));

  mha::exporter::StageSlice slice;
  slice.head = mha::exporter::kAllHeads;
  mha::exporter::StageFigure fig = mha::exporter::stage_figure(r, slice);
  fig.spec.font_path = MHA_FONT;
  mha::exporter::write_figure("png", fig.spec, argv[1]);
  std::printf("wrote %s\n", argv[1]);
  return 0;
}
