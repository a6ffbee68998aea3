// Stage element access and materialisation, shared by every path and front end.
#include "trace.hpp"

#include "errors.hpp"

namespace mha {

bool is_contiguous(const Shape& shape, const Shape& strides) {
  std::int64_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

template <class T>
T Stage<T>::at(const Shape& index) const {
  std::int64_t off = offset;
  for (std::size_t d = 0; d < index.size(); ++d) off += index[d] * strides[d];
  return (*storage)[std::size_t(off)];
}

template <class T>
Tensor<T> Stage<T>::contiguous() const {
  Tensor<T> out(shape);
  const std::size_t rank = shape.size();
  if (out.data.empty()) return out;
  Shape idx(rank, 0);
  const std::vector<T>& src = *storage;
  for (std::size_t flat = 0; flat < out.data.size(); ++flat) {
    std::int64_t off = offset;
    for (std::size_t d = 0; d < rank; ++d) off += idx[d] * strides[d];
    out.data[flat] = src[std::size_t(off)];
    for (std::size_t d = rank; d-- > 0;) {  // odometer increment, last dimension fastest
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

template <class T>
const Stage<T>* Trace<T>::find(const std::string& name) const {
  for (const Stage<T>& s : stages)
    if (s.name == name) return &s;
  return nullptr;
}

template <class T>
const Stage<T>& Trace<T>::operator[](const std::string& name) const {
  const Stage<T>* s = find(name);
  if (!s) throw Error("stage", "the trace has no stage named '" + name + "'");
  return *s;
}

const std::vector<std::string>& stage_names() {
  static const std::vector<std::string> names = {"query",
                                                 "key",
                                                 "value",
                                                 "q",
                                                 "k",
                                                 "v",
                                                 "q_view",
                                                 "k_view",
                                                 "v_view",
                                                 "q_heads",
                                                 "k_heads",
                                                 "v_heads",
                                                 "scores",
                                                 "scores_scaled",
                                                 "attn_mask",
                                                 "scores_masked",
                                                 "attn_weights",
                                                 "context",
                                                 "context_transposed",
                                                 "concat",
                                                 "output",
                                                 "attn_weights_avg"};
  return names;
}

template struct Stage<float>;
template struct Stage<double>;
template struct Trace<float>;
template struct Trace<double>;

}  // namespace mha
