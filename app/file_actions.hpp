// Files the desktop's way: Open / Save through the desktop's file chooser (platform/file_chooser.hpp),
// the typed-path prompt where none is installed; paths dropped on the window; the Recent menu; and a
// model folder loaded in the background with a progress bar and Cancel, applied (as an action) only
// once it has loaded. Shared by the app and the headless UI tests; no GL.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "app_state.hpp"
#include "file_chooser.hpp"
#include "studio_names.hpp"

namespace mha::app {

struct UiEnv;

struct FileUi {
  platform::FileChooser chooser;
  std::vector<std::string> recent;   // newest first
  std::string recent_file;           // where `recent` is kept; "" = not remembered (batch runs)
  std::vector<std::string> dropped;  // dropped on the window (main.cpp), opened at the next frame
  bool prompt_open = false, prompt_save = false;  // the typed-path prompts, asked for this frame
  std::string typed_path;                         // what the prompt holds
  // The model folder loading in the background; its outcome is applied on the UI thread.
  struct Load;
  std::shared_ptr<Load> load;
  std::thread load_thread;
  FileUi() = default;
  ~FileUi();  // cancels a load in flight and waits for it
  FileUi(const FileUi&) = delete;
  FileUi& operator=(const FileUi&) = delete;
};

// Opens a scenario (JSON), attention weights (.npy), a model folder or a .safetensors file's folder,
// and remembers it in Recent; a failure leaves everything as it was and says why.
void open_any_path(AppState& state, UiEnv& env, const std::string& path);
// File > Open... / Save as... / Open model folder...: the chooser, else the typed-path prompt.
void ask_open(AppState& state, UiEnv& env);
// File > Check my implementation...: a .py file, run in the Check view.
void ask_check(AppState& state, UiEnv& env);
void ask_open_folder(AppState& state, UiEnv& env);
void ask_save(AppState& state, UiEnv& env);
// The Recent submenu (inside File): missing files are shown disabled; "Clear" empties it.
void recent_menu(AppState& state, UiEnv& env);
// Once a frame: the chooser's answer, dropped paths, the prompts and the model-load modal.
void draw_file_ui(AppState& state, UiEnv& env);

}  // namespace mha::app
