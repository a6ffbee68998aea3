// safetensors reader and writer. The JSON header is parsed with nlohmann::json, and every field
// and offset is checked before it is used, so a corrupt or hostile file is a FileError, never a
// crash or a huge allocation. Format reference: the huggingface/safetensors README.
#include "io/safetensors.hpp"

#include <cstdint>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "io/npy.hpp"

namespace mha {

namespace {

using nlohmann::json;

// The reference implementation refuses larger headers too.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kSupportedDtypes = "(supported: F32, F64, F16, BF16, BOOL)";
constexpr std::size_t kMaxDims = 64;

constexpr struct {
  const char* name;
  DType dtype;
} kDtypes[] = {{"F32", DType::f32},
               {"F64", DType::f64},
               {"F16", DType::f16},
               {"BF16", DType::bf16},
               {"BOOL", DType::boolean}};

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw FileError(name, name + ": " + what);
}

std::int64_t checked_numel(const Shape& shape, const std::string& name) {
  try {
    return numel(shape);
  } catch (const Error& e) {
    fail(name, e.what());
  }
}

// A JSON value that must be a non-negative integer (a dimension or an offset).
std::uint64_t get_uint(const json& v, const std::string& name, const std::string& what) {
  if (!v.is_number_unsigned()) fail(name, what + " must be non-negative integers, got " + v.dump());
  return v.get<std::uint64_t>();
}

Array parse_tensor(const json& info, const std::string& tensor, const unsigned char* buffer,
                   std::uint64_t buffer_size, const std::string& name) {
  const std::string where = "tensor '" + tensor + "'";
  if (!info.is_object())
    fail(name, where + ": expected an object with \"dtype\", \"shape\" and \"data_offsets\"");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) fail(name, where + ": missing \"" + key + "\"");

  const json& dtype = info["dtype"];
  if (!dtype.is_string()) fail(name, where + ": \"dtype\" must be a string, got " + dtype.dump());
  Array a;
  bool known = false;
  for (const auto& d : kDtypes) {
    if (dtype.get_ref<const std::string&>() != d.name) continue;
    a.dtype = d.dtype;
    known = true;
  }
  if (!known)
    fail(name, where + ": dtype '" + dtype.get<std::string>() + "' is not supported " + kSupportedDtypes);

  const json& shape = info["shape"];
  if (!shape.is_array()) fail(name, where + ": \"shape\" must be an array, got " + shape.dump());
  if (shape.size() > kMaxDims)
    fail(name, where + ": shape has " + std::to_string(shape.size()) + " dimensions (at most " +
                   std::to_string(kMaxDims) + ")");
  for (const json& d : shape) {
    const std::uint64_t dim = get_uint(d, name, where + ": \"shape\" entries");
    if (dim > std::uint64_t(INT64_MAX)) fail(name, where + ": dimension " + d.dump() + " too large");
    a.shape.push_back(std::int64_t(dim));
  }
  const std::uint64_t count = std::uint64_t(checked_numel(a.shape, name));

  const json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    fail(name, where + ": \"data_offsets\" must be [begin, end], got " + offsets.dump());
  const std::uint64_t begin = get_uint(offsets[0], name, where + ": \"data_offsets\"");
  const std::uint64_t end = get_uint(offsets[1], name, where + ": \"data_offsets\"");
  const std::string range = "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (begin > end) fail(name, where + ": " + range + " has begin after end");
  if (end > buffer_size)
    fail(name, where + ": truncated: " + range + " reach past the end of the " + std::to_string(buffer_size) +
                   "-byte data buffer");
  const std::size_t elem_size = dtype_size(a.dtype);
  // Compare by division so a huge shape cannot overflow before it is refused.
  if (count > (end - begin) / elem_size || count * elem_size != end - begin)
    fail(name, where + ": shape " + shape_str(a.shape) + " " + dtype_name(a.dtype) + " needs " +
                   (count > UINT64_MAX / elem_size ? std::string("more than 2^64")
                                                   : std::to_string(count * elem_size)) +
                   " bytes, but " + range + " hold " + std::to_string(end - begin));
  a.data.assign(buffer + begin, buffer + end);
  return a;
}

}  // namespace

std::map<std::string, Array> read_safetensors(const std::string& path) {
  const std::vector<unsigned char> bytes = read_file_bytes(path);
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

std::map<std::string, Array> parse_safetensors(const unsigned char* bytes, std::size_t size,
                                               const std::string& name) {
  if (size < 8)
    fail(name, "truncated: file is " + std::to_string(size) +
                   " bytes, too short for the 8-byte header length of a safetensors file");
  std::uint64_t header_len = 0;
  for (std::size_t i = 8; i-- > 0;) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes)
    fail(name, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes (not a safetensors file?)");
  if (header_len > size - 8)
    fail(name, "truncated: header length is " + std::to_string(header_len) + " bytes, file has " +
                   std::to_string(size - 8) + " after the 8-byte length");

  const char* text = reinterpret_cast<const char*>(bytes + 8);
  json header;
  try {
    header = json::parse(text, text + header_len);
  } catch (const json::exception& e) {
    fail(name, std::string("malformed JSON header: ") + e.what());
  }
  if (!header.is_object())
    fail(name, std::string("the JSON header must be an object, got ") + header.type_name());

  const unsigned char* buffer = bytes + 8 + header_len;
  const std::uint64_t buffer_size = size - 8 - header_len;
  std::map<std::string, Array> tensors;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(name, "\"__metadata__\" must be an object, got " + it->dump());
      continue;
    }
    tensors.emplace(it.key(), parse_tensor(*it, it.key(), buffer, buffer_size, name));
  }
  return tensors;
}

void write_safetensors(const std::string& path, const std::map<std::string, Array>& tensors) {
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& [tensor, a] : tensors) {
    const std::string where = "cannot write tensor '" + tensor + "'";
    if (tensor == "__metadata__") fail(path, where + ": the name is reserved for metadata");
    const char* dtype = nullptr;
    for (const auto& d : kDtypes)
      if (d.dtype == a.dtype) dtype = d.name;
    if (!dtype)
      fail(path, where + ": dtype " + dtype_name(a.dtype) + " is not supported " + kSupportedDtypes);
    const std::uint64_t count = std::uint64_t(checked_numel(a.shape, path));
    const std::size_t elem_size = dtype_size(a.dtype);
    if (count > a.data.size() / elem_size || count * elem_size != a.data.size())
      fail(path, where + ": shape " + shape_str(a.shape) + " " + dtype_name(a.dtype) +
                     " does not match its " + std::to_string(a.data.size()) + " data bytes");
    header[tensor] = {
        {"dtype", dtype}, {"shape", a.shape}, {"data_offsets", {offset, offset + a.data.size()}}};
    offset += a.data.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // a tensor name that is not valid UTF-8
    fail(path, std::string("cannot write the JSON header: ") + e.what());
  }
  // Spaces pad the header so the data buffer starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<unsigned char> out;
  out.reserve(8 + text.size() + offset);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>(text.size() >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& entry : tensors) out.insert(out.end(), entry.second.data.begin(), entry.second.data.end());
  write_file_atomic(path, out);
}

}  // namespace mha
