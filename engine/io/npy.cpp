// NPY reader and writer. The header dict is parsed by hand (no Python literal evaluator) and every
// size taken from a file is checked against the real byte count before anything is allocated.
// Format reference: numpy/lib/format.py.
#include "io/npy.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <unistd.h>

#include "errors.hpp"

// Element bytes are copied as they are, so "<" (little-endian) and "=" (native) must be the same.
#if defined(__BYTE_ORDER__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "engine/io assumes a little-endian host");
#endif

namespace mha {

namespace {

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr const char* kSupportedDtypes = "(supported: <f4, <f8, <f2, |b1, |u1, <i8)";
// NumPy 2 allows 64 dimensions; more can only come from a corrupt header.
constexpr std::size_t kMaxDims = 64;

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw FileError(name, name + ": " + what);
}

// Header text for error messages: at most 120 characters, control bytes shown as '?'.
std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 120)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return s.size() > 120 ? out + "..." : out;
}

// "384", or a bound when count * elem_size does not fit in 64 bits.
std::string byte_count(std::uint64_t count, std::size_t elem_size) {
  if (count > UINT64_MAX / elem_size) return "more than 2^64";
  return std::to_string(count * elem_size);
}

std::int64_t checked_numel(const Shape& shape, const std::string& name) {
  try {
    return numel(shape);
  } catch (const Error& e) {
    fail(name, e.what());
  }
}

struct Header {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// Recursive-descent parser for the one dict an NPY header holds, e.g.
// "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }". Keys may come in any order.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& name) : s_(text), name_(name) {}

  Header parse() {
    Header h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    skip_ws();
    expect('{', "the header to start with '{'");
    for (;;) {
      skip_ws();
      if (eat('}')) break;
      const std::string key = parse_string("a quoted key");
      skip_ws();
      expect(':', "':' after key '" + key + "'");
      skip_ws();
      if (key == "descr") {
        mark_seen(seen_descr, key);
        if (peek() == '[')
          fail(name_,
               std::string("structured dtypes (a list of fields) are not supported ") + kSupportedDtypes);
        h.descr = parse_string("a quoted dtype string for 'descr'");
      } else if (key == "fortran_order") {
        mark_seen(seen_order, key);
        h.fortran_order = parse_bool();
      } else if (key == "shape") {
        mark_seen(seen_shape, key);
        h.shape = parse_shape();
      } else {
        malformed("unexpected key '" + key + "' (expected 'descr', 'fortran_order', 'shape')");
      }
      skip_ws();
      if (eat(',')) continue;
      expect('}', "',' or '}' after the value of '" + key + "'");
      break;
    }
    skip_ws();
    if (pos_ != s_.size()) malformed("unexpected text after the closing '}'");
    if (!seen_descr) malformed("missing key 'descr'");
    if (!seen_order) malformed("missing key 'fortran_order'");
    if (!seen_shape) malformed("missing key 'shape'");
    return h;
  }

 private:
  [[noreturn]] void malformed(const std::string& what) const {
    fail(name_, "malformed NPY header: " + what + " at character " + std::to_string(pos_) + " of \"" +
                    printable(s_) + "\"");
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool eat(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, const std::string& what) {
    if (!eat(c)) malformed("expected " + what);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  void mark_seen(bool& seen, const std::string& key) {
    if (seen) malformed("key '" + key + "' appears twice");
    seen = true;
  }

  std::string parse_string(const std::string& what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') malformed("expected " + what);
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) ++pos_;
      out += s_[pos_++];
    }
    if (!eat(quote)) malformed("unterminated string");
    return out;
  }

  bool parse_bool() {
    for (const char* word : {"True", "False"}) {
      const std::size_t len = std::strlen(word);
      if (s_.compare(pos_, len, word) == 0) {
        pos_ += len;
        return word[0] == 'T';
      }
    }
    malformed("expected True or False for 'fortran_order'");
  }

  // "(3, 4, 8)", "(5,)", "()"; Python 2 writers added an 'L' suffix to each number.
  Shape parse_shape() {
    expect('(', "a tuple like (3, 4) for 'shape'");
    Shape shape;
    for (;;) {
      skip_ws();
      if (eat(')')) break;
      if (shape.size() == kMaxDims)
        malformed("shape has more than " + std::to_string(kMaxDims) + " dimensions");
      shape.push_back(parse_dim());
      skip_ws();
      if (eat(',')) continue;
      expect(')', "',' or ')' in 'shape'");
      break;
    }
    return shape;
  }

  std::int64_t parse_dim() {
    if (peek() == '-') malformed("negative dimension in 'shape'");
    if (peek() < '0' || peek() > '9') malformed("expected a non-negative integer in 'shape'");
    std::int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      const int digit = s_[pos_++] - '0';
      if (v > ((std::int64_t(1) << 62) - digit) / 10)
        malformed("dimension too large in 'shape' (more than 2^62)");
      v = v * 10 + digit;
    }
    if (peek() == 'L' || peek() == 'l') ++pos_;
    return v;
  }

  const std::string& s_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

// Maps an NPY descr to a DType. A byte-order mark is accepted where it cannot change the meaning:
// '<' and '=' always, '|' and '>' only for one-byte types.
DType parse_descr(const std::string& descr, const std::string& name) {
  static const struct {
    const char* code;
    DType dtype;
  } kCodes[] = {{"f4", DType::f32},     {"f8", DType::f64}, {"f2", DType::f16},
                {"b1", DType::boolean}, {"u1", DType::u8},  {"i8", DType::i64}};
  const bool has_order = !descr.empty() && std::strchr("<>|=", descr[0]) != nullptr;
  const char order = has_order ? descr[0] : '=';
  const std::string code = has_order ? descr.substr(1) : descr;
  for (const auto& c : kCodes) {
    if (code != c.code) continue;
    const bool one_byte = dtype_size(c.dtype) == 1;
    if (order == '<' || order == '=' || one_byte) return c.dtype;
    if (order == '>')
      fail(name, "dtype '" + descr + "' is not supported " + kSupportedDtypes +
                     "; it is big-endian: save it with a.astype('<" + code + "')");
    break;  // '|' on a multi-byte type
  }
  fail(name, "dtype '" + printable(descr) + "' is not supported " + kSupportedDtypes);
}

// Reorders Fortran-order (first index fastest) element bytes into C order.
std::vector<unsigned char> fortran_to_c(const unsigned char* src, const Shape& shape, std::size_t elem_size,
                                        std::size_t count) {
  std::vector<unsigned char> out(count * elem_size);
  const std::size_t ndim = shape.size();
  Shape f_strides(ndim, 1);
  for (std::size_t k = 1; k < ndim; ++k) f_strides[k] = f_strides[k - 1] * shape[k - 1];
  Shape index(ndim, 0);  // C-order multi-index of element i; last index fastest
  for (std::size_t i = 0; i < count; ++i) {
    std::int64_t src_elem = 0;
    for (std::size_t k = 0; k < ndim; ++k) src_elem += index[k] * f_strides[k];
    std::memcpy(out.data() + i * elem_size, src + std::size_t(src_elem) * elem_size, elem_size);
    for (std::size_t k = ndim; k-- > 0;) {
      if (++index[k] < shape[k]) break;
      index[k] = 0;
    }
  }
  return out;
}

const char* npy_descr(DType d) {
  switch (d) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::f16: return "<f2";
    case DType::boolean: return "|b1";
    case DType::u8: return "|u1";
    case DType::i64: return "<i8";
    case DType::bf16: break;
  }
  return nullptr;
}

}  // namespace

namespace {

// NumPy itself refuses headers above 10 000 bytes unless told otherwise; 64 dimensions of 2^62 fit
// in far less than this.
constexpr std::uint64_t kMaxHeaderBytes = 65536;

// Where the data of an .npy file starts and what it holds, from its preamble and header alone.
struct Layout {
  Header header;
  DType dtype = DType::f32;
  std::size_t data_offset = 0;
  std::uint64_t count = 0;  // elements
};

// Reads the magic, version and header length from the first `have` bytes of `head`; returns the
// byte count preamble + header, which the caller must have before calling parse_layout.
std::size_t header_end(const unsigned char* head, std::size_t have, std::uint64_t file_size,
                       const std::string& name) {
  const std::size_t magic_len = have < sizeof kMagic ? have : sizeof kMagic;
  if (magic_len > 0 && std::memcmp(head, kMagic, magic_len) != 0)
    fail(name, "not an NPY file (it does not start with the magic string \"\\x93NUMPY\")");
  if (file_size < 10)
    fail(name, "truncated: file is " + std::to_string(file_size) +
                   " bytes, too short for the 10-byte NPY preamble");
  const unsigned major = head[6], minor = head[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    fail(name, "NPY format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " is not supported (supported: 1.0, 2.0, 3.0)");
  // Version 1.0 has a 2-byte header length, 2.0 and 3.0 a 4-byte one; all little-endian.
  const std::size_t preamble = major == 1 ? 10 : 12;
  if (file_size < preamble)
    fail(name, "truncated: file is " + std::to_string(file_size) + " bytes, too short for the " +
                   std::to_string(preamble) + "-byte NPY preamble");
  std::uint64_t header_len = 0;
  for (std::size_t i = preamble; i-- > 8;) header_len = (header_len << 8) | head[i];
  if (header_len > file_size - preamble)
    fail(name, "truncated: header length is " + std::to_string(header_len) + " bytes, file has " +
                   std::to_string(file_size - preamble) + " after the preamble");
  if (header_len > kMaxHeaderBytes)
    fail(name, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes (not an NPY file?)");
  return preamble + std::size_t(header_len);
}

// Parses the header in head[0, end) and checks the data it promises against the file's real size,
// by division so that a huge shape is refused before anything is allocated.
Layout parse_layout(const unsigned char* head, std::size_t end, std::uint64_t file_size,
                    const std::string& name) {
  const std::size_t preamble = head[6] == 1 ? 10 : 12;
  const std::string text(reinterpret_cast<const char*>(head + preamble), end - preamble);
  Layout l;
  l.header = HeaderParser(text, name).parse();
  l.dtype = parse_descr(l.header.descr, name);
  l.data_offset = end;
  const std::size_t elem_size = dtype_size(l.dtype);
  l.count = std::uint64_t(checked_numel(l.header.shape, name));
  const std::uint64_t have = file_size - end;
  const std::string what = "shape " + shape_str(l.header.shape) + " " + dtype_name(l.dtype) + " needs " +
                           byte_count(l.count, elem_size) + " data bytes, file has " + std::to_string(have);
  if (l.count > have / elem_size) fail(name, "truncated: " + what);
  if (l.count * elem_size != have) fail(name, what + " (unexpected bytes after the array)");
  return l;
}

Array to_array(const Layout& l, const unsigned char* data) {
  Array a;
  a.dtype = l.dtype;
  a.shape = l.header.shape;
  const std::size_t elem_size = dtype_size(a.dtype);
  if (l.header.fortran_order && a.shape.size() > 1)
    a.data = fortran_to_c(data, a.shape, elem_size, std::size_t(l.count));
  else
    a.data.assign(data, data + l.count * elem_size);
  return a;
}

}  // namespace

Array read_npy(const std::string& path) {
  std::uint64_t size = 0;
  const int fd = open_regular_file(path, &size);
  try {
    // The preamble, then the header it announces, then - once the size fstat gave is exactly what
    // the header promises - the data: a file whose header and size disagree is refused unread.
    std::vector<unsigned char> head(std::size_t(std::min<std::uint64_t>(size, 12)));
    read_exact(fd, 0, head.data(), head.size(), path);
    const std::size_t end = header_end(head.data(), head.size(), size, path);
    head.resize(end);
    read_exact(fd, 0, head.data(), end, path);
    const Layout l = parse_layout(head.data(), end, size, path);
    std::vector<unsigned char> data(std::size_t(size - end));
    read_exact(fd, end, data.data(), data.size(), path);
    ::close(fd);
    if (l.header.fortran_order && l.header.shape.size() > 1) return to_array(l, data.data());
    Array a;  // C order: the bytes read are the array's
    a.dtype = l.dtype;
    a.shape = l.header.shape;
    a.data = std::move(data);
    return a;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

Array parse_npy(const unsigned char* bytes, std::size_t size, const std::string& name) {
  const std::size_t end = header_end(bytes, std::min<std::size_t>(size, 12), size, name);
  const Layout l = parse_layout(bytes, end, size, name);
  return to_array(l, bytes + l.data_offset);
}

void write_npy(const std::string& path, const Array& a) {
  const char* descr = npy_descr(a.dtype);
  if (!descr)
    fail(path, std::string("cannot write ") + dtype_name(a.dtype) +
                   " to NPY (NumPy has no such dtype); convert it to float32 first");
  if (a.shape.size() > kMaxDims)
    fail(path, "cannot write a shape with " + std::to_string(a.shape.size()) +
                   " dimensions to NPY (at most " + std::to_string(kMaxDims) + ")");
  const std::uint64_t count = std::uint64_t(checked_numel(a.shape, path));
  const std::size_t elem_size = dtype_size(a.dtype);
  if (count > a.data.size() / elem_size || count * elem_size != a.data.size())
    fail(path, "cannot write: array of shape " + shape_str(a.shape) + " " + dtype_name(a.dtype) + " needs " +
                   byte_count(count, elem_size) + " bytes but holds " + std::to_string(a.data.size()));

  // Same dict layout as numpy; padded with spaces so the data starts at a multiple of 64 bytes.
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + shape_str(a.shape) + ", }";
  const std::size_t unpadded = sizeof kMagic + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';

  std::vector<unsigned char> out(kMagic, kMagic + sizeof kMagic);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<unsigned char>(header.size() & 0xff));
  out.push_back(static_cast<unsigned char>(header.size() >> 8));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), a.data.begin(), a.data.end());
  write_file_atomic(path, out);
}

}  // namespace mha
