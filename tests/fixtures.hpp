// Loads the torch reference fixtures (tests/fixtures/<case>/, made by tools/gen_fixtures.py) into
// engine types, and compares tensors as torch.allclose does, with NaN positions required to match.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mha.hpp"

namespace mha::test {

std::vector<std::string> fixture_names();  // every case directory, sorted
nlohmann::json fixture_meta(const std::string& name);
bool has_file(const std::string& name, const std::string& file);  // "expected/q.npy"

template <class T>
struct Fixture {
  std::string name;
  nlohmann::json meta;
  Config config;
  Weights<T> weights;
  Inputs<T> inputs;
  Options options;
  double atol = 0, rtol = 0;
};

template <class T>
Fixture<T> load_fixture(const std::string& name);
template <class T>
Tensor<T> load_tensor(const std::string& name, const std::string& file);  // file without ".npy"

// Empty string when every element satisfies |a - e| <= atol + rtol·|e| (NaN where NaN, ±inf where
// ±inf); otherwise a message naming the first bad index and both values.
template <class T>
std::string mismatch(const Tensor<T>& actual, const Tensor<T>& expected, double atol, double rtol);

}  // namespace mha::test
