// The Check view: a student's own PyTorch multi-head attention run against the engine, case by case,
// with the mistake named (studio/check.hpp: the same checker as `mha check`). The student's file runs
// in a child Python on a thread of its own, so the window stays live; the view re-runs it when the
// file changes on disk, so a student editing in their own editor watches the verdict turn green.
// Only a file the user picked (this view's field, File > Check my implementation..., a dropped .py,
// a script's `check FILE`) is ever run.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <string>

#include "check.hpp"
#include "panel_util.hpp"
#include "panels.hpp"

namespace mha::app {

namespace fs = std::filesystem;

struct CheckPanel {
  CheckPanel() = default;
  CheckPanel(const CheckPanel&) = delete;
  CheckPanel& operator=(const CheckPanel&) = delete;
  // Closing the window does not wait for a student's file that hangs: its Python (and what it
  // started, its process group) is stopped.
  ~CheckPanel() {
    if (const int pid = child.load(); running.valid() && pid > 0) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
  }
  std::atomic<int> child{0};  // the running check's Python, 0 when none
  std::string path;           // the student's file being checked
  std::string typed;          // the path field
  std::future<CheckReport> running;
  std::optional<CheckReport> report;
  std::string error;  // could not run it at all (no torch, a hang, no file)
  fs::file_time_type seen{};
  double last_poll = 0;
  int shown_case = -1;      // the failing case whose difference is drawn
  std::vector<float> diff;  // (L, E) |yours - reference| of batch item 0 of that case
  std::vector<std::string> diff_rows, diff_cols;

  void start(const std::string& file) {
    path = typed = file;
    error.clear();
    std::error_code ec;
    seen = fs::last_write_time(file, ec);
    running = std::async(std::launch::async, [this, file] {
      PythonCheckOptions options;
      options.running_pid = &child;
      return check_python_file(file, options);
    });
  }
  bool busy() const { return running.valid(); }
  void poll(double now) {
    if (running.valid() && running.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      try {
        report = running.get();
        error.clear();
      } catch (const std::exception& e) {  // typed errors say what; anything else is said too
        report.reset();
        error = e.what();
      }
      running = {};
      shown_case = -1;
    }
    // The file changed on disk: check it again (a second between looks).
    if (!path.empty() && !running.valid() && now - last_poll > 1.0) {
      last_poll = now;
      std::error_code ec;
      const fs::file_time_type t = fs::last_write_time(path, ec);
      if (!ec && t != seen) start(path);
    }
  }
  void draw(AppState& state, Textures& tex);
};

void check_file(Panels& panels, const std::string& path) {
  panel::made(panels.check).start(path);
}

CheckStatus check_status(const Panels& panels) {
  CheckStatus s;
  if (!panels.check) return s;
  const CheckPanel& c = *panels.check;
  s.file = c.path;
  s.running = c.busy();
  s.error = c.error;
  if (c.report) {
    s.verdict = to_string(c.report->verdict);
    for (Mistake m : c.report->mistakes) s.mistakes.push_back(mistake_info(m).id);
    if (c.report->convention) s.mask_convention = to_string(*c.report->convention);
    for (const CaseReport& r : c.report->cases)
      if (r.ran) s.cases.push_back({r.name, r.ok, r.max_abs_diff});
    if (c.report->verdict == Verdict::error) s.error = c.report->error_message;
  }
  return s;
}

bool check_busy(const Panels& panels) {
  return panels.check && panels.check->busy();
}

void draw_check(Panels& panels, AppState& state, Textures& tex) {
  panel::made(panels.check).draw(state, tex);
}

void CheckPanel::draw(AppState& state, Textures& tex) {
  poll(ImGui::GetTime());
  const float font = ImGui::GetFontSize();
  const bool light = state.window().presenter;
  const ImVec4 good = light ? ImVec4(0.0f, 0.5f, 0.1f, 1) : ImVec4(0.35f, 0.9f, 0.45f, 1);
  const ImVec4 bad = light ? ImVec4(0.75f, 0.0f, 0.0f, 1) : ImVec4(1.0f, 0.38f, 0.38f, 1);
  ImGui::TextWrapped(
      "Your own PyTorch multi-head attention (the course's exercise), run on a table of cases against "
      "this engine with your module's own weights. It runs in Python with torch (Debian: python3-torch); "
      "the file is checked again whenever you save it.");
  ImGui::SetNextItemWidth(std::max(font * 10, ImGui::GetContentRegionAvail().x - font * 6));
  ImGui::InputTextWithHint("##student", "path of your .py file", &typed);
  ImGui::SameLine();
  if (ImGui::Button("Check") && !typed.empty() && !busy()) start(typed);
  if (busy()) {
    state.animating = true;
    const char spin[] = "|/-\\";
    ImGui::Text("%c running %s in Python...", spin[int(ImGui::GetTime() * 8) % 4], path.c_str());
    return;
  }
  if (!error.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, bad);
    ImGui::TextWrapped("Could not run it: %s", error.c_str());
    ImGui::PopStyleColor();
    return;
  }
  if (!report) {
    ImGui::TextDisabled("No file checked yet. `mha check FILE.py` does the same from a terminal.");
    return;
  }
  const CheckReport& r = *report;
  ImGui::Separator();
  if (r.verdict == Verdict::error) {
    ImGui::PushStyleColor(ImGuiCol_Text, bad);
    ImGui::TextWrapped("It did not run: %s", r.error_message.c_str());
    ImGui::PopStyleColor();
    if (r.error && !r.error->file.empty())
      ImGui::TextWrapped("%s, line %d%s%s", r.error->file.c_str(), r.error->line,
                         r.error->case_name.empty() ? "" : ", in case ", r.error->case_name.c_str());
    return;
  }
  ImGui::PushStyleColor(ImGuiCol_Text, r.verdict == Verdict::correct ? good : bad);
  ImGui::TextWrapped("%s", r.verdict == Verdict::correct ? "Correct: every case equals the engine's."
                           : r.verdict == Verdict::mistakes
                               ? "Not yet: the differences are explained by:"
                               : "Not yet: a difference no catalogued mistake explains.");
  ImGui::PopStyleColor();
  for (Mistake m : r.mistakes) {
    const MistakeInfo& info = mistake_info(m);
    ImGui::Bullet();
    ImGui::TextWrapped("%s (%s)", info.title, info.id);
    ImGui::Indent();
    ImGui::TextDisabled("you wrote: %s", info.wrong);
    ImGui::TextWrapped("fix: %s", info.fix);
    const std::string where = info.view;
    const ViewInfo* v = find_view(where.substr(0, where.find(':')));
    if (!v && where.rfind("Mask editor", 0) == 0) v = &view_info(ViewTab::mask);
    if (v) {
      ImGui::PushID(info.id);
      if (ImGui::SmallButton((std::string("Show it in ") + v->name).c_str())) {
        state.apply(show_view(v->id));
        // "Reshape: mistake 1, ...": the Reshape view shows that mistake.
        if (const auto at = where.find("mistake "); at != std::string::npos && at + 8 < where.size())
          if (const int n = where[at + 8] - '0'; n >= 1 && n <= 3) state.apply(set_reshape_mistake(n));
      }
      ImGui::PopID();
      ImGui::SameLine();
      ImGui::TextDisabled("%s", where.c_str());
    }
    ImGui::Unindent();
  }
  if (r.verdict == Verdict::unknown && !r.unknown_detail.empty())
    ImGui::TextWrapped("%s", r.unknown_detail.c_str());
  ImGui::Text("mask convention: %s", r.convention ? to_string(*r.convention) : "(no masked case ran)");
  ImGui::TextDisabled("tolerance |yours - engine| <= %g + %g |engine|", r.atol, r.rtol);
  if (ImGui::BeginTable("cases", 3, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp)) {
    int k = 0;
    for (const CaseReport& c : r.cases) {
      ImGui::TableNextColumn();
      ImGui::PushStyleColor(ImGuiCol_Text, !c.ran ? ImGui::GetStyle().Colors[ImGuiCol_TextDisabled]
                                           : c.ok ? good
                                                  : bad);
      ImGui::TextUnformatted(!c.ran ? "-" : c.ok ? "ok" : "X");
      ImGui::PopStyleColor();
      ImGui::TableNextColumn();
      ImGui::TextWrapped("%s", c.what.c_str());
      ImGui::TableNextColumn();
      if (!c.ran) {
        ImGui::TextDisabled("%s", c.skipped.c_str());
      } else {
        ImGui::Text("%.3g", c.max_abs_diff);
        if (!c.ok && c.reference && c.yours.output) {
          ImGui::SameLine();
          ImGui::PushID(k);
          if (ImGui::SmallButton("show")) shown_case = k;
          ImGui::PopID();
        }
      }
      ++k;
    }
    ImGui::EndTable();
  }
  if (shown_case < 0) {  // the first failing case, drawn at once
    for (int k = 0; k < int(r.cases.size()) && shown_case < 0; ++k)
      if (r.cases[std::size_t(k)].ran && !r.cases[std::size_t(k)].ok && r.cases[std::size_t(k)].reference &&
          r.cases[std::size_t(k)].yours.output)
        shown_case = k;
    diff.clear();
  }
  if (shown_case < 0) return;
  const CaseReport& c = r.cases[std::size_t(shown_case)];
  const Tensor<float>& yours = *c.yours.output;  // (N, L, E)
  if (yours.shape.size() != 3) return;
  const int L = int(yours.shape[1]), E = int(yours.shape[2]);
  if (diff.size() != std::size_t(L) * std::size_t(E)) {  // batch item 0: |yours - reference|, (L, E)
    const Tensor<float> ref = c.reference->output();
    if (ref.shape != yours.shape) return;
    diff.assign(std::size_t(L) * std::size_t(E), 0.0f);
    for (std::size_t i = 0; i < diff.size(); ++i) diff[i] = std::fabs(yours.data[i] - ref.data[i]);
    diff_rows.clear();
    diff_cols.clear();
    for (int i = 0; i < L; ++i) diff_rows.push_back("t" + std::to_string(i));
    for (int j = 0; j < E; ++j) diff_cols.push_back(std::to_string(j));
  }
  float top = 0;
  for (float v : diff) top = std::isfinite(v) ? std::max(top, v) : top;
  ImGui::Text("case %s, batch item 0: |your output - the engine's|, (L, E)", c.name.c_str());
  Heatmap hm;
  hm.id = "check-diff";
  hm.values = diff.data();
  hm.rows = L;
  hm.cols = E;
  hm.row_stride = E;
  hm.vmin = 0;
  hm.vmax = top > 0 ? top : 1;
  hm.colormap = Colormap::magma;
  hm.row_labels = &diff_rows;
  hm.col_labels = &diff_cols;
  hm.show_values = false;
  hm.version = panel::mix(
      {std::uint64_t(shown_case), std::uint64_t(diff.size()), std::uint64_t(std::uintptr_t(&*report))});
  hm.size = ImVec2(std::min(ImGui::GetContentRegionAvail().x - font * 5, font * 24), font * 10);
  draw_heatmap(tex, hm);
}

}  // namespace mha::app
