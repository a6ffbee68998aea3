// The models scenarios name, loaded once per process and shared by the UI thread, the compute
// worker and the CLI: "" is random init from the torch seed (no model), a bare name is a folder
// under the shipped models (assets/models/<name>), anything with a '/' is a folder path.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/hf_checkpoint.hpp"
#include "model/roles.hpp"
#include "tokenizer/bpe.hpp"

namespace mha::studio {

// Where bare model names are looked up (the app sets it from its assets folder).
void set_models_dir(const std::string& dir);
const std::string& models_dir();
// The shipped models: the folders under models_dir() that hold a config.json, sorted.
std::vector<std::string> shipped_models();
std::string resolve_model_folder(const std::string& model);

struct ModelEntry {
  std::string name;  // as the scenario names it
  LoadedModel loaded;
  std::optional<BpeTokenizer> tokenizer;  // the folder's, when it has one
  std::string tokenizer_error;            // why there is none (missing files, a type not supported)
};

// Loads on first use; throws FileError / ShapeError (argument "model") naming the folder.
std::shared_ptr<const ModelEntry> model_entry(const std::string& model);

// A load in flight, from any thread, for a progress bar: the model and the fraction of its weights
// converted so far.
struct ModelLoadProgress {
  bool loading = false;
  std::string model;
  double fraction = 0;
};
ModelLoadProgress model_load_progress();
// Stops the load in flight at its next tensor: model_entry then throws FileError ("loading ...
// cancelled") and nothing is kept. Loads that start later are not affected.
void cancel_model_load();

// Each head's role scores, computed on first use (a few forwards on the probe sentences) and kept.
// Empty table when the model has no tokenizer for the text probes.
std::shared_ptr<const RoleTable> model_roles(const ModelEntry& m);

struct ModelTokens {
  std::vector<std::int32_t> ids;
  std::vector<std::string> labels;  // display pieces: "␣the"
};
// The sentence through the model's tokenizer (the last few answers are kept: L() asks often).
// Throws as model_entry, and ConfigError for a model without a tokenizer.
ModelTokens model_tokens(const std::string& model, const std::string& sentence);

}  // namespace mha::studio
