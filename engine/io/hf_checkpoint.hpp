// Hugging Face GPT-2 checkpoints as people have them on disk: a folder with config.json and
// model.safetensors (or shards + model.safetensors.index.json), tokenizer files beside them. Conv1D
// weights stored [in, out]; names with or without the "transformer." prefix; tied or untied
// lm_head.weight; F32, F16, BF16 (and F64) tensors. torch.save files are recognised and refused
// with the line of Python that converts them: nothing here runs pickle.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/gpt2.hpp"

namespace mha {

// Reads and checks a config.json. Throws FileError naming the file and the field; a model_type other
// than "gpt2" is refused with what the file says it is.
GPT2Config read_gpt2_config(const std::string& config_json_path);

struct LoadedModel {
  GPT2Model model;
  std::string folder;
  std::vector<std::string> weight_files;  // the safetensors file(s) read
  std::vector<std::string> warnings;      // tensors present but not used, e.g. an unknown name
};

// Fraction done (0..1) while the weights are converted; may be empty.
using LoadProgress = std::function<void(double)>;

// Loads a GPT-2 folder. The weights are mapped (mmap), checked against config.json, and converted
// to float once. Throws FileError (missing or malformed file, torch.save file, other architecture)
// or ShapeError (a tensor that disagrees with the config), each naming the tensor and the rule.
LoadedModel load_gpt2(const std::string& folder, const LoadProgress& progress = {});

}  // namespace mha
