// Stage element access and materialisation, shared by every path and front end.
#include "trace.hpp"

#include <algorithm>

#include "errors.hpp"
#include "stage_table.hpp"

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

template <class T>
std::vector<const Stage<T>*> trace_order(const Trace<T>& t) {
  std::vector<const Stage<T>*> out;
  for (const std::string& name : stage_names()) {
    if (const Stage<T>* s = t.find(name)) {
      out.push_back(s);
      continue;
    }
    for (const Stage<T>& s : t.left_out)
      if (s.name == name) out.push_back(&s);
  }
  const std::vector<std::string>& known = stage_names();
  for (const Stage<T>& s : t.stages)  // a trace read from files may hold names of its own
    if (std::find(known.begin(), known.end(), s.name) == known.end()) out.push_back(&s);
  return out;
}

const std::vector<std::string>& stage_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const StageInfo& s : stage_table()) out.push_back(s.name);
    return out;
  }();
  return names;
}

template struct Stage<float>;
template struct Stage<double>;
template struct Trace<float>;
template struct Trace<double>;
template std::vector<const Stage<float>*> trace_order(const Trace<float>&);
template std::vector<const Stage<double>*> trace_order(const Trace<double>&);

}  // namespace mha
