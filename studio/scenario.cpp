// Scenario: tokens and sizes, the mask presets and their fitting to new sizes, the mask as a torch
// snippet, and the versioned JSON file. A file is parsed into a fresh Scenario that is returned only
// when every field was read, so a bad file never half-applies.
#include "scenario.hpp"

#include "model_cache.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "io/npy.hpp"
#include "limits.hpp"
#include "text_parse.hpp"

namespace mha::studio {

namespace {

// Every number a scenario holds is a float or an integer. A float-based JSON writes floats with the
// 9 digits that round-trip them exactly (not 17); ordered keys keep the file in a readable order.
using Json = nlohmann::basic_json<nlohmann::ordered_map, std::vector, std::string, bool, std::int64_t,
                                  std::uint64_t, float>;

constexpr const char* kFormat = "mha-studio-scenario";

std::int64_t nonneg(std::int64_t v) {
  return v < 0 ? 0 : v;
}

// numel, or -1 where the shape is negative or overflows.
std::int64_t safe_numel(const Shape& shape) {
  try {
    return numel(shape);
  } catch (const Error&) {
    return -1;
  }
}

// Throws TooLargeError (nothing allocated yet) when `dims` holds more than kMaxMaskCells values.
void check_mask_size(const Shape& dims, const std::string& what) {
  const std::int64_t n = safe_numel(dims);
  if (n >= 0 && n <= kMaxMaskCells) return;
  const std::string count = n < 0 ? "more than 2^62" : std::to_string(n);
  throw TooLargeError("mask",
                      "mask: " + what + " = " + shape_str(dims) + " would hold " + count +
                          " cells, more than the " + std::to_string(kMaxMaskCells) +
                          " a scenario keeps; use smaller sizes or the shared scope",
                      n < 0 ? std::numeric_limits<std::uint64_t>::max() : std::uint64_t(n) * sizeof(float),
                      std::uint64_t(kMaxMaskCells) * sizeof(float));
}

// The cells' shape for the mask's scope at the scenario's sizes (negative sizes count as 0).
Shape cells_shape_for(const Scenario& s) {
  const std::int64_t N = nonneg(s.batch), H = nonneg(s.num_heads), L = nonneg(s.L()), S = nonneg(s.S());
  check_mask_size(mask_scope_dims(s.mask.scope, N, H, L, S), mask_scope_dims_text(s.mask.scope));
  return attn_mask_shape(s.mask.scope, N, H, L, S);
}

Shape key_padding_shape_for(const Scenario& s) {
  const Shape shape{nonneg(s.batch), nonneg(s.S())};
  check_mask_size(shape, "key_padding (N, S)");
  return shape;
}

// key_padding's own shape: key_padding_shape when it describes the data, else (N, S) of the current
// sizes when that does (code that edits key_padding in place may leave the shape unset), else one row.
Shape stored_key_padding_shape(const Scenario& s) {
  const MaskSpec& m = s.mask;
  const auto size = std::int64_t(m.key_padding.size());
  if (m.key_padding_shape.size() == 2 && safe_numel(m.key_padding_shape) == size) return m.key_padding_shape;
  if (safe_numel({s.batch, s.S()}) == size) return {s.batch, s.S()};
  return {1, size};
}

// `data` of shape `from` resized to `to` (same rank): overlapping elements kept, the rest 0.
template <class V>
std::vector<V> resize_overlap(const Shape& from, const std::vector<V>& data, const Shape& to) {
  std::vector<V> out(std::size_t(numel(to)), V(0));
  if (from.size() != to.size() || out.empty()) return out;
  const Shape from_strides = contiguous_strides(from);
  Shape idx(to.size(), 0);
  for (std::size_t k = 0; k < out.size(); ++k) {
    bool inside = true;
    std::int64_t src = 0;
    for (std::size_t d = 0; d < to.size() && inside; ++d) {
      inside = idx[d] < from[d];
      src += idx[d] * from_strides[d];
    }
    if (inside) out[k] = data[std::size_t(src)];
    for (std::size_t d = to.size(); d-- > 0;) {
      if (++idx[d] < to[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Custom cells resized to `want`. A shared (L, S) mask becomes every slice of a 3-D one; a 3-D mask
// going shared keeps its first slice.
void fit_cells(MaskSpec& m, const Shape& want) {
  const Shape& old = m.cells_shape;
  const bool have_old = !old.empty() && safe_numel(old) == std::int64_t(m.cells.size());
  if (have_old && old == want) return;  // a head-count change at shared scope: nothing to fit
  std::vector<float> cells;
  if (have_old && old.size() == 2 && want.size() == 3) {
    const std::vector<float> slice = resize_overlap(old, m.cells, {want[1], want[2]});
    for (std::int64_t n = 0; n < want[0]; ++n) cells.insert(cells.end(), slice.begin(), slice.end());
  } else if (have_old && old.size() == 3 && want.size() == 2 && old[0] > 0) {
    const std::vector<float> first(m.cells.begin(), m.cells.begin() + std::ptrdiff_t(old[1] * old[2]));
    cells = resize_overlap({old[1], old[2]}, first, want);
  } else if (have_old) {
    cells = resize_overlap(old, m.cells, want);
  } else {
    cells.assign(std::size_t(numel(want)), 0.0f);
  }
  m.cells = std::move(cells);
  m.cells_shape = want;
}

void fit_key_padding(MaskSpec& m, const Shape& old, const Shape& want) {
  if (m.key_padding.empty()) {
    m.key_padding_shape.clear();
    return;
  }
  m.key_padding = resize_overlap(old, m.key_padding, want);
  m.key_padding_shape = want;
}

bool is_named(MaskPreset p) {
  return p == MaskPreset::causal || p == MaskPreset::sliding_window || p == MaskPreset::block_diagonal ||
         p == MaskPreset::prefix_lm;
}

// ---- mask_as_pytorch ----

// A Python float literal: the shortest that reads back as this float.
std::string py_float(float v) {
  if (std::isnan(v)) return "float('nan')";
  if (std::isinf(v)) return v > 0 ? "float('inf')" : "float('-inf')";
  return python_float_digits(v);
}

// A nested Python list of `shape` with elements elem(flat index); one innermost row per line.
template <class Elem>
std::string py_list(const Shape& shape, Elem elem) {
  if (shape.empty()) return elem(0);
  const Shape strides = contiguous_strides(shape);
  // `col` is the column the opening bracket sits in, so the rows below line up under it.
  auto sub = [&](auto& self, std::size_t dim, std::int64_t offset, std::size_t col) -> std::string {
    std::string out = "[";
    for (std::int64_t k = 0; k < shape[dim]; ++k) {
      if (k > 0) out += dim + 1 == shape.size() ? ", " : ",\n" + std::string(col + 1, ' ');
      if (dim + 1 == shape.size())
        out += elem(std::size_t(offset + k));
      else
        out += self(self, dim + 1, offset + k * strides[dim], col + 1);
    }
    return out + "]";
  };
  if (shape.size() < 2) return sub(sub, 0, 0, 0);
  std::string out = "[\n";
  for (std::int64_t k = 0; k < shape[0]; ++k) out += "    " + sub(sub, 1, k * strides[0], 4) + ",\n";
  return out + "]";
}

std::string py_sizes(const Shape& shape) {
  std::string out;
  for (std::size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out;
}

// A tensor literal; torch.tensor of an empty nested list would lose the shape, so empty ones use zeros.
template <class Elem>
std::string py_tensor(const Shape& shape, std::size_t count, const char* dtype, Elem elem) {
  if (count == 0)
    return "torch.zeros((" + py_sizes(shape) + (shape.size() == 1 ? "," : "") + "), dtype=" + dtype + ")";
  return "torch.tensor(" + py_list(shape, elem) + ")";
}

// A named preset as torch expressions on one (L, S) slice.
struct ClosedForm {
  std::string setup;    // lines defining the helpers the expressions use
  std::string blocked;  // bool, True = blocked
  std::string keep;     // float, 1 = attend
};

ClosedForm closed_form(const MaskSpec& m, std::int64_t L, std::int64_t S) {
  const std::string l = std::to_string(L), s = std::to_string(S);
  const std::string positions = "i = torch.arange(" + l + ")[:, None]  # query positions, a column\n" +
                                "j = torch.arange(" + s + ")[None, :]  # key positions, a row\n";
  switch (m.preset) {
    case MaskPreset::causal:
      return {"", "torch.triu(torch.ones(" + l + ", " + s + ", dtype=torch.bool), diagonal=1)",
              "torch.tril(torch.ones(" + l + ", " + s + "))"};
    case MaskPreset::sliding_window: {
      const std::string lo = m.window >= 0 ? "i - " + std::to_string(m.window)
                                           : "i + " + std::to_string(-std::int64_t(m.window));
      return {positions, "(j > i) | (j <= " + lo + ")", "((j <= i) & (j > " + lo + ")).float()"};
    }
    case MaskPreset::prefix_lm: {
      const std::string p = std::to_string(m.prefix);
      return {positions, "(j >= " + p + ") & (j > i)", "((j < " + p + ") | (j <= i)).float()"};
    }
    default: {  // block_diagonal
      const std::string k = std::to_string(std::max(1, m.segments));
      return {"seg_q = torch.arange(" + l + ") * " + k + " // " + l + "  # segment of each query\n" +
                  "seg_k = torch.arange(" + s + ") * " + k + " // " + s + "  # segment of each key\n",
              "seg_q[:, None] != seg_k[None, :]", "(seg_q[:, None] == seg_k[None, :]).float()"};
    }
  }
}

// ---- JSON ----

const std::pair<const char*, Tensor<float> Weights<float>::*> kWeightFields[] = {
    {"in_proj_weight", &Weights<float>::in_proj_weight},
    {"in_proj_bias", &Weights<float>::in_proj_bias},
    {"out_proj.weight", &Weights<float>::out_proj_weight},
    {"out_proj.bias", &Weights<float>::out_proj_bias},
    {"q_proj_weight", &Weights<float>::q_proj_weight},
    {"k_proj_weight", &Weights<float>::k_proj_weight},
    {"v_proj_weight", &Weights<float>::v_proj_weight},
    {"bias_k", &Weights<float>::bias_k},
    {"bias_v", &Weights<float>::bias_v},
};

// JSON has no inf or nan: they are written as the strings "inf", "-inf", "nan".
Json float_json(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

Json tensor_json(const Shape& shape, const std::vector<float>& data) {
  Json values = Json::array();
  values.get_ref<Json::array_t&>().reserve(data.size());
  for (float v : data) values.push_back(float_json(v));
  return Json{{"shape", shape}, {"data", std::move(values)}};
}

// The file's text, as dump(2) would write it except that arrays of numbers stay on one line and a
// "data" array next to a "shape" gets one line per innermost row, so masks and tensors read as grids.
// Scalars go through one nlohmann serializer appending to `out` (what dump() writes, without a
// string per value: a 3.7-million-cell mask took 0.9 s to save that way, on the UI thread's autosave).
using Serializer = nlohmann::detail::serializer<Json>;

void write_json(Serializer& ser, std::string& out, const Json& j, int indent, std::int64_t row) {
  // replace: a name that is not valid UTF-8 is written with U+FFFD rather than failing the save.
  const auto scalar = [&](const Json& v) { ser.dump(v, false, false, 0); };
  const std::string pad(std::size_t(indent + 2), ' '), end = "\n" + std::string(std::size_t(indent), ' ');
  if (j.is_object() && !j.empty()) {
    const auto shape = j.find("shape");
    const std::int64_t data_row =
        shape != j.end() && shape->is_array() && !shape->empty() && shape->back().is_number_integer()
            ? shape->back().get<std::int64_t>()
            : 0;
    out += "{";
    for (auto it = j.begin(); it != j.end(); ++it) {
      out += it == j.begin() ? "\n" : ",\n";
      out += pad;
      scalar(Json(it.key()));
      out += ": ";
      write_json(ser, out, it.value(), indent + 2, it.key() == "data" ? data_row : 0);
    }
    out += end + "}";
  } else if (j.is_array() && !j.empty()) {
    const bool flat = std::none_of(j.begin(), j.end(), [](const Json& v) { return v.is_structured(); });
    out += "[";
    for (std::size_t k = 0; k < j.size(); ++k) {
      if (!flat || (row > 0 && std::int64_t(k) % row == 0)) {
        out += k ? ",\n" : "\n";
        out += pad;
      } else if (k) {
        out += ", ";
      }
      if (flat)
        scalar(j[k]);
      else
        write_json(ser, out, j[k], indent + 2, 0);
    }
    out += !flat || row > 0 ? end + "]" : "]";
  } else {
    scalar(j);
  }
}

void write_json(std::string& out, const Json& j) {
  Serializer ser(nlohmann::detail::output_adapter<char, std::string>(out), ' ',
                 Json::error_handler_t::replace);
  write_json(ser, out, j, 0, 0);
}

const char* to_string(FullyMasked f) {
  return f == FullyMasked::zero ? "zero" : "nan";
}

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// Reads a parsed scenario into a fresh Scenario; every error names the file and the field.
class Reader {
 public:
  Reader(std::string name, std::filesystem::path base_dir)
      : name_(std::move(name)), base_(std::move(base_dir)) {}

  [[noreturn]] void fail(const std::string& what) const { throw FileError(name_, name_ + ": " + what); }

  Scenario read(const Json& j) const {
    if (!j.is_object()) fail("expected a JSON object at the top level, got " + describe(j));
    const auto format = j.find("format");
    if (format == j.end())
      fail(std::string("not an MHA Studio scenario: it has no \"format\": \"") + kFormat + "\"");
    if (!format->is_string() || format->get<std::string>() != kFormat)
      fail("not an MHA Studio scenario: \"format\" is " + describe(*format) + ", expected \"" + kFormat +
           "\"");
    const auto version_it = j.find("version");
    if (version_it == j.end()) fail("\"version\" is missing");
    const std::int64_t version = integer(*version_it, "version");
    if (version > Scenario::kVersion)
      fail("was written by a newer MHA Studio (version " + std::to_string(version) +
           "); this one reads version " + std::to_string(Scenario::kVersion));
    if (version < 1)
      fail("version " + std::to_string(version) +
           " is not a scenario version (this MHA Studio reads version " + std::to_string(Scenario::kVersion) +
           ")");

    Scenario s;
    get(j, "", "name", s.name);
    if (const Json* z = object(j, "", "sizes")) {
      const std::pair<const char*, std::int64_t*> sizes[] = {
          {"batch", &s.batch},         {"tgt_len", &s.tgt_len},     {"src_len", &s.src_len},
          {"embed_dim", &s.embed_dim}, {"num_heads", &s.num_heads}, {"num_kv_heads", &s.num_kv_heads}};
      for (const auto& [key, out] : sizes) {
        get(*z, "sizes", key, *out);
        if (*out < 0)
          fail("sizes." + std::string(key) + ": must not be negative, got " + std::to_string(*out));
        // The upper bound is the CLI's and the app's (limits.hpp); 0 keeps its meaning here (N = 0 is
        // refused by the forward, a 0 src_len or num_kv_heads means "as tgt_len / num_heads").
        if (*out > limits::kBatch.max)
          fail(limits::out_of_range("sizes." + std::string(key), limits::kBatch, std::to_string(*out)));
      }
    }
    get(j, "", "bias", s.bias);
    get(j, "", "cross_attention", s.cross_attention);
    get(j, "", "separate_qkv", s.separate_qkv);
    get(j, "", "seed", s.seed);
    get(j, "", "sentence", s.sentence);
    get(j, "", "source_sentence", s.source_sentence);
    get(j, "", "model", s.model);
    get(j, "", "layer", s.layer);
    if (s.layer < 0) fail("layer: must not be negative, got " + std::to_string(s.layer));
    get_enum(j, "", "fully_masked", s.fully_masked, {FullyMasked::nan, FullyMasked::zero});
    if (const Json* w = object(j, "", "what_if")) {
      get(*w, "what_if", "temperature", s.what_if.temperature);
      if (!(s.what_if.temperature > 0) || !std::isfinite(s.what_if.temperature))
        fail("what_if.temperature: must be a finite number above 0, got " + describe((*w)["temperature"]));
      get(*w, "what_if", "scale_by_sqrt_dk", s.what_if.scale_by_sqrt_dk);
    }
    if (const Json* k = object(j, "", "knockouts")) read_knockouts(*k, s);
    if (const Json* m = object(j, "", "mask")) read_mask(*m, s);
    if (const Json* t = object(j, "", "tensors")) read_tensors(*t, s);
    if (const Json* v = object(j, "", "view")) read_view(*v, s);
    try {
      adopt_model_sizes(s);  // a model's sizes win over the file's
    } catch (const Error&) {
      // A model folder that does not load: the scenario still opens; computing it says why.
    }
    try {
      fit_mask_to_sizes(s);  // regenerates a named preset's cells; fits hand-edited shapes to the sizes
    } catch (const Error& e) {
      fail(e.what());
    }
    clamp_view(s.view);
    return s;
  }

 private:
  // "knockouts": {"heads": [[layer, head], …], "ablation": "zero" | "mean"}. Heads outside the model
  // are refused by the forward (the file still opens; computing it says which).
  void read_knockouts(const Json& k, Scenario& s) const {
    get_enum(k, "knockouts", "ablation", s.knockouts.ablation, {Ablation::zero, Ablation::mean});
    if (!k.contains("heads")) return;
    const Json& heads = k["heads"];
    if (!heads.is_array()) fail("knockouts.heads: expected a list of [layer, head] pairs");
    for (const Json& h : heads) {
      if (!h.is_array() || h.size() != 2 || !h[0].is_number_unsigned() || !h[1].is_number_unsigned())
        fail("knockouts.heads: expected [layer, head] pairs of indices from 0, got " + describe(h));
      s.knockouts.heads.push_back({h[0].get<std::int64_t>(), h[1].get<std::int64_t>()});
    }
    std::sort(s.knockouts.heads.begin(), s.knockouts.heads.end());
    s.knockouts.heads.erase(std::unique(s.knockouts.heads.begin(), s.knockouts.heads.end()),
                            s.knockouts.heads.end());
  }

  static std::string describe(const Json& v) {
    std::string t = v.dump(-1, ' ', false, Json::error_handler_t::replace);
    return t.size() > 40 ? t.substr(0, 37) + "..." : t;
  }

  // View fields steer drawing only: a value outside what the views can show (a font scale of 1e30 or
  // -3, a negative selection) is brought into range rather than refusing the whole scenario.
  static void clamp_view(ViewState& v) {
    for (int* index :
         {&v.batch_index, &v.compare_a, &v.compare_b, &v.sel_head, &v.sel_query, &v.sel_key, &v.head_order})
      *index = std::max(*index, 0);

    v.reshape_step = std::clamp(v.reshape_step, 0, 5);
    v.mistake = std::clamp(v.mistake, 0, 3);
  }

  // The member `key` of `obj`, or nullptr when absent (absent keys keep their defaults).
  static const Json* find(const Json& obj, const char* key) {
    const auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const Json* object(const Json& obj, const std::string& path, const char* key) const {
    const Json* v = find(obj, key);
    if (v && !v->is_object()) fail(join(path, key) + ": expected an object, got " + describe(*v));
    return v;
  }

  std::int64_t integer(const Json& v, const std::string& path) const {
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
        fail(path + ": " + describe(v) + " is too large");
      return std::int64_t(v.get<std::uint64_t>());
    }
    if (v.is_number_integer()) return v.get<std::int64_t>();
    fail(path + ": expected an integer, got " + describe(v));
  }
  float number(const Json& v, const std::string& path) const {
    float x;
    if (!number(v, &x))
      fail(path + ": expected a number (or \"inf\", \"-inf\", \"nan\"), got " + describe(v));
    return x;
  }
  static bool number(const Json& v, float* x) {  // false: not a number (the caller names the path)
    if (v.is_number()) return *x = v.get<float>(), true;
    if (!v.is_string()) return false;
    const std::string& t = v.get_ref<const std::string&>();
    if (t == "inf") return *x = std::numeric_limits<float>::infinity(), true;
    if (t == "-inf") return *x = -std::numeric_limits<float>::infinity(), true;
    if (t == "nan") return *x = std::numeric_limits<float>::quiet_NaN(), true;
    return false;
  }

  void get(const Json& obj, const std::string& path, const char* key, std::int64_t& out) const {
    if (const Json* v = find(obj, key)) out = integer(*v, join(path, key));
  }
  void get(const Json& obj, const std::string& path, const char* key, int& out) const {
    if (const Json* v = find(obj, key)) {
      const std::int64_t i = integer(*v, join(path, key));
      if (i < INT_MIN || i > INT_MAX) fail(join(path, key) + ": " + std::to_string(i) + " is out of range");
      out = int(i);
    }
  }
  void get(const Json& obj, const std::string& path, const char* key, std::uint64_t& out) const {
    const Json* v = find(obj, key);
    if (!v) return;
    if (!v->is_number_unsigned())
      fail(join(path, key) + ": expected a non-negative integer, got " + describe(*v));
    out = v->get<std::uint64_t>();
  }
  void get(const Json& obj, const std::string& path, const char* key, bool& out) const {
    const Json* v = find(obj, key);
    if (!v) return;
    if (!v->is_boolean()) fail(join(path, key) + ": expected true or false, got " + describe(*v));
    out = v->get<bool>();
  }
  void get(const Json& obj, const std::string& path, const char* key, float& out) const {
    if (const Json* v = find(obj, key)) out = number(*v, join(path, key));
  }
  void get(const Json& obj, const std::string& path, const char* key, std::string& out) const {
    const Json* v = find(obj, key);
    if (!v) return;
    if (!v->is_string()) fail(join(path, key) + ": expected a string, got " + describe(*v));
    out = v->get<std::string>();
  }
  template <class E>
  void get_enum(const Json& obj, const std::string& path, const char* key, E& out,
                std::initializer_list<E> values) const {
    const Json* v = find(obj, key);
    if (!v) return;
    std::string names;
    for (E e : values) {
      if (v->is_string() && v->get<std::string>() == to_string(e)) {
        out = e;
        return;
      }
      names += std::string(names.empty() ? "" : ", ") + "\"" + to_string(e) + "\"";
    }
    fail(join(path, key) + ": expected one of " + names + ", got " + describe(*v));
  }

  Shape shape(const Json& obj, const std::string& path) const {
    const Json* v = find(obj, "shape");
    if (!v) fail(path + ": \"shape\" is missing");
    if (!v->is_array()) fail(path + ".shape: expected an array of sizes, got " + describe(*v));
    Shape out;
    for (std::size_t d = 0; d < v->size(); ++d) {
      const std::string at = path + ".shape[" + std::to_string(d) + "]";
      out.push_back(integer((*v)[d], at));
      if (out.back() < 0) fail(at + ": must not be negative, got " + std::to_string(out.back()));
    }
    return out;
  }
  // "data" checked against `shape` before anything is allocated for it.
  const Json& data(const Json& obj, const std::string& path, const Shape& sh) const {
    const Json* v = find(obj, "data");
    if (!v) fail(path + ": \"data\" is missing");
    if (!v->is_array()) fail(path + ".data: expected an array of numbers, got " + describe(*v));
    const std::int64_t n = safe_numel(sh);
    if (n < 0 || std::size_t(n) != v->size())
      fail(path + ": shape " + shape_str(sh) + " needs " + (n < 0 ? "more than 2^62" : std::to_string(n)) +
           " values, data has " + std::to_string(v->size()));
    return *v;
  }

  Tensor<float> tensor(const Json& v, const std::string& path) const {
    if (!v.is_object())
      fail(path + ": expected an object with \"shape\" and \"data\" (or \"npy\"), got " + describe(v));
    if (const Json* npy = find(v, "npy")) {
      if (!npy->is_string()) fail(path + ".npy: expected a file name, got " + describe(*npy));
      const std::string file = (base_ / npy->get<std::string>()).string();
      try {
        return to_tensor<float>(read_npy(file));
      } catch (const Error& e) {
        fail(path + ": " + e.what());
      }
    }
    Tensor<float> t;
    t.shape = shape(v, path);
    const Json& values = data(v, path, t.shape);
    t.data.reserve(values.size());
    for (std::size_t k = 0; k < values.size(); ++k) {  // the path is spelled out only on an error
      float x;
      if (!number(values[k], &x)) x = number(values[k], path + ".data[" + std::to_string(k) + "]");
      t.data.push_back(x);
    }
    return t;
  }

  void read_mask(const Json& j, Scenario& s) const {
    MaskSpec& m = s.mask;
    get_enum(j, "mask", "preset", m.preset,
             {MaskPreset::none, MaskPreset::causal, MaskPreset::padding, MaskPreset::sliding_window,
              MaskPreset::block_diagonal, MaskPreset::prefix_lm, MaskPreset::random, MaskPreset::custom});
    get_enum(j, "mask", "scope", m.scope, {MaskScope::shared, MaskScope::per_batch, MaskScope::per_head});
    get_enum(j, "mask", "convention", m.convention,
             {MaskConvention::torch_bool, MaskConvention::keep, MaskConvention::additive});
    get(j, "mask", "window", m.window);
    get(j, "mask", "segments", m.segments);
    get(j, "mask", "prefix", m.prefix);
    get(j, "mask", "random_p", m.random_p);
    get(j, "mask", "random_seed", m.random_seed);
    // Only a custom mask's cells are stored; a named preset's are made again from the sizes.
    if (const Json* c = object(j, "mask", "cells"); c && m.preset == MaskPreset::custom) {
      Tensor<float> t = tensor(*c, "mask.cells");
      // Any other rank would be fitted to the sizes as all zeros: the cells would be lost in silence.
      if (t.shape.size() != 2 && t.shape.size() != 3)
        fail("mask.cells.shape: a custom mask is (L, S), (N, L, S) or (N*num_heads, L, S), got " +
             shape_str(t.shape));
      m.cells = std::move(t.data);
      m.cells_shape = std::move(t.shape);
    }
    if (const Json* kp = object(j, "mask", "key_padding")) {
      const Shape sh = shape(*kp, "mask.key_padding");
      if (sh.size() != 2) fail("mask.key_padding.shape: expected [N, S], got " + describe((*kp)["shape"]));
      const Json& values = data(*kp, "mask.key_padding", sh);
      for (std::size_t k = 0; k < values.size(); ++k) {
        const Json& v = values[k];
        if (v.is_boolean())
          m.key_padding.push_back(v.get<bool>());
        else if (v.is_number_integer() && (v.get<std::int64_t>() == 0 || v.get<std::int64_t>() == 1))
          m.key_padding.push_back(std::uint8_t(v.get<std::int64_t>()));
        else
          fail("mask.key_padding.data[" + std::to_string(k) + "]: expected 0 or 1, got " + describe(v));
      }
      m.key_padding_shape = sh;
    }
  }

  void read_tensors(const Json& j, Scenario& s) const {
    // A tensor under another name ("in_proj.weight") would be ignored and the generated one used.
    std::string known = "query, key, value";
    for (const auto& field : kWeightFields) known += std::string(", ") + field.first;
    for (auto it = j.begin(); it != j.end(); ++it) {
      bool found = it.key() == "query" || it.key() == "key" || it.key() == "value";
      for (const auto& field : kWeightFields) found = found || it.key() == field.first;
      if (!found)
        fail("tensors.\"" + it.key() + "\": not a tensor a scenario holds (expected: " + known + ")");
    }
    const std::pair<const char*, std::optional<Tensor<float>>*> inputs[] = {
        {"query", &s.query}, {"key", &s.key}, {"value", &s.value}};
    for (const auto& [key, out] : inputs)
      if (const Json* v = find(j, key)) *out = tensor(*v, join("tensors", key));
    for (const auto& [key, member] : kWeightFields)
      if (const Json* v = find(j, key)) {
        if (!s.weights) s.weights.emplace();
        (*s.weights).*member = tensor(*v, join("tensors", key));
      }
  }

  void read_view(const Json& j, Scenario& s) const {
    ViewState& v = s.view;
    // A view by name (any case), or by its number (files written before views were saved by name).
    if (const Json* t = find(j, "tab"); t && t->is_string()) {
      const ViewInfo* info = find_view(t->get<std::string>());
      if (!info) fail("view.tab: expected one of " + view_names() + ", got " + describe(*t));
      s.suggested_tab = info->id;
    } else if (t) {
      int number = 0;
      get(j, "view", "tab", number);
      if (number >= 0 && number < int(views().size())) s.suggested_tab = ViewTab(number);
    }
    get(j, "view", "batch_index", v.batch_index);
    get(j, "view", "stage", v.stage);
    int compare_mode =
        int(v.compare_mode);  // a saved mode: two heads or before/after (pins are the session's)
    get(j, "view", "compare_mode", compare_mode);
    v.compare_mode = CompareMode(std::clamp(compare_mode, 0, 1));
    get(j, "view", "compare_a", v.compare_a);
    get(j, "view", "compare_b", v.compare_b);
    get(j, "view", "show_values", v.show_values);
    get(j, "view", "weights_row_scale", v.weights_row_scale);
    get(j, "view", "reshape_step", v.reshape_step);
    get(j, "view", "mistake", v.mistake);
    get(j, "view", "head_order", v.head_order);
    get(j, "view", "sel_head", v.sel_head);
    get(j, "view", "sel_query", v.sel_query);
    get(j, "view", "sel_key", v.sel_key);
    get(j, "view", "overview_layers", v.overview_layers);
    if (const Json* hh = find(j, "hidden_heads")) {
      if (!hh->is_array()) fail("view.hidden_heads: expected an array of head numbers, got " + describe(*hh));
      v.hidden_heads.clear();
      for (std::size_t k = 0; k < hh->size(); ++k)
        v.hidden_heads.push_back(int(integer((*hh)[k], "view.hidden_heads[" + std::to_string(k) + "]")));
    }
  }

  std::string name_;
  std::filesystem::path base_;
};

// `base_dir` resolves {"npy": "..."} tensors: the scenario file's folder, or the working directory.
Scenario parse_scenario(const std::string& text, const std::string& name,
                        const std::filesystem::path& base_dir) {
  const Reader reader(name, base_dir);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    if (const auto close = what.find("] ");
        what.rfind("[json.exception", 0) == 0 && close != std::string::npos)
      what.erase(0, close + 2);
    reader.fail("malformed JSON: " + what);
  }
  return reader.read(j);
}

}  // namespace

bool Knockouts::has(const HeadRef& h) const {
  return std::binary_search(heads.begin(), heads.end(), h);
}

double WhatIf::divisor(std::int64_t d_k) const {
  return (scale_by_sqrt_dk ? std::sqrt(double(d_k)) : 1.0) * double(temperature);
}

std::vector<std::string> tokenize(const std::string& sentence) {
  std::vector<std::string> tokens;
  std::string current;
  for (char c : sentence) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      current += c;
    } else if (!current.empty()) {
      tokens.push_back(current);
      current.clear();
    }
  }
  if (!current.empty()) tokens.push_back(current);
  return tokens;
}

void adopt_model_sizes(Scenario& s) {
  if (!s.has_model()) return;
  const LanguageModel& m = *model_entry(s.model)->loaded.model;
  const ModelSizes c = m.sizes();
  s.batch = 1;
  s.embed_dim = c.n_embd;
  s.num_heads = c.n_head;
  s.num_kv_heads = c.n_kv_head < c.n_head ? c.n_kv_head : 0;  // grouped-query attention
  s.bias = m.attention_config().bias;
  s.cross_attention = false;
  s.separate_qkv = false;
  s.layer = std::clamp<std::int64_t>(s.layer, 0, c.n_layer - 1);
  s.tgt_len = s.src_len = std::max<std::int64_t>(s.L(), 1);
}

void set_model(Scenario& s, const std::string& model) {
  Scenario next = s;
  next.model = model;
  next.knockouts.heads.clear();  // another model's heads
  if (next.has_model()) {
    if (next.sentence.empty()) next.sentence = "The cat sat on the mat and looked at the door.";
    adopt_model_sizes(next);
    next.mask = MaskSpec{};
    next.mask.preset = MaskPreset::causal;  // the model's own mask; painting it is a what-if
    next.query.reset();
    next.key.reset();
    next.value.reset();
    next.weights.reset();
  }
  if (next.mask.preset == MaskPreset::custom) next.mask.preset = MaskPreset::causal;
  apply_mask_preset(next);
  fit_mask_to_sizes(next);
  s = std::move(next);
}

bool set_layer(Scenario& s, std::int64_t layer) {
  if (!s.has_model()) return false;
  const std::int64_t n = model_entry(s.model)->loaded.model->sizes().n_layer;
  layer = std::clamp<std::int64_t>(layer, 0, n - 1);
  if (layer == s.layer) return false;
  s.layer = layer;
  s.mask.preset = MaskPreset::causal;
  apply_mask_preset(s);
  return true;
}

std::int64_t Scenario::L() const {
  if (has_model()) {
    try {
      return std::int64_t(model_tokens(model, sentence).ids.size());
    } catch (const Error&) {
      return 0;  // the forward reports why (build_forward asks the model again)
    }
  }
  const std::size_t n = tokenize(sentence).size();
  return n > 0 ? std::int64_t(n) : tgt_len;
}

std::int64_t Scenario::S() const {
  if (!cross_attention) return L();
  const std::size_t n = tokenize(source_sentence).size();
  return n > 0 ? std::int64_t(n) : src_len;
}

std::vector<std::string> Scenario::query_tokens() const {
  if (has_model()) {
    try {
      return model_tokens(model, sentence).labels;
    } catch (const Error&) {
      return {};
    }
  }
  std::vector<std::string> tokens = tokenize(sentence);
  if (tokens.empty())
    for (std::int64_t i = 0; i < tgt_len; ++i) tokens.push_back("t" + std::to_string(i));
  return tokens;
}

std::vector<std::string> Scenario::key_tokens() const {
  if (!cross_attention) return query_tokens();
  std::vector<std::string> tokens = tokenize(source_sentence);
  if (tokens.empty())
    for (std::int64_t j = 0; j < src_len; ++j) tokens.push_back("s" + std::to_string(j));
  return tokens;
}

void apply_mask_preset(Scenario& s) {
  MaskSpec& m = s.mask;
  // Every size check comes before the first change, so a throw leaves the mask as it was.
  const Shape kp_want = key_padding_shape_for(s), kp_old = stored_key_padding_shape(s);
  switch (m.preset) {
    case MaskPreset::none:
      m.cells.clear();
      m.cells_shape.clear();
      fit_key_padding(m, kp_old, kp_want);
      return;
    case MaskPreset::custom: fit_key_padding(m, kp_old, kp_want); return;
    case MaskPreset::padding:
      m.cells.clear();
      m.cells_shape.clear();
      m.key_padding = padding_preset(kp_want[0], kp_want[1]);
      m.key_padding_shape = kp_want;
      return;
    default: {
      const Shape shape = cells_shape_for(s);
      m.cells = preset_cells(m.preset, m.params(), shape);
      m.cells_shape = shape;
      fit_key_padding(m, kp_old, kp_want);
    }
  }
}

void fit_mask_to_sizes(Scenario& s) {
  if (s.mask.preset != MaskPreset::custom) {
    apply_mask_preset(s);
    return;
  }
  const Shape want = cells_shape_for(s), kp_want = key_padding_shape_for(s),
              kp_old = stored_key_padding_shape(s);
  fit_cells(s.mask, want);
  fit_key_padding(s.mask, kp_old, kp_want);
}

std::string mask_as_pytorch(const Scenario& s) {
  const MaskSpec& m = s.mask;
  const std::int64_t N = nonneg(s.batch), H = nonneg(s.num_heads), L = nonneg(s.L()), S = nonneg(s.S());
  const std::string n = std::to_string(N), h = std::to_string(H);
  std::string o = "import torch\n";
  o += "# MHA Studio mask: preset " + std::string(to_string(m.preset)) + ", scope " + to_string(m.scope) +
       ", N=" + n + ", num_heads=" + h + ", L=" + std::to_string(L) + ", S=" + std::to_string(S) + "\n";

  if (m.cells.empty()) {
    o += "attn_mask = None\n";
  } else {
    // A closed form only when the cells are exactly what the preset makes at these sizes.
    bool closed = false;
    if (is_named(m.preset)) {
      try {
        const Shape want = cells_shape_for(s);
        closed = want == m.cells_shape && preset_cells(m.preset, m.params(), want) == m.cells;
      } catch (const Error&) {
      }
    }
    // bool and keep masks can only say attend (0) or blocked (-inf); other values need a float mask.
    const bool binary = std::all_of(m.cells.begin(), m.cells.end(),
                                    [](float v) { return v == 0 || (std::isinf(v) && v < 0); });
    MaskConvention conv = m.convention;
    if (!binary && conv != MaskConvention::additive) {
      o += "# the mask holds values other than 0 and -inf, which only a float (additive) mask can hold\n";
      conv = MaskConvention::additive;
    }
    if (m.preset == MaskPreset::random)
      o += "# random preset (p=" + py_float(m.random_p) + ", seed " + std::to_string(m.random_seed) +
           ") drawn by MHA Studio's own generator, so the values are written out\n";

    if (closed) {
      const ClosedForm f = closed_form(m, L, S);
      o += f.setup;
      switch (conv) {
        case MaskConvention::torch_bool: o += "attn_mask = " + f.blocked + "  # True = blocked\n"; break;
        case MaskConvention::keep:
          o += "keep = " + f.keep + "  # 1 = attend (course convention)\n";
          o += "attn_mask = keep == 0  # torch wants True = blocked\n";
          break;
        case MaskConvention::additive:
          o += "attn_mask = torch.zeros(" + std::to_string(L) + ", " + std::to_string(S) + ").masked_fill(" +
               f.blocked + ", float('-inf'))  # 0 = attend, -inf = blocked\n";
          break;
      }
      if (m.scope == MaskScope::per_batch)
        o +=
            "attn_mask = attn_mask.repeat(" + n + ", 1, 1)  # (N, L, S): the same mask for each batch item\n";
      if (m.scope == MaskScope::per_head)
        o += "attn_mask = attn_mask.repeat(" + std::to_string(N * H) +
             ", 1, 1)  # (N·num_heads, L, S): one mask per (batch item n, head h) at n·num_heads + h\n";
    } else {
      if (m.scope == MaskScope::per_head)
        o += "# (N·num_heads, L, S): the mask of batch item n, head h is at n·num_heads + h (batch-major)\n";
      const std::size_t count = m.cells.size();
      const Shape sh =
          safe_numel(m.cells_shape) == std::int64_t(count) ? m.cells_shape : Shape{std::int64_t(count)};
      switch (conv) {
        case MaskConvention::torch_bool:
          o += "attn_mask = " +
               py_tensor(sh, count, "torch.bool",
                         [&](std::size_t k) { return m.cells[k] != 0 ? "True" : "False"; }) +
               "  # True = blocked\n";
          break;
        case MaskConvention::keep:
          o += "keep = " +
               py_tensor(sh, count, "torch.float32",
                         [&](std::size_t k) { return m.cells[k] == 0 ? "1.0" : "0.0"; }) +
               "  # 1 = attend (course convention)\n";
          o += "attn_mask = keep == 0  # torch wants True = blocked\n";
          break;
        case MaskConvention::additive:
          o += "attn_mask = " +
               py_tensor(sh, count, "torch.float32", [&](std::size_t k) { return py_float(m.cells[k]); }) +
               "  # added to the scores: 0 = attend, -inf = blocked\n";
          break;
      }
    }
    if (m.scope == MaskScope::per_batch)
      o += "# torch wants (N·num_heads, L, S), batch-major: repeat each batch item's mask for its " + h +
           " heads\nattn_mask = attn_mask.repeat_interleave(" + h + ", dim=0)\n";
  }

  if (m.key_padding.empty()) {
    o += "key_padding_mask = None\n";
  } else if (m.preset == MaskPreset::padding && m.key_padding == padding_preset(N, S)) {
    std::string lengths;
    for (std::int64_t b = 0; b < N; ++b)
      lengths += (b ? ", " : "") + std::to_string(std::max<std::int64_t>(1, S - b));
    o += "lengths = torch.tensor([" + lengths + "])  # valid keys of each batch item\n";
    o += "key_padding_mask = torch.arange(" + std::to_string(S) +
         ")[None, :] >= lengths[:, None]  # True = padding\n";
  } else {
    o += "key_padding_mask = " +
         py_tensor(stored_key_padding_shape(s), m.key_padding.size(), "torch.bool",
                   [&](std::size_t k) { return m.key_padding[k] ? "True" : "False"; }) +
         "  # True = padding\n";
  }
  o += "# out, weights = mha(query, key, value, attn_mask=attn_mask, key_padding_mask=key_padding_mask)\n";
  return o;
}

std::string to_json(const Scenario& s, std::optional<ViewTab> tab) {
  Json j;
  j["format"] = kFormat;
  j["version"] = Scenario::kVersion;
  j["name"] = s.name;
  j["sizes"] = {{"batch", s.batch},         {"tgt_len", s.tgt_len},     {"src_len", s.src_len},
                {"embed_dim", s.embed_dim}, {"num_heads", s.num_heads}, {"num_kv_heads", s.num_kv_heads}};
  j["bias"] = s.bias;
  j["cross_attention"] = s.cross_attention;
  j["separate_qkv"] = s.separate_qkv;
  j["seed"] = s.seed;
  j["sentence"] = s.sentence;
  j["source_sentence"] = s.source_sentence;
  if (s.has_model()) {
    j["model"] = s.model;
    j["layer"] = s.layer;
  }
  if (s.has_model() && s.knockouts.active()) {
    Json heads = Json::array();
    for (const HeadRef& h : s.knockouts.heads) heads.push_back({h.layer, h.head});
    j["knockouts"] = {{"heads", heads}, {"ablation", to_string(s.knockouts.ablation)}};
  }
  j["fully_masked"] = to_string(s.fully_masked);
  if (s.what_if.active())
    j["what_if"] = {{"temperature", float_json(s.what_if.temperature)},
                    {"scale_by_sqrt_dk", s.what_if.scale_by_sqrt_dk}};

  const MaskSpec& m = s.mask;
  Json mask = {{"preset", to_string(m.preset)},
               {"scope", to_string(m.scope)},
               {"convention", to_string(m.convention)},
               {"window", m.window},
               {"segments", m.segments},
               {"prefix", m.prefix},
               {"random_p", float_json(m.random_p)},
               {"random_seed", m.random_seed}};
  if (m.preset == MaskPreset::custom && !m.cells_shape.empty())
    mask["cells"] = tensor_json(m.cells_shape, m.cells);
  if (!m.key_padding.empty())
    mask["key_padding"] = {{"shape", stored_key_padding_shape(s)},
                           {"data", std::vector<int>(m.key_padding.begin(), m.key_padding.end())}};
  j["mask"] = std::move(mask);

  Json tensors = Json::object();
  const std::pair<const char*, const std::optional<Tensor<float>>*> inputs[] = {
      {"query", &s.query}, {"key", &s.key}, {"value", &s.value}};
  for (const auto& [key, t] : inputs)
    if (*t && !(*t)->empty()) tensors[key] = tensor_json((*t)->shape, (*t)->data);
  if (s.weights)
    for (const auto& [key, member] : kWeightFields)
      if (const Tensor<float>& t = (*s.weights).*member; !t.empty())
        tensors[key] = tensor_json(t.shape, t.data);
  if (!tensors.empty()) j["tensors"] = std::move(tensors);

  const ViewState& v = s.view;
  j["view"] = {{"batch_index", v.batch_index},
               {"stage", v.stage},
               {"compare_mode", int(v.compare_mode)},
               {"compare_a", v.compare_a},
               {"compare_b", v.compare_b},
               {"show_values", v.show_values},
               {"weights_row_scale", v.weights_row_scale},
               {"reshape_step", v.reshape_step},
               {"mistake", v.mistake},
               {"head_order", v.head_order},
               {"sel_head", v.sel_head},
               {"sel_query", v.sel_query},
               {"sel_key", v.sel_key},
               {"hidden_heads", v.hidden_heads},
               {"overview_layers", v.overview_layers}};
  if (!tab) tab = s.suggested_tab;
  if (tab) j["view"]["tab"] = to_string(*tab);
  std::string text;
  write_json(text, j);
  return text + "\n";
}

namespace {

// Members of `given` (the file) that the scenario read back as JSON does not have: fields this
// version does not know, so they were not read. Objects are compared member by member; arrays and
// values are not looked into.
void unknown_fields(const Json& given, const Json& known, const std::string& path,
                    std::vector<std::string>* out) {
  if (!given.is_object() || !known.is_object()) return;
  for (auto it = given.begin(); it != given.end(); ++it) {
    const std::string at = path.empty() ? it.key() : path + "." + it.key();
    const auto k = known.find(it.key());
    if (k == known.end())
      out->push_back(at);
    else
      unknown_fields(*it, *k, at, out);
  }
}

Scenario parse_with_warnings(const std::string& text, const std::string& name,
                             const std::filesystem::path& base, std::vector<std::string>* warnings) {
  Scenario s = parse_scenario(text, name, base);
  if (warnings) {
    std::vector<std::string> fields;
    try {
      unknown_fields(Json::parse(text), Json::parse(to_json(s)), "", &fields);
    } catch (const Json::exception&) {  // parsed once already: cannot happen
    }
    for (const std::string& f : fields)
      warnings->push_back(name + ": \"" + f +
                          "\" is not a scenario field this version knows; it was ignored");
  }
  return s;
}

}  // namespace

Scenario scenario_from_json(const std::string& text, const std::string& name_for_errors,
                            std::vector<std::string>* warnings) {
  return parse_with_warnings(text, name_for_errors, {}, warnings);
}

Scenario load_scenario(const std::string& path, std::vector<std::string>* warnings) {
  const std::vector<unsigned char> bytes = read_file_bytes(path);
  return parse_with_warnings(std::string(bytes.begin(), bytes.end()), path,
                             std::filesystem::path(path).parent_path(), warnings);
}

void save_scenario(const std::string& path, const Scenario& s, std::optional<ViewTab> tab) {
  const std::string text = to_json(s, tab);
  write_file_atomic(path, std::vector<unsigned char>(text.begin(), text.end()));
}

}  // namespace mha::studio
