// Plain data types shared by the engine, the file readers and the front ends: a dense row-major
// Tensor<T> that the engine computes on, and an untyped Array (dtype + shape + bytes) as files hold it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace mha {

using Shape = std::vector<std::int64_t>;

// Number of elements of a shape; throws ConfigError on negative dims or overflow past 2^62.
std::int64_t numel(const Shape& shape);
// "(3, 4, 8)", as torch prints a size.
std::string shape_str(const Shape& shape);
// Row-major (C order) strides in elements: (L, E) -> (E, 1).
Shape contiguous_strides(const Shape& shape);

// Element types that files may hold. The engine computes in f32 or f64 only.
enum class DType { f32, f64, f16, bf16, boolean, u8, i64 };
const char* dtype_name(DType d);  // "float32", "float64", "bool", ... (numpy/torch spelling)
std::size_t dtype_size(DType d);

// A dense tensor in row-major order that owns its data. T is float or double for compute;
// bool masks are held as T with values 0/1 and tagged by the Mask wrapper (engine/mha.hpp).
template <class T>
struct Tensor {
  Shape shape;
  std::vector<T> data;

  Tensor() = default;
  explicit Tensor(Shape s, T fill = T(0)) : shape(std::move(s)), data(std::size_t(mha::numel(shape)), fill) {}
  Tensor(Shape s, std::vector<T> d) : shape(std::move(s)), data(std::move(d)) {}

  bool empty() const { return shape.empty() && data.empty(); }
  std::int64_t dim() const { return std::int64_t(shape.size()); }
  std::int64_t size(std::int64_t i) const { return shape[std::size_t(i < 0 ? i + dim() : i)]; }
  std::int64_t numel() const { return std::int64_t(data.size()); }
  T* ptr() { return data.data(); }
  const T* ptr() const { return data.data(); }
  // The same shape and the same bits, NaN included (self-attention's one tensor passed three times).
  bool identical(const Tensor& o) const {
    return shape == o.shape && data.size() == o.data.size() &&
           (data.empty() || data.data() == o.data.data() ||
            std::memcmp(data.data(), o.data.data(), data.size() * sizeof(T)) == 0);
  }
};

// n zeros in memory that is mapped before it is written: where the system can, the pages come as
// 2 MiB huge pages, faulted in by one call. A model's open fills hundreds of MB of these, and touching
// fresh 4 KiB pages one fault at a time cost more than the filling itself (about 2 s for the 1B
// model's attention on a virtual machine). Small sizes are a plain vector.
std::vector<float> zeroed_floats(std::size_t n);

// An array as a file holds it: dtype, shape and the raw little-endian bytes in C order.
// Readers convert Fortran order on load, so `data` is always C order; f16/bf16 stay as stored
// and are widened by to_tensor.
struct Array {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<unsigned char> data;

  std::int64_t numel() const { return mha::numel(shape); }
};

// Converts n little-endian elements of `dtype` at `bytes` to T (bool becomes 0/1; f16/bf16 are
// widened): the one conversion loop behind to_tensor and the checkpoint loader.
template <class T>
void convert_elements(DType dtype, const unsigned char* bytes, std::int64_t n, T* out);
// Converts any numeric Array to Tensor<T> (bool/u8 become 0/1; f16/bf16 are widened).
template <class T>
Tensor<T> to_tensor(const Array& a);
// Wraps a tensor as an Array of dtype f32 (T=float) or f64 (T=double).
template <class T>
Array to_array(const Tensor<T>& t);
// Bool array from 0/1 values (anything non-zero is True).
template <class T>
Array to_bool_array(const Tensor<T>& t);

}  // namespace mha
