// safetensors reader and writer. The JSON header is parsed with nlohmann::json, and every field
// and offset is checked before it is used, so a corrupt or hostile file is a FileError, never a
// crash or a huge allocation. Format reference: the huggingface/safetensors README.
#include "io/safetensors.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

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

TensorView parse_tensor(const json& info, const std::string& tensor, const unsigned char* buffer,
                        std::uint64_t buffer_size, const std::string& name) {
  const std::string where = "tensor '" + tensor + "'";
  if (!info.is_object())
    fail(name, where + ": expected an object with \"dtype\", \"shape\" and \"data_offsets\"");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) fail(name, where + ": missing \"" + key + "\"");

  const json& dtype = info["dtype"];
  if (!dtype.is_string()) fail(name, where + ": \"dtype\" must be a string, got " + dtype.dump());
  TensorView a;
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
  a.data = buffer + begin;
  a.nbytes = std::size_t(end - begin);
  return a;
}

// Every tensor of a safetensors image in memory (a mapping or a buffer), checked: header length,
// JSON, each entry, no duplicate name, no two tensors whose bytes overlap.
std::map<std::string, TensorView> parse_views(const unsigned char* bytes, std::size_t size,
                                              const std::string& name) {
  refuse_torch_save(name, bytes, size);
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
  std::string duplicate;
  try {
    // nlohmann keeps the last of two equal keys; the callback sees each key of the top object.
    std::set<std::string> seen;
    header = json::parse(text, text + header_len, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second)
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {
    fail(name, std::string("malformed JSON header: ") + e.what());
  }
  if (!duplicate.empty()) fail(name, "tensor '" + duplicate + "' appears twice in the header");
  if (!header.is_object())
    fail(name, std::string("the JSON header must be an object, got ") + header.type_name());

  const unsigned char* buffer = bytes + 8 + header_len;
  const std::uint64_t buffer_size = size - 8 - header_len;
  std::map<std::string, TensorView> tensors;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(name, "\"__metadata__\" must be an object, got " + it->dump());
      continue;
    }
    tensors.emplace(it.key(), parse_tensor(*it, it.key(), buffer, buffer_size, name));
  }
  // Two tensors sharing bytes would make an edit of one change the other.
  std::vector<std::pair<const TensorView*, const std::string*>> by_offset;
  for (const auto& [tensor, v] : tensors)
    if (v.nbytes > 0) by_offset.emplace_back(&v, &tensor);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.first->data < b.first->data; });
  for (std::size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1].first->data + by_offset[i - 1].first->nbytes > by_offset[i].first->data)
      fail(name, "tensors '" + *by_offset[i - 1].second + "' and '" + *by_offset[i].second +
                     "' overlap in the data buffer");
  return tensors;
}

Array to_owned(const TensorView& v) {
  Array a;
  a.dtype = v.dtype;
  a.shape = v.shape;
  a.data.assign(v.data, v.data + v.nbytes);
  return a;
}

}  // namespace

std::string torch_save_converter(const std::string& path) {
  const std::string out = (std::filesystem::path(path).parent_path() / "model.safetensors").string();
  return "python3 -c \"import torch, safetensors.torch as st; d = torch.load('" + path +
         "', map_location='cpu'); st.save_file({k: v.clone().contiguous() for k, v in d.items()}, '" + out +
         "')\"";
}

void refuse_torch_save(const std::string& path, const unsigned char* head, std::size_t size) {
  // Both magics are also the low bytes of some header lengths: a file is taken for torch.save only
  // when its first 8 bytes are not a header length that fits in the file.
  std::uint64_t header_len = 0;
  for (std::size_t i = std::min<std::size_t>(size, 8); i-- > 0;) header_len = (header_len << 8) | head[i];
  if (size >= 8 && header_len <= size - 8) return;
  const bool zip = size >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0;
  // A legacy torch.save file starts with a pickle: protocol opcode 0x80 then the protocol 2..5.
  const bool pickle = size >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5;
  if (!zip && !pickle) return;
  throw FileError(path,
                  path + ": this is a torch.save file (" + (zip ? "zip archive" : "pickle") +
                      "), which MHA Studio does not read (loading it would run pickle code). Convert it "
                      "once to safetensors with:\n  " +
                      torch_save_converter(path));
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::uint64_t size = 0;
  const int fd = open_regular_file(path, &size);
  size_ = std::size_t(size);
  if (size_ > 0) {
    map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      fail(path, std::string("cannot map: ") + std::strerror(err));
    }
  } else {
    ::close(fd);
  }
  try {
    tensors_ = parse_views(static_cast<const unsigned char*>(map_), size_, path);
  } catch (...) {
    if (map_) ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::map<std::string, Array> read_safetensors(const std::string& path) {
  const SafetensorsFile file(path);
  std::map<std::string, Array> tensors;
  for (const auto& [tensor, view] : file.tensors()) tensors.emplace(tensor, to_owned(view));
  return tensors;
}

std::map<std::string, Array> parse_safetensors(const unsigned char* bytes, std::size_t size,
                                               const std::string& name) {
  std::map<std::string, Array> tensors;
  for (const auto& [tensor, view] : parse_views(bytes, size, name)) tensors.emplace(tensor, to_owned(view));
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
