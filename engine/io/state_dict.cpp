// read_state_dict: the NPY/safetensors readers applied to every state_dict name.
#include "io/state_dict.hpp"

#include <filesystem>
#include <map>

#include "errors.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"

namespace mha {

template <class T>
Weights<T> read_state_dict(const std::string& npy_dir, const std::string& safetensors_path) {
  std::map<std::string, Array> st;
  if (!safetensors_path.empty()) st = read_safetensors(safetensors_path);
  Weights<T> w;
  // A name torch's module does not have ("in_proj.weight", "attn.in_proj_weight") would otherwise
  // be ignored and the default weights used in silence.
  std::string known, unknown;
  for (auto& entry : state_dict(w)) known += std::string(known.empty() ? "" : ", ") + entry.first;
  for (const auto& entry : st) {
    bool found = false;
    for (auto& e : state_dict(w)) found = found || entry.first == e.first;
    if (!found) unknown += std::string(unknown.empty() ? "'" : ", '") + entry.first + "'";
  }
  if (!unknown.empty())
    throw FileError(safetensors_path,
                    safetensors_path + ": tensor(s) " + unknown +
                        " are not nn.MultiheadAttention state_dict names (expected: " + known + ")");
  for (auto& [name, tensor] : state_dict(w)) {
    auto it = st.find(name);
    const std::filesystem::path npy = std::filesystem::path(npy_dir) / (std::string(name) + ".npy");
    if (it != st.end())
      *tensor = to_tensor<T>(it->second);
    else if (!npy_dir.empty() && std::filesystem::exists(npy))
      *tensor = to_tensor<T>(read_npy(npy.string()));
  }
  return w;
}

template Weights<float> read_state_dict<float>(const std::string&, const std::string&);
template Weights<double> read_state_dict<double>(const std::string&, const std::string&);

}  // namespace mha
