#include "lesson_export_dialog.hpp"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>

#include "data_dir.hpp"
#include "errors.hpp"
#include "lesson_handout.hpp"
#include "lessons.hpp"

namespace mha::app {

namespace fs = std::filesystem;

std::string export_lesson(const std::string& assets_dir, const std::string& name_or_path,
                          const std::string& out, bool markdown, std::string* summary) {
  try {
    const std::string file = handout::lesson_file(assets_dir + "/lessons", name_or_path);
    const handout::Format format = handout::handout_format(out, markdown ? "md" : "pdf");
    const handout::Written w =
        handout::write_lesson_handout(file, assets_dir, format, out, platform::default_font().path);
    if (summary)
      *summary = format == handout::Format::pdf
                     ? std::to_string(w.pages) + " pages, " + std::to_string(w.figures) + " figures"
                     : "index.md and " + std::to_string(w.figures) + " figures";
    return "";
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {  // out of memory, a thread that cannot start
    return std::string("the handout could not be written: ") + e.what();
  }
}

namespace {

// The export running off the UI thread: its outcome, read once it is done.
struct Job {
  std::thread thread;
  std::atomic<bool> done{false};
  std::string error, summary, out;
  ~Job() {
    if (thread.joinable()) thread.join();
  }
};

struct Dialog {
  bool open_requested = false;
  int lesson = 0;
  int format = 0;  // 0 PDF, 1 Markdown folder
  std::string path, suggested, error;
  std::unique_ptr<Job> job;
};

Dialog& dialog() {
  static Dialog d;
  return d;
}

}  // namespace

void ask_export_lesson(AppState& state) {
  Dialog& d = dialog();
  d.open_requested = true;
  d.error.clear();
  d.lesson = -1;  // the open lesson, found when the list is read
  if (const auto& l = state.window().lesson.lesson) d.suggested = l->name;  // remembered for the pick
}

void draw_lesson_export_dialog(AppState& state, UiEnv& env) {
  Dialog& d = dialog();
  const std::vector<std::string> files = lesson_files(env);
  if (d.open_requested) {
    d.open_requested = false;
    if (d.lesson < 0) {
      d.lesson = 0;
      for (int k = 0; k < int(files.size()); ++k)
        if (fs::path(files[std::size_t(k)]).stem() == d.suggested) d.lesson = k;
      d.suggested.clear();
    }
    ImGui::OpenPopup("Export lesson");
  }
  // The job's outcome, even after the dialog was closed.
  if (d.job && d.job->done) {
    d.job->thread.join();
    d.error = d.job->error;
    if (d.error.empty()) {
      std::error_code ec;
      const fs::path full = fs::absolute(d.job->out, ec);
      state.status =
          "exported the lesson handout to " + (ec ? d.job->out : full.string()) + " (" + d.job->summary + ")";
    }
    d.job.reset();
  }
  if (!ImGui::BeginPopupModal("Export lesson", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) return;
  if (files.empty()) {
    ImGui::TextUnformatted(("no lessons in " + env.assets_dir + "/lessons").c_str());
  } else {
    if (d.lesson < 0 || d.lesson >= int(files.size())) d.lesson = 0;
    const std::string name = fs::path(files[std::size_t(d.lesson)]).stem().string();
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 16);
    if (ImGui::BeginCombo("lesson", name.c_str())) {
      for (int k = 0; k < int(files.size()); ++k)
        if (ImGui::Selectable(fs::path(files[std::size_t(k)]).stem().string().c_str(), k == d.lesson))
          d.lesson = k;
      ImGui::EndCombo();
    }
    ImGui::RadioButton("PDF (A4, a page a step)", &d.format, 0);
    ImGui::SameLine();
    ImGui::RadioButton("Markdown + PNG folder", &d.format, 1);
    const std::string suggested = name + (d.format == 0 ? "-handout.pdf" : "-handout/");
    // Follow the suggestion until the user types a name of their own.
    if (ImGui::IsWindowAppearing() || d.path.empty() || d.path == d.suggested) d.path = suggested;
    d.suggested = suggested;
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 28);
    ImGui::InputText(d.format == 0 ? "file" : "folder", &d.path);
    const bool running = d.job != nullptr;
    ImGui::BeginDisabled(running);
    if (ImGui::Button(running ? "Exporting..." : "Export")) {
      d.error.clear();
      auto job = std::make_unique<Job>();
      job->out = d.path;
      Job* j = job.get();
      const std::string assets = env.assets_dir, file = files[std::size_t(d.lesson)], out = d.path;
      const bool markdown = d.format == 1;
      try {
        j->thread = std::thread([j, assets, file, out, markdown] {
          j->error = export_lesson(assets, file, out, markdown, &j->summary);
          j->done = true;
        });
        d.job = std::move(job);
      } catch (const std::system_error& e) {
        d.error = std::string("the export could not start: ") + e.what();
      }
    }
    ImGui::EndDisabled();
  }
  ImGui::SameLine();
  if (ImGui::Button(d.job ? "Close (the export goes on)" : "Close")) ImGui::CloseCurrentPopup();
  if (!d.error.empty()) {
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 28);
    ImGui::TextColored(ImVec4(1, 0.38f, 0.38f, 1), "%s", d.error.c_str());
    ImGui::PopTextWrapPos();
  } else if (!d.job && state.status.rfind("exported the lesson handout", 0) == 0) {
    ImGui::TextUnformatted(state.status.c_str());
  }
  ImGui::EndPopup();
}

}  // namespace mha::app
