// Shape helpers and conversions between file Arrays and compute Tensors.
#include "tensor.hpp"

#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "errors.hpp"

namespace mha {

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw ConfigError("shape", "negative dimension in shape " + shape_str(shape));
    if (d != 0 && n > (std::int64_t(1) << 62) / d)
      throw TooLargeError("shape", "shape " + shape_str(shape) + " has more than 2^62 elements",
                          std::numeric_limits<std::uint64_t>::max(), std::uint64_t(1) << 62);
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::boolean: return "bool";
    case DType::u8: return "uint8";
    case DType::i64: return "int64";
  }
  return "?";
}

std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::boolean: return 1;
    case DType::u8: return 1;
    case DType::i64: return 8;
  }
  return 0;
}

namespace {

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {        // subnormal half: normalise
    exp = 113;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(std::uint16_t b) {
  std::uint32_t bits = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <class S>
S load(const unsigned char* p) {
  S v;
  std::memcpy(&v, p, sizeof(S));
  return v;
}

}  // namespace

template <class T>
void convert_elements(DType dtype, const unsigned char* bytes, std::int64_t n, T* out) {
  const std::size_t es = dtype_size(dtype);
  const unsigned char* p = bytes;
  // One loop per dtype, so each is a plain conversion loop (a 124M-parameter checkpoint goes through here).
  switch (dtype) {
    case DType::f32:
      for (std::int64_t i = 0; i < n; ++i, p += es) out[i] = T(load<float>(p));
      break;
    case DType::f64:
      for (std::int64_t i = 0; i < n; ++i, p += es) out[i] = T(load<double>(p));
      break;
    case DType::f16:
      for (std::int64_t i = 0; i < n; ++i, p += es) out[i] = T(half_to_float(load<std::uint16_t>(p)));
      break;
    case DType::bf16:
      for (std::int64_t i = 0; i < n; ++i, p += es) out[i] = T(bf16_to_float(load<std::uint16_t>(p)));
      break;
    case DType::boolean:
      for (std::int64_t i = 0; i < n; ++i, p += es) out[i] = T(*p != 0 ? 1 : 0);
      break;
    case DType::u8:
      for (std::int64_t i = 0; i < n; ++i, p += es) out[i] = T(*p);
      break;
    case DType::i64:
      for (std::int64_t i = 0; i < n; ++i, p += es) out[i] = T(load<std::int64_t>(p));
      break;
  }
}

template <class T>
Tensor<T> to_tensor(const Array& a) {
  const std::int64_t n = a.numel();
  const std::size_t es = dtype_size(a.dtype);
  if (a.data.size() != std::size_t(n) * es)
    throw FileError("array", "array of shape " + shape_str(a.shape) + " and dtype " + dtype_name(a.dtype) +
                                 " needs " + std::to_string(std::size_t(n) * es) + " bytes but holds " +
                                 std::to_string(a.data.size()));
  Tensor<T> t;
  t.shape = a.shape;
  t.data.resize(std::size_t(n));
  convert_elements(a.dtype, a.data.data(), n, t.data.data());
  return t;
}

template <class T>
Array to_array(const Tensor<T>& t) {
  Array a;
  a.dtype = sizeof(T) == 4 ? DType::f32 : DType::f64;
  a.shape = t.shape;
  a.data.resize(t.data.size() * sizeof(T));
  if (!t.data.empty()) std::memcpy(a.data.data(), t.data.data(), a.data.size());
  return a;
}

template <class T>
Array to_bool_array(const Tensor<T>& t) {
  Array a;
  a.dtype = DType::boolean;
  a.shape = t.shape;
  a.data.resize(t.data.size());
  for (std::size_t i = 0; i < t.data.size(); ++i) a.data[i] = t.data[i] != T(0) ? 1 : 0;
  return a;
}

template void convert_elements<float>(DType, const unsigned char*, std::int64_t, float*);
template void convert_elements<double>(DType, const unsigned char*, std::int64_t, double*);
template Tensor<float> to_tensor<float>(const Array&);
template Tensor<double> to_tensor<double>(const Array&);
template Array to_array<float>(const Tensor<float>&);
template Array to_array<double>(const Tensor<double>&);
template Array to_bool_array<float>(const Tensor<float>&);
template Array to_bool_array<double>(const Tensor<double>&);

std::vector<float> zeroed_floats(std::size_t n) {
  std::vector<float> v;
  constexpr std::size_t kHuge = std::size_t(2) << 20;
  if (n * sizeof(float) >= 4 * kHuge) {
    v.reserve(n);  // allocated, not yet touched
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Only the whole huge pages inside the block; the kernel refuses unaligned ranges.
    const std::uintptr_t begin = (reinterpret_cast<std::uintptr_t>(v.data()) + kHuge - 1) & ~(kHuge - 1);
    const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(v.data() + n)) & ~(kHuge - 1);
    if (end > begin) {
      void* p = reinterpret_cast<void*>(begin);
      // Advice only: on failure (an older kernel, huge pages off) the pages fault in as written.
      (void)madvise(p, end - begin, MADV_HUGEPAGE);
#if defined(MADV_POPULATE_WRITE)
      (void)madvise(p, end - begin, MADV_POPULATE_WRITE);
#else
      (void)madvise(p, end - begin, 23);  // MADV_POPULATE_WRITE (Linux 5.14), absent from older headers
#endif
    }
#endif
  }
  v.resize(n);
  return v;
}

}  // namespace mha
