// read_state_dict: the NPY/safetensors readers applied to every state_dict name, and the search for
// the one nn.MultiheadAttention inside a bigger model's state_dict.
#include "io/state_dict.hpp"

#include <filesystem>
#include <set>

#include "errors.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"

namespace mha {

namespace {

std::vector<std::string> parameter_names() {
  Weights<float> w;
  std::vector<std::string> names;
  for (auto& entry : state_dict(w)) names.push_back(entry.first);
  return names;
}

std::string prefix_text(const std::string& prefix) {
  return prefix.empty() ? "'' (the top level)" : "'" + prefix + "'";
}

// "'encoder.layers.0.self_attn.' (4 tensors), 'decoder.layers.0.self_attn.' (4 tensors)"
std::string prefix_list(const std::map<std::string, std::vector<std::string>>& groups) {
  std::string out;
  for (const auto& [prefix, names] : groups)
    out += (out.empty() ? "" : ", ") + prefix_text(prefix) + " (" + std::to_string(names.size()) +
           (names.size() == 1 ? " tensor)" : " tensors)");
  return out;
}

}  // namespace

std::map<std::string, std::vector<std::string>> attention_prefixes(const std::vector<std::string>& names) {
  static const std::vector<std::string> params = parameter_names();
  std::map<std::string, std::vector<std::string>> groups;
  for (const std::string& name : names)
    for (const std::string& p : params) {
      if (name.size() < p.size() || name.compare(name.size() - p.size(), p.size(), p) != 0) continue;
      const std::size_t cut = name.size() - p.size();
      if (cut > 0 && name[cut - 1] != '.') continue;  // "linear_out_proj.weight" is not out_proj's
      groups[name.substr(0, cut)].push_back(name);
      break;
    }
  return groups;
}

template <class T>
Weights<T> read_state_dict(const std::string& npy_dir, const std::string& safetensors_path,
                           const std::optional<std::string>& prefix, std::vector<std::string>* warnings) {
  std::map<std::string, Array> st;
  if (!safetensors_path.empty()) st = read_safetensors(safetensors_path);
  Weights<T> w;
  std::string chosen;  // the module's prefix in the file
  if (!st.empty()) {
    std::vector<std::string> names;
    for (const auto& entry : st) names.push_back(entry.first);
    const auto groups = attention_prefixes(names);
    if (prefix) {
      chosen = *prefix;
      // "encoder.layers.0.self_attn" names the module as well as its state_dict prefix does.
      if (!chosen.empty() && chosen.back() != '.' && groups.count(chosen + ".")) chosen += '.';
      if (!groups.count(chosen))
        throw FileError(
            safetensors_path,
            safetensors_path + ": no nn.MultiheadAttention under --prefix " + prefix_text(*prefix) +
                (groups.empty() ? "; the file holds none" : "; prefixes found: " + prefix_list(groups)));
    } else if (groups.size() > 1) {
      throw FileError(safetensors_path, safetensors_path + ": " + std::to_string(groups.size()) +
                                            " nn.MultiheadAttention modules, under the prefixes " +
                                            prefix_list(groups) + "; --prefix P picks one");
    } else if (groups.size() == 1) {
      chosen = groups.begin()->first;
    }
    // Every name under the chosen prefix must be one of the module's: "in_proj.weight" would
    // otherwise be ignored and the default weights used in silence. Other modules' names are not
    // the chosen one's, and tensors outside the prefix belong to the rest of the model.
    std::set<std::string> other_modules;
    for (const auto& [p, group] : groups)
      if (p != chosen) other_modules.insert(group.begin(), group.end());
    std::string known, unknown;
    std::size_t used = 0;
    for (auto& entry : state_dict(w)) {
      known += std::string(known.empty() ? "" : ", ") + entry.first;
      used += st.count(chosen + entry.first);
    }
    for (const std::string& name : names) {
      if (name.compare(0, chosen.size(), chosen) != 0 || other_modules.count(name)) continue;
      const std::string param = name.substr(chosen.size());
      bool found = false;
      for (auto& e : state_dict(w)) found = found || param == e.first;
      if (!found) unknown += std::string(unknown.empty() ? "'" : ", '") + name + "'";
    }
    if (!unknown.empty())
      throw FileError(safetensors_path,
                      safetensors_path + ": tensor(s) " + unknown +
                          (chosen.empty() ? "" : " under the prefix " + prefix_text(chosen)) +
                          " are not nn.MultiheadAttention state_dict names (expected: " + known + ")");
    // The ignored tensors are named, the first few of them, so that a weight meant for this module
    // under another name can be told from the rest of the model.
    constexpr std::size_t kNamed = 5;
    std::string ignored_names;
    std::size_t ignored = 0;
    for (const std::string& name : names) {
      bool is_used = false;
      for (auto& e : state_dict(w)) is_used = is_used || name == chosen + e.first;
      if (is_used) continue;
      if (++ignored <= kNamed) ignored_names += std::string(ignored == 1 ? ": '" : ", '") + name + "'";
    }
    if (ignored > kNamed) ignored_names += " and " + std::to_string(ignored - kNamed) + " more";
    if (warnings && (!chosen.empty() || ignored))
      warnings->push_back(safetensors_path + ": using the nn.MultiheadAttention under the prefix " +
                          prefix_text(chosen) + " (" + std::to_string(used) + " tensors); " +
                          std::to_string(ignored) + " other tensor" + (ignored == 1 ? "" : "s") + " ignored" +
                          ignored_names);
  }
  for (auto& [name, tensor] : state_dict(w)) {
    auto it = st.find(chosen + name);
    const std::filesystem::path npy = std::filesystem::path(npy_dir) / (std::string(name) + ".npy");
    if (it != st.end())
      *tensor = to_tensor<T>(it->second);
    else if (!npy_dir.empty() && std::filesystem::exists(npy))
      *tensor = to_tensor<T>(read_npy(npy.string()));
  }
  return w;
}

template Weights<float> read_state_dict<float>(const std::string&, const std::string&,
                                               const std::optional<std::string>&, std::vector<std::string>*);
template Weights<double> read_state_dict<double>(const std::string&, const std::string&,
                                                 const std::optional<std::string>&,
                                                 std::vector<std::string>*);

}  // namespace mha
