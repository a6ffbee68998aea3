// mha-studio: the live visualizer. Reads straight through: setup, main loop, rendering, cleanup.
//   mha-studio [--scenario FILE] [--screenshot FILE.png --frames N] [--font-scale X] [--tab NAME]
//              [--frame-stats FILE.json] [--backend auto|cpu|gpu] [--large-len L] [--large-causal]
#include <epoxy/gl.h>
// epoxy first: it must define the GL entry points before GLFW includes any GL header.
#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <stb_image_write.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <sstream>
#include <thread>
#include <vector>

#include "app_state.hpp"
#include "autosave.hpp"
#include "cli_usage.hpp"
#include "errors.hpp"
#include "file_actions.hpp"
#include "fonts.hpp"
#include "frame_stats.hpp"
#include "gl_textures.hpp"
#include "gpu/gpu_backend.hpp"
#include "io/npy.hpp"
#include "lessons.hpp"
#include "limits.hpp"
#include "model_cache.hpp"
#include "open_path.hpp"
#include "panels/panels.hpp"
#include "recent_files.hpp"
#include "script.hpp"
#include "soak.hpp"
#include "studio_names.hpp"
#include "ui.hpp"
#include "window_config.hpp"

namespace fs = std::filesystem;
using namespace mha::app;

namespace {

// $XDG_STATE_HOME/mha-studio/autosave.json, else ~/.local/state/mha-studio/autosave.json.
// Whether this run remembers the window: not a screenshot, a soak or a latency replay.
bool screenshot_file_free(const std::string& screenshot, const std::string& frame_stats, double soak_seconds,
                          int soak_edits) {
  return screenshot.empty() && frame_stats.empty() && soak_seconds <= 0 && soak_edits <= 0;
}

std::string autosave_path() {
  fs::path base;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x)
    base = x;
  else if (const char* home = std::getenv("HOME"); home && *home)
    base = fs::path(home) / ".local" / "state";
  else
    return "";
  std::error_code ec;
  fs::create_directories(base / "mha-studio", ec);
  return ec ? "" : (base / "mha-studio" / "autosave.json").string();
}

// The numbers of the command line against limits.hpp: "" when all are in range, else the first
// refusal (a negative --soak never ended, a negative --width tripped an assertion inside GLFW).
std::string check_ranges(int width, int height, double soak_seconds, int edits, int frames) {
  namespace lim = mha::limits;
  if (!lim::contains(lim::kWindowSize, width))
    return lim::out_of_range("--width", lim::kWindowSize, std::to_string(width));
  if (!lim::contains(lim::kWindowSize, height))
    return lim::out_of_range("--height", lim::kWindowSize, std::to_string(height));
  if (!lim::contains(lim::kSoakSeconds, soak_seconds))  // NaN included
    return lim::out_of_range("--soak", lim::kSoakSeconds, (std::ostringstream() << soak_seconds).str());
  if (!lim::contains(lim::kEdits, edits))
    return lim::out_of_range("--edits", lim::kEdits, std::to_string(edits));
  if (frames < 1) return "--frames " + std::to_string(frames) + ": must be at least 1";
  return "";
}

// Paths dropped on the window (GLFW calls back on the main thread, inside glfwPollEvents); the UI
// opens them at its next frame, as File > Open would.
std::vector<std::string> g_dropped;
void on_drop(GLFWwindow*, int count, const char** paths) {
  for (int i = 0; i < count; ++i) g_dropped.emplace_back(paths[i]);
  glfwPostEmptyEvent();
}

bool save_screenshot(const std::string& path, int w, int h) {
  std::vector<unsigned char> px(std::size_t(w) * std::size_t(h) * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, px.data());
  stbi_flip_vertically_on_write(1);  // GL's first row is the bottom one
  return stbi_write_png(path.c_str(), w, h, 4, px.data(), w * 4) != 0;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // Each thread a forward or a stage computed starts would get a malloc arena of its own, which
  // keeps the blocks it frees: 35-70 MiB more resident at L = 4096 (--frame-stats). Two in all.
  mallopt(M_ARENA_MAX, 2);
#endif
  // ---- Setup: arguments ----
  CLI::App cli{"mha-studio: multi-head attention, live, stage by stage", "mha-studio"};
  mha::platform::add_version_flag(cli);
  std::string scenario_file, screenshot, tab_name, attention_file;
  int frames = 3, width = 1280, height = 720;
  float font_scale = 0;
  bool no_autosave = false;
  cli.add_option("--scenario", scenario_file, "Open this scenario JSON (see docs/scenario.md)");
  cli.add_option("--screenshot", screenshot, "Save a PNG of the window after --frames frames, then exit");
  cli.add_option("--frames", frames, "Frames to draw before the screenshot (default 3)");
  cli.add_option("--font-scale", font_scale, "Presenter font scale, 1 to 3");
  cli.add_option("--tab", tab_name,
                 "Open on this view: Pipeline, Reshape, Heads, Overview, \"Token lines\", Mask, Compare, "
                 "Complexity, \"Large L\", \"Attention file\"");
  cli.add_option(
      "--attention", attention_file,
      "Open attention weights saved elsewhere (.npy: (T,T), (H,T,T), (N,H,T,T) or (layers,N,H,T,T)) "
      "in the Attention file view, read-only");
  std::string lesson_name;
  int lesson_step = -1;
  cli.add_option("--lesson", lesson_name,
                 "Open this lesson (assets/lessons/NAME.json, or a lesson file's path)");
  cli.add_option("--step", lesson_step, "The lesson's step to open on, from 0 (default: its first)")
      ->check(CLI::Range(0, 1000));
  std::int64_t large_len = 1024;
  cli.add_option("--large-len", large_len,
                 "L = S of the Large L view (default 1024; 256 to 16384 in its menu)")
      ->check(CLI::Range(1, 65535));
  bool large_causal = false;
  cli.add_flag("--large-causal", large_causal, "The Large L view starts with a causal mask");
  cli.add_option("--width", width, "Window width (default 1280)");
  cli.add_option("--height", height, "Window height (default 720)");
  cli.add_flag("--no-autosave", no_autosave, "Neither restore nor write the autosave");
  std::string backend = "auto";
  cli.add_option("--backend", backend, "auto, cpu or gpu (also in the Controls panel)")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
  std::string frame_stats_file;
  cli.add_option(
      "--frame-stats", frame_stats_file,
      "Replay scripted edits at teaching/medium/large sizes, write edit-to-frame latency JSON, exit");
  bool frame_stats_xl = false;
  cli.add_flag("--frame-stats-xl", frame_stats_xl,
               "With --frame-stats: also L=4096, E=512, H=8 (about 4 GiB of memory, a minute)");
  // Reliability runs: a bounded soak of random edits, and scripted edits + a state dump
  // for the kill -9 test (tests/app_kill_restore.sh).
  double soak_seconds = 0;
  int soak_edits = 0;
  std::uint64_t soak_seed = 1;
  std::string soak_report, dump_state, script_file;
  cli.add_option("--script", script_file,
                 "Run user actions from FILE, one a line (docs/scripting.md), then exit; a bad line exits 2");
  bool exit_after_dump = false;
  cli.add_option("--soak", soak_seconds,
                 "Random edits for this many seconds, then write --soak-report and exit");
  cli.add_option("--soak-report", soak_report, "JSON report of the soak: frame times, RSS first/last/max");
  cli.add_option("--edits", soak_edits, "Apply this many random edits (one a frame), then carry on as usual");
  cli.add_option("--soak-seed", soak_seed, "Seed of the random edits (default 1)");
  cli.add_option("--dump-state", dump_state,
                 "Once the edits are done and autosaved, write the scenario as JSON to this file");
  cli.add_flag("--exit-after-dump", exit_after_dump, "Exit once --dump-state is written");
  std::string open_file;
  cli.add_option("FILE", open_file,
                 "A scenario (.json), attention weights (.npy) or a model folder (GPT-2, Llama, Mistral, "
                 "Qwen2) to open");
  if (const int status = mha::platform::parse_command_line(cli, argc, argv); status >= 0) return status;
  if (const std::string bad = check_ranges(width, height, soak_seconds, soak_edits, frames); !bad.empty()) {
    std::fprintf(stderr, "mha-studio: error: %s\n", bad.c_str());
    return 2;
  }
  // --tab: any case and spacing, as a script's `tab`; an unknown name is refused with the names.
  const ViewInfo* open_tab = tab_name.empty() ? nullptr : find_view(tab_name);
  if (!tab_name.empty() && !open_tab) {
    std::fprintf(stderr, "mha-studio: error: --tab: no view \"%s\"; the views are %s\n", tab_name.c_str(),
                 view_names().c_str());
    return 2;
  }
  Script loaded_script;  // read and checked before any window opens: a bad line exits 2 at once
  if (!script_file.empty()) {
    try {
      loaded_script = Script::load(script_file);
    } catch (const ScriptError& e) {
      std::fprintf(stderr, "mha-studio: %s\n", e.message.c_str());
      return 2;
    }
  }
  // FILE: whichever of --scenario, --attention or a model folder it is (open_path.hpp).
  std::string model_folder;
  if (!open_file.empty()) {
    try {
      const OpenRequest open = classify_open_path(open_file);
      std::string& slot = open.kind == OpenKind::scenario    ? scenario_file
                          : open.kind == OpenKind::attention ? attention_file
                                                             : model_folder;
      if (!slot.empty())
        return mha::platform::usage_error(cli, cli, "FILE and --scenario/--attention name two files");
      slot = open.path;
    } catch (const mha::Error& e) {
      return mha::platform::usage_error(cli, cli, e.what());
    }
  }
  const std::string assets = find_assets_dir();
  if (assets.empty())
    std::fprintf(stderr,
                 "mha-studio: no assets folder (presets, fonts, models) next to the program; "
                 "set MHA_ASSETS_DIR\n");
  set_models_dir(assets + "/models");

  // ---- Setup: window and GL context ----
  glfwSetErrorCallback(
      [](int code, const char* what) { std::fprintf(stderr, "GLFW error %d: %s\n", code, what); });
  if (!glfwInit()) {
    std::fprintf(stderr, "mha-studio: cannot initialise GLFW (no display? try xvfb-run)\n");
    return 1;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  // The window's size and layout from the last run: interactive and scripted runs (a script drives
  // the app as a user does); screenshots, soaks and the latency replay keep the defaults.
  const bool remembers = screenshot_file_free(screenshot, frame_stats_file, soak_seconds, soak_edits);
  const std::string window_config = remembers ? window_config_path() : "";
  WindowConfig remembered = load_window_config(window_config);
  if (!cli.count("--width")) width = remembered.width;
  if (!cli.count("--height")) height = remembered.height;
  GLFWwindow* window = glfwCreateWindow(width, height, "MHA Studio", nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr, "mha-studio: cannot create an OpenGL 3.3 window\n");
    glfwTerminate();
    return 1;
  }
  glfwMakeContextCurrent(window);
  glfwSetDropCallback(window, on_drop);
  glfwSwapInterval(screenshot.empty() && frame_stats_file.empty() ? 1 : 0);  // measured runs: no vsync

  // ---- Setup: Dear ImGui ----
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // the view state lives in the scenario (and its autosave)
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330");
  float content_scale = 1;
  glfwGetWindowContentScale(window, &content_scale, nullptr);

  // ---- Setup: the GPU path's context ----
  // The app computes on a worker thread (compute.cpp) and a GL context is current on one thread at
  // a time, so the GPU path gets its own hidden GLFW window whose GL 4.3 context shares objects with
  // the main one: current on the worker only, the UI thread's context is never taken away, and a
  // buffer it fills could later be drawn by the main context. (Dispatching on the main thread
  // instead would stall the UI for the whole forward.) Without GL 4.3 the GPU path reports why.
  glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 4);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  GLFWwindow* gpu_window = glfwCreateWindow(1, 1, "MHA Studio GPU", nullptr, window);
  glfwDefaultWindowHints();
  std::unique_ptr<mha::gpu::GpuBackend> gpu =
      gpu_window ? mha::gpu::GpuBackend::with_context([gpu_window] { glfwMakeContextCurrent(gpu_window); },
                                                      [] { glfwMakeContextCurrent(nullptr); },
                                                      "hidden GLFW window sharing the main context")
                 : mha::gpu::GpuBackend::unavailable(
                       "no OpenGL 4.3 context for compute shaders (GLFW could not "
                       "create one); the cpu path computes");
  glfwMakeContextCurrent(window);

  // ---- Setup: the Large L view's context ----
  // The Large L view dispatches its tiles on the UI thread and its row statistics on a thread of its
  // own, so it cannot borrow the worker's hidden context: a second hidden GL 4.3 window shares
  // objects with the main one (the texture it fills is drawn by the main context), made current only
  // around each call.
  glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 4);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  GLFWwindow* large_window = glfwCreateWindow(1, 1, "MHA Studio Large L", nullptr, window);
  glfwDefaultWindowHints();
  std::unique_ptr<mha::gpu::GpuBackend> large_gpu =
      large_window ? mha::gpu::GpuBackend::with_context(
                         [large_window] { glfwMakeContextCurrent(large_window); },
                         // after a call: the UI thread gets the window's
                         // context back, the view's preparing thread none
                         [window, ui = std::this_thread::get_id()] {
                           glfwMakeContextCurrent(std::this_thread::get_id() == ui ? window : nullptr);
                         },
                         "hidden GLFW window for the Large L view")
                   : mha::gpu::GpuBackend::unavailable(
                         "no OpenGL 4.3 context for compute shaders (GLFW could not create one)");
  glfwMakeContextCurrent(window);

  // ---- Setup: the scenario: --scenario, else the autosave, else the course notebook ----
  AppState state;
  remembered.window.tab = ViewTab::pipeline;  // the view comes from the scenario or --tab
  remembered.window.show_keys = false;
  state.restore_window(remembered.window);
  state.computer.on_done = [] { glfwPostEmptyEvent(); };  // thread-safe in GLFW
  state.stages.on_done = [] { glfwPostEmptyEvent(); };
  state.computer.set_backend(backend == "gpu"   ? BackendChoice::gpu
                             : backend == "cpu" ? BackendChoice::cpu
                                                : BackendChoice::automatic);
  state.computer.set_device(
      gpu.get(), gpu_window ? "GL 4.3 compute on a hidden shared context" : gpu->unavailable_reason());
  UiEnv env;
  env.large_gpu = large_gpu.get();
  env.large_len = large_len;
  env.large_causal = large_causal;
  env.presets = list_presets(assets + "/presets");
  env.assets_dir = assets;
  env.files = std::make_shared<FileUi>();
  if (remembers) {  // the Recent menu, beside window.json; batch runs neither read nor write it
    env.files->recent_file = recent_files_path();
    env.files->recent = load_recent(env.files->recent_file);
    if (!open_file.empty()) {
      add_recent(env.files->recent, open_file);
      save_recent(env.files->recent_file, env.files->recent);
    }
  }
  std::unique_ptr<FrameStats> stats;
  if (!frame_stats_file.empty()) stats = std::make_unique<FrameStats>(frame_stats_file, frame_stats_xl);
  std::unique_ptr<Script> script;
  if (!script_file.empty()) script = std::make_unique<Script>(std::move(loaded_script));
  const bool batch_run = !screenshot.empty() || stats || script;
  // A soak is random edits: it must not restore or overwrite the user's autosave (--edits does, on purpose).
  // One instance owns the autosave (a second one says so and does not write it); an unreadable one
  // is moved aside before anything could overwrite it; dead instances' temp files are removed.
  AutosaveSession session =
      open_autosave((no_autosave || batch_run || soak_seconds > 0) ? "" : autosave_path());
  const std::string autosave = session.path;
  try {
    if (!scenario_file.empty()) {
      std::vector<std::string> warnings;
      state.start(load_scenario(scenario_file, &warnings), true);  // on the view the file names
      env.scenario_path = scenario_file;
      for (const std::string& w : warnings) std::fprintf(stderr, "mha-studio: warning: %s\n", w.c_str());
      if (!warnings.empty()) state.status = warnings.front();
    } else if (session.restored) {
      state.start(std::move(*session.restored), true);
    } else if (fs::exists(assets + "/presets/course_notebook.json")) {
      state.start(load_scenario(assets + "/presets/course_notebook.json"));
    }
  } catch (const mha::Error& e) {
    state.errors["file"] = e.what();  // start from the default scenario and say why
    state.status = "could not open the scenario; started from the default";
  }
  state.autosave_path = autosave;
  if (!session.message.empty() && !(session.restored && !scenario_file.empty()))
    state.status = session.message;
  if (font_scale > 0) {
    state.apply(set_control("presenter", "true"));
    state.apply(set_control("font_scale", std::to_string(std::clamp(font_scale, 1.0f, 3.0f))));
  }
  if (open_tab) state.apply(show_view(open_tab->id));
  if (!attention_file.empty()) {
    open_attention_file(env.panels, attention_file);
    if (!open_tab) state.apply(show_view(ViewTab::attention_file));
  }
  if (stats) state.apply(show_view(FrameStats::kTab));  // the view the replay measures, whatever was open
  if (!model_folder.empty()) state.apply(choose_model(model_folder));  // a load error shows by the control
  if (!lesson_name.empty() || lesson_step >= 0) {
    if (lesson_name.empty()) return mha::platform::usage_error(cli, cli, "--step needs --lesson");
    if (const std::string why = start_lesson(state, env, lesson_name, std::max(0, lesson_step));
        !why.empty()) {
      std::fprintf(stderr, "mha-studio: error: --lesson: %s\n", why.c_str());
      return 2;
    }
  }
  state.commit();
  state.recompute();
  std::unique_ptr<Soak> soak;
  if (soak_seconds > 0 || soak_edits > 0) soak = std::make_unique<Soak>(soak_seconds, soak_edits, soak_seed);
  auto textures = std::make_unique<GlTextures>();  // GL objects: released before the context

  // ---- Main loop ----
  float font_px = 0;
  bool presenter = !state.window().presenter;  // forces the first apply_theme
  int frame = 0;
  int settled_frames = 0;  // frames drawn in a row with nothing computing
  while (!glfwWindowShouldClose(window) && !env.quit_requested) {
    // Sleep unless something needs frames: an animation, or a scripted run with nothing computing.
    // A background forward wakes the loop itself when it lands (on_done), so waiting costs no latency
    // and leaves both cores to the forward.
    if (state.animating || (batch_run && state.computer.settled() && !state.stages.busy() &&
                            !large_view_info(env.panels).computing))
      glfwPollEvents();
    else
      glfwWaitEventsTimeout(0.25);
    state.animating = false;
    const double frame_start = glfwGetTime();

    // Fonts and theme follow the presenter settings; the atlas is rebuilt outside a frame.
    const WindowState& v = state.window();
    const float want_px = std::round(17.0f * content_scale * (v.presenter ? v.font_scale : 1.0f));
    if (want_px != font_px) {
      const std::string warning = load_fonts(assets, want_px);
      if (!warning.empty()) state.status = warning;
      ImGui_ImplOpenGL3_DestroyFontsTexture();
      ImGui_ImplOpenGL3_CreateFontsTexture();
      font_px = want_px;
    }
    if (v.presenter != presenter) apply_theme(presenter = v.presenter);

    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    if (batch_run) io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);  // no stray hover in screenshots
    if (script) script->before_new_frame(io);
    ImGui::NewFrame();
    if (stats) stats->before_frame(state);
    if (soak) soak->before_frame(state, env);
    state.tick(ImGui::GetTime());
    if (script) script->before_ui(state, env);
    for (std::string& p : g_dropped) env.files->dropped.push_back(std::move(p));
    g_dropped.clear();
    draw_ui(state, *textures, env);

    // ---- Rendering ----
    ImGui::Render();
    // A forward this frame asked for that lands within a frame's time: the next frame shows it, this
    // one is not drawn (a script or a screenshot reads every frame it builds).
    const double frame_ms = (glfwGetTime() - frame_start) * 1000.0;
    if (!script && screenshot.empty() && state.hold_for_result(AppState::kHeldFrameMs - frame_ms)) {
      state.animating = true;
      continue;
    }
    int fb_w = 0, fb_h = 0;
    glfwGetFramebufferSize(window, &fb_w, &fb_h);
    glViewport(0, 0, fb_w, fb_h);
    const ImVec4 bg = ImGui::GetStyle().Colors[ImGuiCol_WindowBg];  // the host window draws none
    glClearColor(bg.x, bg.y, bg.z, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    if (script) {
      script->after_render(state, env, fb_w, fb_h, save_screenshot);
      if (script->failed()) {
        std::fprintf(stderr, "mha-studio: %s\n", script->error().c_str());
        frame = -2;
        env.quit_requested = true;
      } else if (script->done()) {
        env.quit_requested = true;
      }
    }
    // A screenshot waits for a background compute (the stages a view asked for, the Large L view's)
    // to land: a real result, drawn twice (ImGui sizes a table that appears in one frame from what it
    // measured there, in the next).
    settled_frames = state.computer.busy() || state.stages.busy() || large_view_info(env.panels).computing
                         ? 0
                         : settled_frames + 1;
    if (!screenshot.empty() && ++frame >= frames && settled_frames >= 2) {
      const bool ok = save_screenshot(screenshot, fb_w, fb_h);
      std::fprintf(ok ? stdout : stderr, ok ? "wrote %s (%dx%d)\n" : "mha-studio: cannot write %s\n",
                   screenshot.c_str(), fb_w, fb_h);
      env.quit_requested = true;
      if (!ok) frame = -1;
    }
    glfwSwapBuffers(window);
    if (soak) {
      soak->after_frame();
      if (soak->done() && soak_seconds > 0) {
        std::string error;
        if (!soak_report.empty() && !soak->write(soak_report, &error)) {
          std::fprintf(stderr, "mha-studio: %s\n", error.c_str());
          frame = -1;
        }
        env.quit_requested = true;
      }
    }
    // --dump-state: once the edits are done, the result is in and the autosave has been written.
    if (!dump_state.empty() && (!soak || soak->done()) &&
        !(state.autosave_pending && !state.autosave_path.empty()) && !state.computer.busy()) {
      const std::string text = to_json(state.scenario(), state.window().tab);
      try {
        mha::write_file_atomic(dump_state, std::vector<unsigned char>(text.begin(), text.end()));
      } catch (const mha::Error& e) {
        std::fprintf(stderr, "mha-studio: %s\n", e.what());
        frame = -1;
      }
      dump_state.clear();
      if (exit_after_dump) env.quit_requested = true;
    }
    if (stats) {
      glFinish();  // the frame is really drawn before the clock stops
      stats->after_frame(state);
      if (stats->done()) {
        std::string error;
        if (!stats->write(&error)) {
          std::fprintf(stderr, "mha-studio: %s\n", error.c_str());
          frame = -1;
        }
        env.quit_requested = true;
      }
    }
  }

  // ---- Cleanup ----
  if (!window_config.empty()) {
    glfwGetWindowSize(window, &remembered.width, &remembered.height);
    remembered.window = state.window();
    save_window_config(window_config, remembered);
  }
  if (!autosave.empty()) {
    try {
      save_scenario(autosave, state.scenario());
    } catch (const mha::Error& e) {
      std::fprintf(stderr, "mha-studio: autosave on exit failed: %s\n", e.what());
    }
  }
  textures.reset();
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  state.computer.stop();  // no GPU forward may run past its context
  gpu.reset();
  large_view_wait(env.panels);  // its preparing thread, if any, is done with the backend
  large_gpu.reset();            // its texture and buffers, deleted with its context current
  if (large_window) glfwDestroyWindow(large_window);
  if (gpu_window) glfwDestroyWindow(gpu_window);
  glfwDestroyWindow(window);
  glfwTerminate();
  return frame == -2 ? 2 : frame < 0 ? 1 : 0;
}
