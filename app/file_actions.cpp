// See file_actions.hpp.
#include "file_actions.hpp"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <filesystem>
#include <mutex>

#include "errors.hpp"
#include "model_cache.hpp"
#include "open_path.hpp"
#include "panels/panels.hpp"
#include "recent_files.hpp"
#include "ui.hpp"

namespace fs = std::filesystem;

namespace mha::app {

struct FileUi::Load {
  std::string folder;
  std::mutex mutex;
  bool done = false;
  std::string error;  // when it failed or was cancelled
};

FileUi::~FileUi() {
  if (load_thread.joinable()) {
    cancel_model_load();
    load_thread.join();
  }
}

namespace {

FileUi& files(UiEnv& env) {
  if (!env.files) env.files = std::make_shared<FileUi>();
  return *env.files;
}

void remember(UiEnv& env, const std::string& path) {
  FileUi& f = files(env);
  add_recent(f.recent, path);
  save_recent(f.recent_file, f.recent);
}

const std::vector<platform::FileFilter>& open_filters() {
  static const std::vector<platform::FileFilter> f = {
      {"Scenarios, attention weights, model weights", {"*.json", "*.npy", "*.safetensors"}},
      {"Scenarios (JSON)", {"*.json"}},
      {"Attention weights (.npy)", {"*.npy"}}};
  return f;
}

// A model folder: loaded on a thread of its own (the UI shows the progress and can cancel), then
// chosen through the usual action, which finds it in the cache.
void start_model_load(AppState& state, UiEnv& env, const std::string& folder) {
  FileUi& f = files(env);
  if (f.load) {
    state.status = "a model is loading already: wait for it or cancel it";
    return;
  }
  if (f.load_thread.joinable()) f.load_thread.join();
  auto load = std::make_shared<FileUi::Load>();
  load->folder = folder;
  f.load = load;
  f.load_thread = std::thread([load] {
    std::string error;
    try {
      model_entry(load->folder);
    } catch (const Error& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = std::string("model \"") + load->folder + "\": " + e.what();
    }
    std::lock_guard<std::mutex> lock(load->mutex);
    load->error = error;
    load->done = true;
  });
}

void act_on_choice(AppState& state, UiEnv& env, const std::string& purpose, const std::string& path) {
  if (purpose == "save") {
    try {
      save_scenario(path, state.scenario(), state.window().tab);
      env.scenario_path = path;
      state.status = "saved " + path;
      state.errors.erase("file");
      remember(env, path);
    } catch (const Error& e) {
      state.errors["file"] = e.what();
      state.status = e.what();
    }
    return;
  }
  open_any_path(state, env, path);
}

// A path prompt for where no chooser is installed (or it failed). Failure keeps the scenario as it is.
void path_popup(const char* id, AppState& state, UiEnv& env, bool saving) {
  if (!ImGui::BeginPopupModal(id, nullptr, ImGuiWindowFlags_AlwaysAutoResize)) return;
  std::string& path = files(env).typed_path;
  ImGui::TextUnformatted(saving ? "Save the scenario as (JSON):"
                                : "Open a scenario (JSON), attention weights (.npy) or a model folder:");
  ImGui::TextDisabled("(no file chooser installed: zenity or kdialog; a path, or drop a file on the window)");
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
  if (ImGui::IsWindowAppearing()) ImGui::SetKeyboardFocusHere();
  const bool enter = ImGui::InputText("##path", &path, ImGuiInputTextFlags_EnterReturnsTrue);
  if (enter || ImGui::Button(saving ? "Save" : "Open")) {
    state.errors.erase("file");
    act_on_choice(state, env, saving ? "save" : "open", path);
    if (!state.errors.count("file")) ImGui::CloseCurrentPopup();
  }
  ImGui::SameLine();
  if (ImGui::Button("Cancel")) ImGui::CloseCurrentPopup();
  auto it = state.errors.find("file");
  if (it != state.errors.end()) {
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30);
    ImGui::TextColored(ImVec4(1, 0.35f, 0.35f, 1), "%s", it->second.c_str());
    ImGui::PopTextWrapPos();
  }
  ImGui::EndPopup();
}

void start_chooser(AppState& state, UiEnv& env, const platform::ChooserRequest& r, const char* purpose) {
  FileUi& f = files(env);
  if (f.chooser.busy()) {
    state.status = "a file chooser is open already";
    return;
  }
  if (platform::chooser_tool().empty() || !f.chooser.start(r, purpose)) {
    if (std::string(purpose) == "check")  // the Check view has a path field of its own
      state.apply(show_view(ViewTab::check));
    else
      (std::string(purpose) == "save" ? f.prompt_save : f.prompt_open) = true;
    return;
  }
  state.status = "choosing a file...";
}

void model_load_modal(AppState& state, UiEnv& env) {
  FileUi& f = files(env);
  if (f.load) {
    bool done = false;
    std::string error;
    {
      std::lock_guard<std::mutex> lock(f.load->mutex);
      done = f.load->done;
      error = f.load->error;
    }
    if (done) {
      f.load_thread.join();
      const std::string folder = f.load->folder;
      f.load.reset();
      if (!error.empty()) {
        state.errors["model"] = error;
        state.status = error;
      } else {
        state.apply(choose_model(folder));  // found in the cache: no second load
        state.status = "opened model " + folder;
        remember(env, folder);
      }
    } else {
      state.animating = true;  // the bar moves while the weights load
      if (!ImGui::IsPopupOpen("Loading model")) ImGui::OpenPopup("Loading model");
    }
  }
  if (ImGui::BeginPopupModal("Loading model", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    if (!f.load) {
      ImGui::CloseCurrentPopup();
    } else {
      const ModelLoadProgress p = model_load_progress();
      ImGui::Text("Loading %s", f.load->folder.c_str());
      ImGui::ProgressBar(float(p.fraction), ImVec2(ImGui::GetFontSize() * 24, 0));
      if (ImGui::Button("Cancel")) cancel_model_load();
    }
    ImGui::EndPopup();
  }
}

}  // namespace

void open_any_path(AppState& state, UiEnv& env, const std::string& path) {
  // A Python file is a student's implementation: run by the Check view (the user picked it).
  if (fs::path(path).extension() == ".py") {
    check_file(env.panels, path);
    state.apply(show_view(ViewTab::check));
    state.status = "checking " + path;
    return;
  }
  try {
    const OpenRequest open = classify_open_path(path);
    switch (open.kind) {
      case OpenKind::scenario: {
        std::vector<std::string> warnings;
        state.load(load_scenario(open.path, &warnings), "open " + open.path);
        env.scenario_path = open.path;
        state.status = warnings.empty() ? "opened " + open.path : warnings.front();
        break;
      }
      case OpenKind::attention:
        open_attention_file(env.panels, open.path);
        state.apply(show_view(ViewTab::attention_file));
        state.status = "opened " + open.path;
        break;
      case OpenKind::model_folder:
        start_model_load(state, env, open.path);
        return;  // remembered once it has loaded
    }
    state.errors.erase("file");
    remember(env, open.path);
  } catch (const Error& e) {
    state.errors["file"] = e.what();  // nothing changed; the status bar says why
    state.status = e.what();
  }
}

void ask_check(AppState& state, UiEnv& env) {
  platform::ChooserRequest r;
  r.title = "Check my implementation: your PyTorch multi-head attention (.py)";
  r.filters = {{"Python files", {"*.py"}}};
  start_chooser(state, env, r, "check");
}

void ask_open(AppState& state, UiEnv& env) {
  platform::ChooserRequest r;
  r.title = "Open a scenario, attention weights or model weights";
  r.filters = open_filters();
  if (!env.scenario_path.empty()) r.start = fs::path(env.scenario_path).parent_path().string() + "/";
  start_chooser(state, env, r, "open");
}

void ask_open_folder(AppState& state, UiEnv& env) {
  platform::ChooserRequest r;
  r.kind = platform::ChooserRequest::Kind::open_folder;
  r.title = "Open a model folder: GPT-2, Llama, Mistral or Qwen2 (config.json, model.safetensors)";
  start_chooser(state, env, r, "open");
}

void ask_save(AppState& state, UiEnv& env) {
  platform::ChooserRequest r;
  r.kind = platform::ChooserRequest::Kind::save_file;
  r.title = "Save the scenario";
  r.start = env.scenario_path.empty() ? "scenario.json" : env.scenario_path;
  r.filters = {{"Scenarios (JSON)", {"*.json"}}};
  start_chooser(state, env, r, "save");
}

void recent_menu(AppState& state, UiEnv& env) {
  FileUi& f = files(env);
  if (!ImGui::BeginMenu("Recent", !f.recent.empty())) return;
  std::string chosen;
  for (const std::string& p : f.recent) {
    std::error_code ec;
    const bool there = fs::exists(p, ec);
    if (ImGui::MenuItem(p.c_str(), nullptr, false, there)) chosen = p;
    if (!there && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
      ImGui::SetTooltip("no longer there");
  }
  ImGui::Separator();
  if (ImGui::MenuItem("Clear the list")) {
    f.recent.clear();
    save_recent(f.recent_file, f.recent);
  }
  ImGui::EndMenu();
  if (!chosen.empty()) open_any_path(state, env, chosen);
}

void draw_file_ui(AppState& state, UiEnv& env) {
  FileUi& f = files(env);
  if (auto answer = f.chooser.poll()) {
    const platform::ChooserResult& r = answer->second;
    using S = platform::ChooserResult::Status;
    if (r.status == S::chosen) {
      act_on_choice(state, env, answer->first, r.path);
    } else if (r.status == S::cancelled) {
      state.status = "cancelled";
    } else {  // the chooser could not run: the prompt instead, and why
      state.status = r.message;
      (answer->first == "save" ? f.prompt_save : f.prompt_open) = true;
    }
  }
  // Dropped files, in the order given; a model folder waits for the one before it.
  std::vector<std::string> dropped = std::move(f.dropped);
  f.dropped.clear();
  for (const std::string& p : dropped) open_any_path(state, env, p);
  if (f.prompt_open) ImGui::OpenPopup("Open file");
  if (f.prompt_save) ImGui::OpenPopup("Save scenario");
  f.prompt_open = f.prompt_save = false;
  path_popup("Open file", state, env, false);
  path_popup("Save scenario", state, env, true);
  model_load_modal(state, env);
}

}  // namespace mha::app
