// Fixture loading and tolerant comparison shared by the table-driven tests.
#include "fixtures.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/npy.hpp"
#include "io/state_dict.hpp"
#include "masks.hpp"

namespace fs = std::filesystem;

namespace mha::test {

namespace {
fs::path dir_of(const std::string& name) {
  return fs::path(MHA_FIXTURES_DIR) / name;
}

template <class T>
Mask<T> load_mask(const std::string& name, const std::string& file) {
  const Array a = read_npy((dir_of(name) / (file + ".npy")).string());
  Mask<T> m;
  m.dtype = a.dtype == DType::boolean ? MaskDType::boolean
            : a.dtype == DType::u8    ? MaskDType::uint8
                                      : MaskDType::floating;
  m.values = to_tensor<T>(a);
  return m;
}
}  // namespace

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(MHA_FIXTURES_DIR))
    if (e.is_directory() && fs::exists(e.path() / "case.json")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json fixture_meta(const std::string& name) {
  std::ifstream f(dir_of(name) / "case.json");
  return nlohmann::json::parse(f);
}

bool has_file(const std::string& name, const std::string& file) {
  return fs::exists(dir_of(name) / (file + ".npy"));
}

template <class T>
Tensor<T> load_tensor(const std::string& name, const std::string& file) {
  return to_tensor<T>(read_npy((dir_of(name) / (file + ".npy")).string()));
}

template <class T>
Fixture<T> load_fixture(const std::string& name) {
  Fixture<T> f;
  f.name = name;
  f.meta = fixture_meta(name);
  const auto& m = f.meta;
  Config& c = f.config;
  c.embed_dim = m["embed_dim"];
  c.num_heads = m["num_heads"];
  c.num_kv_heads = m["num_kv_heads"];
  c.bias = m["bias"];
  c.kdim = m["kdim"];
  c.vdim = m["vdim"];
  c.add_bias_kv = m["add_bias_kv"];
  c.add_zero_attn = m["add_zero_attn"];
  c.batch_first = m["batch_first"];
  f.options.attn_mask_layout =
      m["attn_mask_layout"] == "per_batch" ? MaskLayout::per_batch : MaskLayout::torch;
  f.options.fully_masked = m["fully_masked"] == "zero" ? FullyMasked::zero : FullyMasked::nan;
  f.atol = m["atol"];
  f.rtol = m["rtol"];

  f.inputs.query = load_tensor<T>(name, "query");
  f.inputs.key = load_tensor<T>(name, "key");
  f.inputs.value = load_tensor<T>(name, "value");
  f.weights = read_state_dict<T>(dir_of(name).string(), "");
  if (has_file(name, "attn_mask")) {
    f.inputs.attn_mask = load_mask<T>(name, "attn_mask");
    if (m["mask_convention"] == "keep") f.inputs.attn_mask = mask_from_keep(f.inputs.attn_mask->values);
  }
  if (has_file(name, "key_padding_mask")) f.inputs.key_padding_mask = load_mask<T>(name, "key_padding_mask");
  return f;
}

template <class T>
std::string mismatch(const Tensor<T>& actual, const Tensor<T>& expected, double atol, double rtol) {
  std::ostringstream os;
  if (actual.shape != expected.shape) {
    os << "shape " << shape_str(actual.shape) << " != expected " << shape_str(expected.shape);
    return os.str();
  }
  for (std::size_t i = 0; i < actual.data.size(); ++i) {
    const double a = actual.data[i], e = expected.data[i];
    bool ok;
    if (std::isnan(e) || std::isnan(a))
      ok = std::isnan(e) && std::isnan(a);  // NaN positions must match exactly
    else if (std::isinf(e) || std::isinf(a))
      ok = a == e;
    else
      ok = std::abs(a - e) <= atol + rtol * std::abs(e);
    if (!ok) {
      os.precision(10);
      os << "first mismatch at flat index " << i << ": got " << a << ", expected " << e << " (|diff| "
         << std::abs(a - e) << ", allowed " << atol + rtol * std::abs(e) << ")";
      return os.str();
    }
  }
  return "";
}

template Fixture<float> load_fixture<float>(const std::string&);
template Fixture<double> load_fixture<double>(const std::string&);
template Tensor<float> load_tensor<float>(const std::string&, const std::string&);
template Tensor<double> load_tensor<double>(const std::string&, const std::string&);
template std::string mismatch<float>(const Tensor<float>&, const Tensor<float>&, double, double);
template std::string mismatch<double>(const Tensor<double>&, const Tensor<double>&, double, double);

}  // namespace mha::test
