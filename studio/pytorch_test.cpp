// "Copy as PyTorch" for a whole scenario: a test file a student runs or pastes into a notebook. Its
// numbers are the engine's forward of the scenario, written so that float32 reads them back exactly.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "check.hpp"
#include "compute.hpp"
#include "errors.hpp"
#include "text_parse.hpp"

namespace mha::studio {

namespace {

// Past this many numbers the file is no longer something to paste.
constexpr std::int64_t kMaxNumbers = 1 << 20;

// A Python float literal that reads back as this float.
std::string literal(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";  // the file defines inf and nan
  return python_float_digits(v);
}

std::string sizes(const Shape& shape) {
  std::string out;
  for (std::size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return shape.size() == 1 ? out + "," : out;
}

// `name = t(...)` over one line per innermost row: a flat list reshaped, so that any rank reads alike.
std::string tensor_line(const std::string& name, const Tensor<float>& t, const char* dtype,
                        const std::string& comment) {
  const std::int64_t width = t.shape.empty() ? 1 : t.shape.back();
  std::string out = name + " = t([  # " + comment + "\n";
  for (std::int64_t i = 0; i < t.numel(); i += width) {
    out += "    ";
    for (std::int64_t j = i; j < std::min(t.numel(), i + width); ++j) {
      const float v = t.data[std::size_t(j)];
      out += (std::string(dtype) == "bool" ? (v != 0 ? "1" : "0") : literal(v)) + ", ";
    }
    out.pop_back();
    out += "\n";
  }
  return out + "], (" + sizes(t.shape) + "), torch." + dtype + ")\n";
}

// The mask's values, with bits unpacked (Mask::blocked) into 0/1 or 0/-inf.
Tensor<float> mask_values(const Mask<float>& m) {
  if (!m.values.data.empty() || m.blocked.empty()) return m.values;
  Tensor<float> t(m.values.shape);
  const bool boolean = m.dtype != MaskDType::floating;
  unpack_blocked(m.blocked.data(), t.data.size(), boolean ? 1.f : kMaskBlocked, 0.f, t.data.data());
  return t;
}

}  // namespace

std::string scenario_as_pytorch_test(const Scenario& s) {
  Built b = build_forward(s);
  const Config& c = b.config;
  if (c.kv_heads() != c.num_heads)
    throw ConfigError("num_kv_heads",
                      "torch's nn.MultiheadAttention has no grouped-query heads (num_kv_heads = " +
                          std::to_string(c.kv_heads()) + "): no PyTorch test for this scenario");
  if (b.options.score_divisor != 0)
    throw ConfigError("what_if",
                      "the scenario's what-if (temperature or scale) is not torch's computation: no "
                      "PyTorch test for it");
  const ForwardResult<float> r = forward(c, b.weights, b.inputs, b.options);
  const Dims& d = r.dims;
  const Tensor<float> out = r.output(), weights = r.attn_weights(false);
  std::int64_t numbers =
      b.inputs.query.numel() + b.inputs.key.numel() + b.inputs.value.numel() + out.numel() + weights.numel();
  for (auto& [name, t] : state_dict(b.weights)) numbers += t->numel();
  if (numbers > kMaxNumbers)
    throw ConfigError("--emit-test", "the scenario holds " + std::to_string(numbers) +
                                         " numbers, more than " + std::to_string(kMaxNumbers) +
                                         " to write into a test file");

  const bool self = b.inputs.key.identical(b.inputs.query) && b.inputs.value.identical(b.inputs.query);
  std::string o;
  o += "\"\"\"MHA Studio scenario \"" + s.name + "\" as a PyTorch test.\n\n";
  o +=
      "torch.nn.MultiheadAttention, given these weights, must give `expected` on these inputs; so must your\n"
      "own implementation once it holds the same weights (see check() at the bottom).\n\n"
      "    python3 THIS_FILE.py    (or: pytest THIS_FILE.py)\n\"\"\"\n";
  o += "import torch\nimport torch.nn as nn\n\n";
  o += "inf, nan = float(\"inf\"), float(\"nan\")\n";
  o += "t = lambda values, shape, dtype: torch.tensor(values, dtype=dtype).reshape(shape)  # noqa: E731\n\n";
  char line[256];
  std::snprintf(line, sizeof line,
                "N, L, S, E, H = %lld, %lld, %lld, %lld, %lld  # batch, queries, keys, d_model, heads\n",
                (long long)d.N, (long long)d.L, (long long)d.S, (long long)d.E, (long long)d.H);
  o += line;
  o += "ATOL, RTOL = 1e-5, 1e-4  # torch.allclose(got, expected, atol=ATOL, rtol=RTOL)\n\n";
  o += tensor_line("query", b.inputs.query, "float32", "(N, L, E), batch-first");
  if (self) {
    o += "key = value = query  # self-attention\n";
  } else {
    o += tensor_line("key", b.inputs.key, "float32", "(N, S, kdim)");
    o += tensor_line("value", b.inputs.value, "float32", "(N, S, vdim)");
  }
  o += "\n";
  if (b.inputs.attn_mask) {
    const Mask<float>& m = *b.inputs.attn_mask;
    const bool boolean = m.dtype != MaskDType::floating;
    const Tensor<float> v = mask_values(m);
    const bool per_batch = v.dim() == 3 && b.options.attn_mask_layout == MaskLayout::per_batch;
    o += tensor_line("attn_mask", v, boolean ? "bool" : "float32",
                     std::string(v.dim() == 2 ? "(L, S)"
                                 : per_batch  ? "(N, L, S), one per batch item"
                                              : "(N*H, L, S)") +
                         (boolean ? ", True = blocked" : ", added to the scores: 0 attends, -inf blocks"));
    if (per_batch)
      o += "# torch's 3-D layout is (N*H, L, S), item n head h at n*H + h: repeat_interleave, not repeat\n"
           "attn_mask = attn_mask.repeat_interleave(H, dim=0)\n";
  } else {
    o += "attn_mask = None\n";
  }
  if (b.inputs.key_padding_mask)
    o += tensor_line("key_padding_mask", mask_values(*b.inputs.key_padding_mask),
                     b.inputs.key_padding_mask->dtype == MaskDType::floating ? "float32" : "bool",
                     "(N, S), True = padding");
  else
    o += "key_padding_mask = None\n";

  o += "\nmha = nn.MultiheadAttention(E, H, bias=" + std::string(c.bias ? "True" : "False") +
       ", batch_first=True";
  if (!c.qkv_same_embed_dim())
    o += ", kdim=" + std::to_string(c.key_dim()) + ", vdim=" + std::to_string(c.value_dim());
  if (c.add_bias_kv) o += ", add_bias_kv=True";
  if (c.add_zero_attn) o += ", add_zero_attn=True";
  o += ")\nmha.eval()\nwith torch.no_grad():\n";
  for (auto& [name, tensor] : state_dict(b.weights)) {
    if (tensor->empty()) continue;
    o += tensor_line("    _", *tensor, "float32", std::string(name) + " " + shape_str(tensor->shape));
    o += "    mha." + std::string(name) + ".copy_(_)\n";
  }
  o += "\n";
  o += tensor_line("expected", out, "float32", "(N, L, E): the output, computed by MHA Studio");
  o += tensor_line("expected_weights", weights, "float32", "(N, H, L, S): attention weights per head");
  o += R"(

def test_torch_gives_expected():
    got, got_weights = mha(query, key, value, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           average_attn_weights=False)
    assert torch.allclose(got, expected, atol=ATOL, rtol=RTOL, equal_nan=True), (got - expected).abs().max()
    assert torch.allclose(got_weights, expected_weights, atol=ATOL, rtol=RTOL, equal_nan=True)


def check(got):
    """Your implementation's result on query, key, value and the masks above, with the weights above: an
    (N, L, E) output, or (output, weights). For separate q, k, v, o layers the weights are
        W_q, W_k, W_v = mha.in_proj_weight.chunk(3)  # each (E, E), nn.Linear's (out, in)
        b_q, b_k, b_v = mha.in_proj_bias.chunk(3)    # with bias=True
        W_o, b_o = mha.out_proj.weight, mha.out_proj.bias
    (copy them in under torch.no_grad()). The masks are torch's (True = blocked): your convention may be
    the opposite, e.g. keep = ~attn_mask."""
    got_weights = None
    if isinstance(got, (tuple, list)):
        got, got_weights = got[0], (got[1] if len(got) > 1 else None)
    ok = torch.allclose(got, expected, atol=ATOL, rtol=RTOL, equal_nan=True)
    print(f"output: {'ok' if ok else 'differs'}, max |diff| = {(got - expected).abs().max().item():.3g}")
    if got_weights is not None and got_weights.shape == expected_weights.shape:
        w_ok = torch.allclose(got_weights, expected_weights, atol=ATOL, rtol=RTOL, equal_nan=True)
        print(f"weights: {'ok' if w_ok else 'differ'}")
        ok = ok and w_ok
    return ok


if __name__ == "__main__":
    test_torch_gives_expected()
    print("torch.nn.MultiheadAttention gives the expected output")
)";
  return o;
}

}  // namespace mha::studio
