// A model's big matrices as the checkpoint stores them: float, or F16 / BF16 bits read in place from
// the mapped safetensors file. A 1B-parameter BF16 checkpoint then takes its 2.5 GB once (the file's
// pages) instead of 5 GB more of float copies. The products widen a tile of rows at a time into
// each thread's float scratch and run the Eigen kernel on it; the embedding lookup widens the rows
// it reads. The reference loops read every element through row(), the one conversion.
#pragma once

#include <cstdint>
#include <memory>

#include "mha.hpp"  // Backend
#include "tensor.hpp"

namespace mha {

struct WeightMatrix {
  DType dtype = DType::f32;  // f32, f16 or bf16
  Shape shape;               // (rows, cols), row-major; empty: no matrix
  // rows·cols little-endian elements of dtype; valid while `owner` lives (the mapped file, or the
  // float copy this matrix holds).
  const unsigned char* data = nullptr;
  std::shared_ptr<const void> owner;

  WeightMatrix() = default;
  // Holds `t` (2-D) itself.
  explicit WeightMatrix(Tensor<float> t);
  // Reads `data` in place. Throws ShapeError (argument `name`) for a shape that is not 2-D, DtypeError
  // for a dtype other than f32, f16 or bf16. F32 data that is not 4-byte aligned is copied (the
  // kernels read it as floats).
  WeightMatrix(DType dtype, Shape shape, const unsigned char* data, std::shared_ptr<const void> owner,
               const std::string& name = "weight");

  bool empty() const { return shape.empty(); }
  std::int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  std::int64_t cols() const { return shape.empty() ? 0 : shape[1]; }
  std::int64_t numel() const { return rows() * cols(); }
  std::size_t nbytes() const { return std::size_t(numel()) * dtype_size(dtype); }

  // Row r widened to float: cols() values into out. Exact (F16 and BF16 are subsets of float).
  void row(std::int64_t r, float* out) const;
  // One element, as row() gives it.
  float at(std::int64_t r, std::int64_t c) const;
  // The whole matrix widened: for tests and small models.
  Tensor<float> to_tensor() const;
  // How many elements are NaN or infinite, read from the stored bits.
  std::int64_t nonfinite() const;
  // Same shape and the same values (bitwise after widening; a NaN equals a NaN with its bits).
  bool same_values(const WeightMatrix& o) const;
};

// y (rows, W.rows()) = x (rows, W.cols()) · Wᵀ: torch's F.linear without bias, W stored (out, in) as
// torch and Hugging Face store it. Backend::reference: loops in index order accumulating in double,
// W read through row(); anything else: the Eigen kernels on tiles of W widened in each thread's
// scratch (F32 read in place), split over the output columns. threads as Options::threads.
void linear(const float* x, const WeightMatrix& W, float* y, std::int64_t rows, Backend backend,
            int threads = 0);

// y (W.rows(),) = W · x (W.cols(),): the LM head at one position, split over W's rows.
void matvec(const WeightMatrix& W, const float* x, float* y, Backend backend, int threads = 0);

}  // namespace mha
