// The Lesson panel: the open lesson's step beside the view (narration, what to look at, the task
// with its hints and solution, Back / Next), and the Lessons menu that opens one.
#include <imgui.h>
#include <imgui_internal.h>  // the tab bar's scrolling rectangle: a tab scrolled under its arrows

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

// `text` cut short at a word with "…" to fit `width` pixels; whole when it fits.
std::string fit_text(const std::string& text, float width) {
  if (ImGui::CalcTextSize(text.c_str()).x <= width) return text;
  const std::string ellipsis = "\xE2\x80\xA6";
  std::string cut = text;
  while (!cut.empty()) {
    const std::size_t space = cut.find_last_of(' ');
    cut.resize(space == std::string::npos ? 0 : space);
    if (ImGui::CalcTextSize((cut + ellipsis).c_str()).x <= width) return cut + ellipsis;
  }
  return ellipsis;
}

// Where the thing a step points at was drawn, frame by frame: each widget that stands for it (a
// view's tab, a control's field, here or in a view) is outlined after it is drawn and noted here;
// the panel reads the last frame's note, and this frame's so far (its own fields come before).
struct PointerSeen {
  std::string what;  // the step's point_at
  int frame = -1;
  bool drawn = false, shown = false;
};
PointerSeen g_seen_now, g_seen_before;  // this frame's, the frame before's (UI thread only)

void note_pointer(const std::string& what, bool shown) {
  const int frame = ImGui::GetFrameCount();
  if (g_seen_now.frame != frame) {
    g_seen_before = g_seen_now.frame == frame - 1 ? g_seen_now : PointerSeen{};
    g_seen_now = PointerSeen{what, frame, false, false};
  }
  if (g_seen_now.what != what) g_seen_now = PointerSeen{what, frame, false, false};
  g_seen_now.drawn = true;
  g_seen_now.shown = g_seen_now.shown || shown;
}

// Whether `what` was drawn in this frame or the one before, and in sight (shown) in either.
std::pair<bool, bool> pointer_seen(const std::string& what) {
  const int frame = ImGui::GetFrameCount();
  bool drawn = false, shown = false;
  for (const PointerSeen* p : {&g_seen_now, &g_seen_before})
    if (p->what == what && p->frame >= frame - 1 && p->frame <= frame) {
      drawn = drawn || p->drawn;
      shown = shown || p->shown;
    }
  return {drawn, shown};
}

// The outline around the part of the last item on screen (its window's visible region, and a tab
// bar's scrolling region for a tab); returns whether most of the item is in sight. A field
// scrolled out of its panel, or a tab scrolled under the tab bar's arrows, is not outlined where it
// would be: there is nothing there to see.
bool outline_visible_part() {
  ImRect item(ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
  ImDrawList* window_list = ImGui::GetWindowDrawList();
  ImRect clip(window_list->GetClipRectMin(), window_list->GetClipRectMax());
  if (const ImGuiTabBar* bar = GImGui->CurrentTabBar;
      bar && item.Min.y >= bar->BarRect.Min.y - 1 && item.Max.y <= bar->BarRect.Max.y + 1)
    clip.ClipWith(
        ImRect(bar->ScrollingRectMinX, bar->BarRect.Min.y, bar->ScrollingRectMaxX, bar->BarRect.Max.y));
  ImRect seen = item;
  seen.ClipWithFull(clip);
  const float area = std::max(1.0f, item.GetWidth() * item.GetHeight());
  const bool shown =
      seen.GetWidth() > 0 && seen.GetHeight() > 0 && seen.GetWidth() * seen.GetHeight() >= 0.5f * area;
  if (seen.GetWidth() <= 0 || seen.GetHeight() <= 0) return false;
  // Pulses once a second between the accent colour and half of it, so the eye finds it on a projector.
  const float t = float(ImGui::GetTime());
  const float pulse = 0.6f + 0.4f * std::sin(t * 6.2831853f);
  const float pad = ImGui::GetStyle().FramePadding.y, thick = std::max(2.0f, ImGui::GetFontSize() / 6);
  ImDrawList* dl = ImGui::GetForegroundDrawList();
  // The outline stands out of the item by `pad`; where the item is cut off, so is its outline.
  const float out = pad + thick;
  dl->PushClipRect(ImVec2(seen.Min.x - (seen.Min.x > item.Min.x ? 0 : out),
                          seen.Min.y - (seen.Min.y > item.Min.y ? 0 : out)),
                   ImVec2(seen.Max.x + (seen.Max.x < item.Max.x ? 0 : out),
                          seen.Max.y + (seen.Max.y < item.Max.y ? 0 : out)));
  dl->AddRect(ImVec2(item.Min.x - pad, item.Min.y - pad), ImVec2(item.Max.x + pad, item.Max.y + pad),
              ImGui::GetColorU32(ImVec4(1.0f, 0.55f, 0.0f, pulse)), pad, 0, thick);
  dl->PopClipRect();
  return shown;
}

// What a step points at, in words: a view's name or a control's label.
std::string pointed_at(const std::string& what) {
  if (const ViewInfo* v = find_view(what)) return std::string("the ") + v->name + " view";
  for (const ControlInfo& c : controls())
    if (what == c.id) return std::string("\"") + c.label + "\"";
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
  lesson_mark_item(state, id);
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

void lesson_mark_item(const AppState& state, const std::string& what) {
  if (!lesson_points_at(state, what)) return;
  const LessonPlace& p = state.window().lesson;
  note_pointer(p.lesson->steps[std::size_t(p.step)].point_at, outline_visible_part());
}

std::pair<bool, bool> lesson_pointer_seen(const AppState& state) {
  const LessonPlace& p = state.window().lesson;
  if (!p.lesson || p.step < 0 || p.step >= int(p.lesson->steps.size())) return {false, false};
  const std::string& at = p.lesson->steps[std::size_t(p.step)].point_at;
  return at.empty() ? std::pair<bool, bool>{false, false} : pointer_seen(at);
}

void draw_lesson_panel(AppState& state, UiEnv& env) {
  const LessonPlace& p = state.window().lesson;
  if (!p.lesson) return;
  const Lesson& lesson = *p.lesson;
  const int n = int(lesson.steps.size());
  const LessonStep& step = lesson.steps[std::size_t(p.step)];
  const bool presenter = state.window().presenter;
  ImGui::PushTextWrapPos(0.0f);
  {  // One line: the lesson's title cut short where it must (whole on hover), the step whole.
    const std::string place = ": step " + std::to_string(p.step + 1) + " of " + std::to_string(n);
    const float room = ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize(place.c_str()).x;
    const std::string title = fit_text(lesson.title, room);
    ImGui::TextDisabled("%s%s", title.c_str(), place.c_str());
    if (title != lesson.title && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", lesson.title.c_str());
  }
  ImGui::PushStyleColor(ImGuiCol_Text, style_colour(Style::bold, presenter));
  ImGui::TextUnformatted(step.title.c_str());
  ImGui::PopStyleColor();
  ImGui::PopTextWrapPos();
  ImGui::Separator();

  std::vector<std::string> fields;  // the task's controls, editable with it, each once
  if (step.has_task)
    for (const LessonCondition& c : step.task.check)
      if (std::find(fields.begin(), fields.end(), c.what) == fields.end()) fields.push_back(c.what);
  bool point_is_control = false;
  for (const ControlInfo& c : controls()) point_is_control = point_is_control || step.point_at == c.id;
  const bool point_in_task = std::find(fields.begin(), fields.end(), step.point_at) != fields.end();

  // The narration scrolls; under it, always in sight, what to look at (a control's field with it),
  // the task with its fields and buttons, and Back / Next. Their heights are the last frame's, as
  // drawn: the narration takes the rest, and the task box scrolls only where it would leave the
  // narration less than four lines.
  const ImGuiStyle& st = ImGui::GetStyle();
  const float frame = ImGui::GetFrameHeightWithSpacing(), line = ImGui::GetTextLineHeightWithSpacing();
  ImGuiStorage* store = ImGui::GetStateStorage();
  const ImGuiID below_key = ImGui::GetID("##below-h"), task_key = ImGui::GetID("##task-h");
  const float avail_h = ImGui::GetContentRegionAvail().y;
  const float below_h = store->GetFloat(below_key, frame * 2 + st.ItemSpacing.y * 2);
  const float task_content = store->GetFloat(task_key, frame * 4);
  const float narration_min = std::min(line * 4, avail_h * 0.3f);
  const float task_h =
      step.has_task ? std::max(frame * 2, std::min(task_content, avail_h - below_h - narration_min)) : 0;
  ImGui::BeginChild("lesson-text", ImVec2(0, -(below_h + task_h + st.ItemSpacing.y)));
  draw_narration(step.narration, presenter);
  ImGui::EndChild();
  const float below_top = ImGui::GetCursorPosY();

  if (state.errors.count("lesson")) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextColored(ImVec4(1.0f, 0.38f, 0.38f, 1.0f), "%s", state.errors["lesson"].c_str());
    ImGui::PopTextWrapPos();
  }

  if (!step.point_at.empty()) {
    // A control not in the task: its field on this line. Out of sight where it is drawn (a tab
    // scrolled away, the task box scrolled): said here.
    if (point_is_control && !point_in_task) {
      ImGui::AlignTextToFramePadding();
      ImGui::TextDisabled("Look at:");
      ImGui::SameLine();
      control_field(state, step.point_at);
    } else if (const auto [drawn, shown] = pointer_seen(step.point_at); !point_in_task || (drawn && !shown)) {
      // A field of the task is outlined there: named here only when the task box hides it.
      const std::string where = point_in_task ? " in the task" : "";
      const std::string sight = drawn && !shown ? ", out of sight: scroll to it" : "";
      ImGui::PushTextWrapPos(0.0f);
      ImGui::TextDisabled("Look at: %s%s%s", pointed_at(step.point_at).c_str(), where.c_str(), sight.c_str());
      ImGui::PopTextWrapPos();
    }
  }
  const float task_top = ImGui::GetCursorPosY();
  if (step.has_task) {
    const bool done = task_done(step, state.scenario(), state.window());
    const ImVec4 colour = done ? (presenter ? kDoneDark : kDone) : style_colour(Style::bold, presenter);
    ImGui::PushStyleColor(ImGuiCol_Border, colour);
    ImGui::BeginChild("lesson-task", ImVec2(0, task_h), true);
    ImGui::PopStyleColor();
    draw_marked_line((done ? "**Done:** " : "**Task:** ") + step.task.instruction, 0, presenter, &colour);
    for (int k = 0; k < p.hints_shown && k < int(step.task.hints.size()); ++k)
      draw_marked_line("Hint " + std::to_string(k + 1) + ": " + step.task.hints[std::size_t(k)], 0,
                       presenter);
    for (const std::string& f : fields) control_field(state, f);
    if (p.hints_shown < int(step.task.hints.size())) {
      if (ImGui::Button("Hint")) state.apply(show_lesson_hint());
      ImGui::SameLine();
    }
    ImGui::BeginDisabled(done);
    if (ImGui::Button("Show solution")) solve_lesson_step(state, env);
    ImGui::EndDisabled();
    // The box's height next frame: all it holds, its padding and border included.
    store->SetFloat(task_key,
                    ImGui::GetCursorPosY() - st.ItemSpacing.y + st.WindowPadding.y + st.ChildBorderSize);
    ImGui::EndChild();
  }
  const float task_end = ImGui::GetCursorPosY();

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
  // What is under the narration, the task box aside, as drawn (the last line's spacing left out).
  store->SetFloat(below_key, ImGui::GetCursorPosY() - st.ItemSpacing.y - below_top - (task_end - task_top) +
                                 (step.has_task ? st.ItemSpacing.y : 0));
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
