// The Lesson panel: the open lesson's step beside the view (narration, what to look at, the task
// with its hints and solution, Back / Next), and the Lessons menu that opens one.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "../lessons.hpp"

namespace mha::app {

namespace {

// A run of narration in one style.
enum class Style { plain, bold, code };

// Narration text in the panel's colours: presenter mode is a light theme, so the accents are darker.
ImVec4 style_colour(Style s, bool presenter) {
  if (s == Style::bold) return presenter ? ImVec4(0.05f, 0.2f, 0.55f, 1) : ImVec4(1.0f, 0.85f, 0.45f, 1);
  if (s == Style::code) return presenter ? ImVec4(0.55f, 0.1f, 0.35f, 1) : ImVec4(0.55f, 0.85f, 1.0f, 1);
  return ImGui::GetStyleColorVec4(ImGuiCol_Text);
}

// One line of the Markdown subset (**bold**, `code`) as words, each with its style; wrapped at the
// region's right edge word by word (ImGui wraps only single-style text). `indent`: a list item's.
void draw_marked_line(const std::string& line, float indent, bool presenter, const ImVec4* colour = nullptr) {
  std::vector<std::pair<std::string, Style>> words;
  Style style = Style::plain;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) words.emplace_back(word, style);
    word.clear();
  };
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (style != Style::code && line.compare(i, 2, "**") == 0) {
      flush();
      style = style == Style::bold ? Style::plain : Style::bold;
      ++i;
    } else if (line[i] == '`') {
      flush();
      style = style == Style::code ? Style::plain : Style::code;
    } else if (line[i] == ' ') {  // a line may break here, inside a code span too (an error message)
      flush();
      words.emplace_back(" ", style);
    } else {
      word += line[i];
    }
  }
  flush();
  const float left = ImGui::GetCursorPosX() + indent;
  const float right = ImGui::GetContentRegionAvail().x + ImGui::GetCursorPosX();
  const float space = ImGui::CalcTextSize(" ").x;
  float x = left;
  bool line_start = true;
  ImGui::SetCursorPosX(left);
  for (const auto& [w, s] : words) {
    if (w == " ") {
      if (!line_start) x += space;
      continue;
    }
    const float width = ImGui::CalcTextSize(w.c_str()).x;
    if (!line_start && x + width > right) {  // to the next line
      x = left;
      line_start = true;
    }
    if (!line_start)
      ImGui::SameLine(0, 0), ImGui::SetCursorPosX(x);
    else
      ImGui::SetCursorPosX(left);
    const ImVec2 at = ImGui::GetCursorScreenPos();
    if (s == Style::code)
      ImGui::GetWindowDrawList()->AddRectFilled(
          at, ImVec2(at.x + width, at.y + ImGui::GetTextLineHeight()),
          ImGui::GetColorU32(presenter ? ImVec4(0, 0, 0, 0.07f) : ImVec4(1, 1, 1, 0.08f)));
    ImGui::PushStyleColor(ImGuiCol_Text, colour ? *colour : style_colour(s, presenter));
    ImGui::TextUnformatted(w.c_str());
    if (s == Style::bold) {  // one font: bold is the word drawn twice, a pixel apart
      ImGui::GetWindowDrawList()->AddText(ImVec2(at.x + 1, at.y), ImGui::GetColorU32(ImGuiCol_Text),
                                          w.c_str());
    }
    ImGui::PopStyleColor();
    x += width;
    line_start = false;
  }
  if (words.empty()) ImGui::NewLine();
}

// Paragraphs (a blank line apart), "- " list items as bullets.
void draw_narration(const std::string& text, bool presenter) {
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) {
      ImGui::Dummy(ImVec2(0, ImGui::GetTextLineHeight() * 0.5f));
      continue;
    }
    if (line.rfind("- ", 0) == 0 || line.rfind("* ", 0) == 0) {
      const ImVec2 at = ImGui::GetCursorScreenPos();
      const float r = ImGui::GetFontSize() * 0.15f;
      ImGui::GetWindowDrawList()->AddCircleFilled(
          ImVec2(at.x + ImGui::GetFontSize() * 0.4f, at.y + ImGui::GetTextLineHeight() * 0.5f), r,
          ImGui::GetColorU32(ImGuiCol_Text));
      draw_marked_line(line.substr(2), ImGui::GetFontSize() * 1.1f, presenter);
    } else {
      draw_marked_line(line, 0, presenter);
    }
  }
}

// What a step points at, in words: a view's name or a control's label.
std::string pointed_at(const std::string& what) {
  if (const ViewInfo* v = find_view(what)) return std::string("the ") + v->name + " view";
  for (const ControlInfo& c : controls())
    if (what == c.id) return std::string("\"") + c.label + "\" (below)";  // its field is drawn here
  return what;
}

// A control the step names (what it points at, what its task checks), editable here: the lesson
// column takes the Controls panel's place. Enter applies it as the Controls panel would.
void control_field(AppState& state, const std::string& id) {
  const ControlInfo* info = nullptr;
  for (const ControlInfo& c : controls())
    if (id == c.id) info = &c;
  if (!info) return;
  char text[256];
  std::snprintf(text, sizeof text, "%s", control_value(state.scenario(), state.window(), id).c_str());
  ImGui::PushID(id.c_str());
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted(info->label);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(-1);
  if (ImGui::InputText("##value", text, sizeof text, ImGuiInputTextFlags_EnterReturnsTrue)) {
    try {
      state.apply(set_control(id, text));
      state.errors.erase("lesson");
    } catch (const ActionError& e) {
      state.errors["lesson"] = e.what();
    }
  }
  if (lesson_points_at(state, id)) outline_last_item();
  ImGui::PopID();
}

const ImVec4 kDone(0.2f, 0.75f, 0.3f, 1);
const ImVec4 kDoneDark(0.0f, 0.45f, 0.1f, 1);  // on the presenter's light background

}  // namespace

bool lesson_points_at(const AppState& state, const std::string& what) {
  const LessonPlace& p = state.window().lesson;
  if (!p.lesson || p.step < 0 || p.step >= int(p.lesson->steps.size())) return false;
  const std::string& at = p.lesson->steps[std::size_t(p.step)].point_at;
  if (at.empty()) return false;
  const ViewInfo* a = find_view(at);
  const ViewInfo* b = find_view(what);
  return at == what || (a && a == b);
}

void outline_last_item() {
  // Pulses once a second between the accent colour and half of it, so the eye finds it on a projector.
  const float t = float(ImGui::GetTime());
  const float pulse = 0.6f + 0.4f * std::sin(t * 6.2831853f);
  const float pad = ImGui::GetStyle().FramePadding.y;
  const ImVec2 lo(ImGui::GetItemRectMin().x - pad, ImGui::GetItemRectMin().y - pad);
  const ImVec2 hi(ImGui::GetItemRectMax().x + pad, ImGui::GetItemRectMax().y + pad);
  ImGui::GetForegroundDrawList()->AddRect(lo, hi, ImGui::GetColorU32(ImVec4(1.0f, 0.55f, 0.0f, pulse)), pad,
                                          0, std::max(2.0f, ImGui::GetFontSize() / 6));
}

void draw_lesson_panel(AppState& state, UiEnv& env) {
  const LessonPlace& p = state.window().lesson;
  if (!p.lesson) return;
  const Lesson& lesson = *p.lesson;
  const int n = int(lesson.steps.size());
  const LessonStep& step = lesson.steps[std::size_t(p.step)];
  const bool presenter = state.window().presenter;
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextDisabled("%s: step %d of %d", lesson.title.c_str(), p.step + 1, n);
  ImGui::PushStyleColor(ImGuiCol_Text, style_colour(Style::bold, presenter));
  ImGui::TextUnformatted(step.title.c_str());
  ImGui::PopStyleColor();
  ImGui::PopTextWrapPos();
  ImGui::Separator();

  std::vector<std::string> fields;  // the task's controls, editable with it, each once
  if (step.has_task)
    for (const LessonCondition& c : step.task.check)
      if (std::find(fields.begin(), fields.end(), c.what) == fields.end()) fields.push_back(c.what);
  int field_count = 0;
  for (const std::string& f : fields)
    for (const ControlInfo& c : controls()) field_count += f == c.id;

  // The buttons stay at the bottom with the task above them, in sight while the narration scrolls.
  const ImGuiStyle& st = ImGui::GetStyle();
  const float frame = ImGui::GetFrameHeightWithSpacing();
  const float buttons_h = frame + st.ItemSpacing.y * 2;  // the separator above them and their row
  float task_h = 0;
  if (step.has_task) {
    const float wrap = ImGui::GetContentRegionAvail().x - st.WindowPadding.x * 2;
    std::string plain = "Task: " + step.task.instruction;  // as drawn, without its marks
    plain.erase(std::remove(plain.begin(), plain.end(), '`'), plain.end());
    task_h = ImGui::CalcTextSize(plain.c_str(), nullptr, false, wrap).y + st.ItemSpacing.y +
             float(field_count + 1) * frame + st.WindowPadding.y * 2 + st.ItemSpacing.y * 2;
    task_h = std::min(task_h, (ImGui::GetContentRegionAvail().y - buttons_h) * 0.6f);
  }
  ImGui::BeginChild("lesson-text", ImVec2(0, -(buttons_h + task_h)));
  draw_narration(step.narration, presenter);
  ImGui::PushTextWrapPos(0.0f);
  if (!step.point_at.empty()) {
    ImGui::Spacing();
    ImGui::TextDisabled("Look at: %s", pointed_at(step.point_at).c_str());
    if (std::find(fields.begin(), fields.end(), step.point_at) == fields.end())
      control_field(state, step.point_at);
  }
  if (step.has_task)
    for (int k = 0; k < p.hints_shown && k < int(step.task.hints.size()); ++k)
      ImGui::Text("Hint %d: %s", k + 1, step.task.hints[std::size_t(k)].c_str());
  if (state.errors.count("lesson"))
    ImGui::TextColored(ImVec4(1.0f, 0.38f, 0.38f, 1.0f), "%s", state.errors["lesson"].c_str());
  ImGui::PopTextWrapPos();
  ImGui::EndChild();

  if (step.has_task) {
    const bool done = task_done(step, state.scenario(), state.window());
    const ImVec4 colour = done ? (presenter ? kDoneDark : kDone) : style_colour(Style::bold, presenter);
    ImGui::PushStyleColor(ImGuiCol_Border, colour);
    ImGui::BeginChild("lesson-task", ImVec2(0, task_h), true);
    ImGui::PopStyleColor();
    draw_marked_line((done ? "**Done:** " : "**Task:** ") + step.task.instruction, 0, presenter, &colour);
    for (const std::string& f : fields) control_field(state, f);
    if (p.hints_shown < int(step.task.hints.size())) {
      if (ImGui::Button("Hint")) state.apply(show_lesson_hint());
      ImGui::SameLine();
    }
    ImGui::BeginDisabled(done);
    if (ImGui::Button("Show solution")) solve_lesson_step(state, env);
    ImGui::EndDisabled();
    ImGui::EndChild();
  }

  ImGui::Separator();
  ImGui::BeginDisabled(p.step == 0);
  if (ImGui::Button("< Back")) previous_lesson_step(state, env);
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::BeginDisabled(p.step + 1 >= n);
  if (ImGui::Button("Next >")) next_lesson_step(state, env);
  ImGui::EndDisabled();
  ImGui::SameLine();
  if (ImGui::Button("Close")) state.apply(close_lesson());
}

void lessons_menu(AppState& state, UiEnv& env) {
  if (!ImGui::BeginMenu("Lessons")) return;
  // Titles and step counts, read once a file: the menu is drawn every frame it is open.
  static std::map<std::string, std::string> labels;
  const LessonPlace& p = state.window().lesson;
  for (const std::string& file : lesson_files(env)) {
    auto it = labels.find(file);
    if (it == labels.end()) {
      std::string label;
      try {
        const Lesson l = read_lesson(env, file);
        label = l.title + " (" + std::to_string(l.steps.size()) + " steps)";
      } catch (const LessonError& e) {
        label = std::filesystem::path(file).stem().string() + " (cannot open: see the status line)";
      }
      it = labels.emplace(file, label).first;
    }
    const std::string name = std::filesystem::path(file).stem().string();
    if (ImGui::MenuItem(it->second.c_str(), nullptr, p.lesson && p.lesson->name == name))
      start_lesson(state, env, file);
  }
  ImGui::Separator();
  if (ImGui::MenuItem("Next step", "Ctrl+Right", false, p.lesson && p.step + 1 < int(p.lesson->steps.size())))
    next_lesson_step(state, env);
  if (ImGui::MenuItem("Previous step", "Ctrl+Left", false, p.lesson && p.step > 0))
    previous_lesson_step(state, env);
  if (ImGui::MenuItem("Close lesson", nullptr, false, bool(p.lesson))) state.apply(close_lesson());
  ImGui::EndMenu();
}

}  // namespace mha::app
