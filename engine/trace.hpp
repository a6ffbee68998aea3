// The trace: every intermediate tensor of one forward, in the order a student meets them, each with
// its name, shape and strides. Views (q_view, q_heads, context_transposed, the broadcast mask) share
// storage with the tensor they view, exactly as torch's view/transpose/expand do.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
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

// Stages computed after the forward (find_stage in mha.hpp), kept with the trace they belong to.
template <class T>
struct ComputedStages {
  std::mutex mutex;
  std::vector<std::unique_ptr<Stage<T>>> stages;  // never erased: pointers handed out stay valid
};

template <class T>
struct Trace {
  std::vector<Stage<T>> stages;
  // Stages the forward was asked to leave out (Options::stages): name, formula, note, shape and
  // strides as they would be, no storage. find_stage() computes one whole on first use.
  std::vector<Stage<T>> left_out;
  // What find_stage() has computed of left_out; copies of the trace share it (same values).
  std::shared_ptr<ComputedStages<T>> computed;

  bool has(const std::string& name) const { return find(name) != nullptr; }
  const Stage<T>* find(const std::string& name) const;
  const Stage<T>& operator[](const std::string& name) const;  // throws Error if absent
};

// Every stage in trace order, those left out included (their storage is null): what a view that
// lists the stages shows.
template <class T>
std::vector<const Stage<T>*> trace_order(const Trace<T>& t);

// The stage names in trace order, stage_table()'s (a mask stage appears only when some mask was given,
// q_rot and k_rot only with Inputs::rotary).
const std::vector<std::string>& stage_names();

}  // namespace mha
