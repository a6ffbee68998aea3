// Hugging Face GPT-2 and Llama-family checkpoints as people have them on disk: a folder with config.json and
// model.safetensors (or shards + model.safetensors.index.json), tokenizer files beside them. GPT-2 Conv1D
// weights stored [in, out]; names with or without the "transformer." prefix; tied or untied
// lm_head.weight; F32, F16, BF16 (and F64) tensors. torch.save files are recognised and refused
// with the line of Python that converts them: nothing here runs pickle.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt2.hpp"
#include "model/llama.hpp"

namespace mha {

// Fraction done (0..1) while the weights are converted; may be empty.
using LoadProgress = std::function<void(double)>;

// Reads and checks a config.json. Throws FileError naming the file and the field; a model_type other
// than "gpt2" is refused with what the file says it is.
GPT2Config read_gpt2_config(const std::string& config_json_path);

struct LoadedGPT2 {
  GPT2Model model;
  std::string folder;
  std::vector<std::string> weight_files;  // the safetensors file(s) read
  std::vector<std::string> warnings;      // tensors present but not used, e.g. an unknown name
};

// Loads a GPT-2 folder. The weights are mapped (mmap), checked against config.json, and converted
// to float once. Throws FileError (missing or malformed file, torch.save file, other architecture)
// or ShapeError (a tensor that disagrees with the config), each naming the tensor and the rule.
LoadedGPT2 load_gpt2(const std::string& folder, const LoadProgress& progress = {});

// config.json's model_type in a model folder ("" when it has none): what picks the loader, "gpt2"
// for load_gpt2, "llama", "mistral" or "qwen2" for load_llama. Throws FileError as the loaders do
// for a folder without config.json or a malformed one.
std::string checkpoint_model_type(const std::string& folder);

// Reads and checks a Llama-family config.json (Hugging Face's LlamaConfig, MistralConfig and
// Qwen2Config names). Throws ConfigError whose argument names the field ("rope_scaling.rope_type",
// "num_key_value_heads", …), FileError for a file that is not JSON.
LlamaConfig read_llama_config(const std::string& config_json_path);

struct LoadedLlama {
  LlamaModel model;
  std::string folder;
  std::vector<std::string> weight_files;  // the safetensors file(s) read
  std::vector<std::string> warnings;      // tensors present but not used, a tied head that differs
};

// Loads a Llama, Mistral or Qwen2 folder: config.json and model.safetensors (or shards with
// model.safetensors.index.json), Hugging Face's names (model.layers.N.self_attn.q_proj.weight, …),
// F32, F16 or BF16. The attention and the norms are converted to float once (q, k and v stacked into
// the attention's in_proj_weight); the embedding, the MLP and an untied LM head stay in the mapped
// files as stored (WeightMatrix, which keeps them mapped), so a BF16 model takes about its file's
// size in memory. Throws as load_gpt2 does, and ConfigError naming a config.json field.
LoadedLlama load_llama(const std::string& folder, const LoadProgress& progress = {});

// Any model folder, whichever family it is: what the app, the CLI and the role probes open.
struct LoadedModel {
  std::shared_ptr<const LanguageModel> model;
  std::string folder;
  std::vector<std::string> weight_files;  // the safetensors file(s) read
  std::vector<std::string> warnings;      // as the family's loader gives them
};

// The families MHA Studio opens, one entry per config.json model_type: the one list load_model,
// `mha model-info --families` and the error for an unknown type read.
struct ModelFamily {
  std::string model_type;  // config.json's
  std::string family;      // "GPT-2", "Llama"
  std::string example;     // a checkpoint people study with this model_type
  LoadedModel (*load)(const std::string& folder, const LoadProgress& progress);
};
const std::vector<ModelFamily>& model_families();

// Loads a model folder with the loader its config.json's model_type names. Throws as that loader
// does; a model_type no family reads is refused naming it and the ones that are read.
LoadedModel load_model(const std::string& folder, const LoadProgress& progress = {});

}  // namespace mha
