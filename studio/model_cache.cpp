// Process-wide caches of loaded models, their role tables and recent tokenizations, each behind
// one mutex: the UI thread and the compute worker ask for the same model.
#include "model_cache.hpp"

#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>

#include "errors.hpp"
#include "io/tokenizer_files.hpp"

namespace mha::studio {

namespace fs = std::filesystem;

namespace {

std::mutex g_mutex;
std::string& dir_slot() {
  static std::string dir = std::string(MHA_SOURCE_ASSETS_DIR) + "/models";
  return dir;
}
std::map<std::string, std::shared_ptr<const ModelEntry>>& entries() {
  static std::map<std::string, std::shared_ptr<const ModelEntry>> m;
  return m;
}
std::map<const ModelEntry*, std::shared_ptr<const RoleTable>>& roles() {
  static std::map<const ModelEntry*, std::shared_ptr<const RoleTable>> m;
  return m;
}
struct TokensKey {
  std::string model, sentence;
  ModelTokens tokens;
};
std::deque<TokensKey>& recent() {
  static std::deque<TokensKey> d;
  return d;
}
// The load in flight (one at a time is what the app does; a second one simply shares the bar).
std::mutex g_progress_mutex;
ModelLoadProgress g_progress;
std::atomic<bool> g_cancel{false};

}  // namespace

void set_models_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  dir_slot() = dir;
}

const std::string& models_dir() {
  return dir_slot();
}

std::vector<std::string> shipped_models() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(models_dir(), ec))
    if (e.is_directory() && fs::exists(e.path() / "config.json"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string resolve_model_folder(const std::string& model) {
  if (model.find('/') != std::string::npos) return model;
  return (fs::path(models_dir()) / model).string();
}

std::shared_ptr<const ModelEntry> model_entry(const std::string& model) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = entries().find(model);
    if (it != entries().end()) return it->second;
  }
  // Loaded outside the lock (a large checkpoint takes a second); two threads may both load it once.
  auto e = std::make_shared<ModelEntry>();
  e->name = model;
  const std::string folder = resolve_model_folder(model);
  {
    std::lock_guard<std::mutex> lock(g_progress_mutex);
    g_progress = {true, model, 0.0};
    g_cancel = false;
  }
  struct Done {  // the bar goes away however the load ends
    ~Done() {
      std::lock_guard<std::mutex> lock(g_progress_mutex);
      g_progress = {};
    }
  } done;
  try {
    e->loaded = load_model(folder, [&model](double f) {
      if (g_cancel) throw FileError("model", "loading " + model + " cancelled");
      std::lock_guard<std::mutex> lock(g_progress_mutex);
      g_progress.fraction = f;
    });
  } catch (const Error& err) {
    throw FileError("model", std::string("model \"") + model + "\": " + err.what());
  }
  try {
    e->tokenizer = load_tokenizer(folder);
  } catch (const Error& err) {
    // No tokenizer, or one the engine does not read: texts cannot be typed; model_tokens says why.
    e->tokenizer_error = err.what();
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  return entries().emplace(model, std::move(e)).first->second;
}

ModelLoadProgress model_load_progress() {
  std::lock_guard<std::mutex> lock(g_progress_mutex);
  return g_progress;
}

void cancel_model_load() {
  g_cancel = true;
}

std::shared_ptr<const RoleTable> model_roles(const ModelEntry& m) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = roles().find(&m);
    if (it != roles().end()) return it->second;
  }
  auto table = std::make_shared<RoleTable>();
  if (m.tokenizer) *table = head_roles(*m.loaded.model, *m.tokenizer);
  std::lock_guard<std::mutex> lock(g_mutex);
  return roles().emplace(&m, std::move(table)).first->second;
}

ModelTokens model_tokens(const std::string& model, const std::string& sentence) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (const TokensKey& k : recent())
      if (k.model == model && k.sentence == sentence) return k.tokens;
  }
  const std::shared_ptr<const ModelEntry> e = model_entry(model);
  if (!e->tokenizer)
    throw ConfigError("model",
                      "model \"" + model + "\" has no tokenizer the app reads: " + e->tokenizer_error);
  ModelTokens t;
  t.ids = e->tokenizer->encode(sentence);
  for (std::int32_t id : t.ids) t.labels.push_back(e->tokenizer->display_piece(id));
  std::lock_guard<std::mutex> lock(g_mutex);
  recent().push_front({model, sentence, t});
  if (recent().size() > 8) recent().pop_back();
  return t;
}

}  // namespace mha::studio
