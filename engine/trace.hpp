// The trace: every intermediate tensor of one forward, in the order a student meets them, each with
// its name, shape and strides. Views (q_view, q_heads, context_transposed, the broadcast mask) share
// storage with the tensor they view, exactly as torch's view/transpose/expand do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace mha {

// torch's Tensor.is_contiguous(): row-major strides, where a dimension of size 1 may have any stride
// (q_heads at L = 1 is contiguous although its strides differ from a fresh tensor's).
bool is_contiguous(const Shape& shape, const Shape& strides);

template <class T>
struct Stage {
  std::string name;     // "q_heads": also the .npy file name written by `mha compute --out`
  std::string formula;  // the torch expression that makes it: "q_view.transpose(1, 2)"
  std::string note;     // why it matters, one line
  Shape shape;          // e.g. (N, H, L, d_k)
  Shape strides;        // in elements; 0 marks a broadcast (expanded) dimension
  std::shared_ptr<const std::vector<T>> storage;
  std::int64_t offset = 0;
  std::string view_of;  // name of the stage whose storage this one views ("" = owns its storage)

  bool is_contiguous() const { return mha::is_contiguous(shape, strides); }
  std::int64_t numel() const { return mha::numel(shape); }
  // Element at a full index (one entry per dimension); no bounds check beyond the shape's rank.
  T at(const Shape& index) const;
  // A dense row-major copy, as torch's .contiguous() gives it.
  Tensor<T> contiguous() const;
};

template <class T>
struct Trace {
  std::vector<Stage<T>> stages;

  bool has(const std::string& name) const { return find(name) != nullptr; }
  const Stage<T>* find(const std::string& name) const;
  const Stage<T>& operator[](const std::string& name) const;  // throws Error if absent
};

// The stage names in trace order (a mask stage appears only when some mask was given).
const std::vector<std::string>& stage_names();

}  // namespace mha
