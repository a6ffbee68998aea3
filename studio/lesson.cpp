#include "lesson.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "actions.hpp"
#include "scenario.hpp"
#include "views.hpp"
#include "window.hpp"

namespace mha::studio {

namespace fs = std::filesystem;

namespace {

// The state a check may read besides the controls (controls()).
const char* const kExtraConditions[] = {"tab", "mask_preset", "key_padding", "d_k"};

bool is_condition(const std::string& what) {
  for (const char* c : kExtraConditions)
    if (what == c) return true;
  for (const ControlInfo& c : controls())
    if (what == c.id) return true;
  return false;
}

std::string condition_names() {
  std::string out;
  for (const char* c : kExtraConditions) out += std::string(out.empty() ? "" : ", ") + c;
  for (const ControlInfo& c : controls()) out += std::string(", ") + c.id;
  return out;
}

// Reads one lesson file, each refusal naming where it is.
class Reader {
 public:
  Reader(std::string path, LessonLineCheck check) : path_(std::move(path)), check_(std::move(check)) {}

  [[noreturn]] void refuse(const std::string& rule) const {
    throw LessonError(path_, path_ + ": " + (step_ > 0 ? "step " + std::to_string(step_) + ": " : "") + rule);
  }

  std::string text(const nlohmann::json& j, const char* key, bool required) const {
    if (!j.contains(key)) {
      if (required) refuse(std::string("\"") + key + "\" is missing");
      return "";
    }
    const nlohmann::json& v = j.at(key);
    if (v.is_string()) return v.get<std::string>();
    // Narration may be a list of lines: JSON has no multi-line strings.
    if (v.is_array() &&
        std::all_of(v.begin(), v.end(), [](const nlohmann::json& x) { return x.is_string(); })) {
      std::string out;
      for (const nlohmann::json& x : v) out += (out.empty() ? "" : "\n") + x.get<std::string>();
      return out;
    }
    refuse(std::string("\"") + key + "\" must be a string (or a list of lines)");
  }

  std::vector<std::vector<std::string>> lines(const nlohmann::json& j, const char* key) const {
    std::vector<std::vector<std::string>> out;
    if (!j.contains(key)) return out;
    const nlohmann::json& v = j.at(key);
    if (!v.is_array()) refuse(std::string("\"") + key + "\" must be a list of script lines");
    for (const nlohmann::json& line : v) {
      if (!line.is_string()) refuse(std::string("\"") + key + "\": every script line must be a string");
      const std::string l = line.get<std::string>();
      std::vector<std::string> words;
      try {
        words = action_words(l);
      } catch (const ActionError& e) {
        refuse(std::string(key) + " \"" + l + "\": " + e.what());
      }
      if (words.empty()) continue;
      if (check_)
        if (const std::string why = check_(words); !why.empty())
          refuse(std::string(key) + " \"" + l + "\": " + why);
      out.push_back(std::move(words));
    }
    return out;
  }

  Lesson read(const std::string& json_text) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::parse_error& e) {
      refuse(std::string("not JSON: ") + e.what());
    }
    if (!j.is_object()) refuse("a lesson is a JSON object with \"title\" and \"steps\"");
    Lesson l;
    l.name = fs::path(path_).stem().string();
    l.title = text(j, "title", true);
    l.summary = text(j, "summary", false);
    for (const auto& [key, value] : j.items())
      if (key != "title" && key != "summary" && key != "setup" && key != "steps")
        refuse("unknown field \"" + key + "\"; a lesson has title, summary, setup, steps");
    l.setup = lines(j, "setup");
    if (!j.contains("steps") || !j["steps"].is_array() || j["steps"].empty())
      refuse("\"steps\" must be a non-empty list");
    for (const nlohmann::json& s : j["steps"]) {
      ++step_;
      if (!s.is_object()) refuse("a step is an object with \"title\" and \"narration\"");
      for (const auto& [key, value] : s.items())
        if (key != "title" && key != "narration" && key != "setup" && key != "point_at" && key != "task")
          refuse("unknown field \"" + key + "\"; a step has title, narration, setup, point_at, task");
      LessonStep step;
      step.title = text(s, "title", true);
      step.narration = text(s, "narration", true);
      if (step.title.empty()) refuse("\"title\" is empty");
      step.setup = lines(s, "setup");
      step.point_at = text(s, "point_at", false);
      if (!step.point_at.empty() && !is_condition(step.point_at) && !find_view(step.point_at))
        refuse("point_at \"" + step.point_at + "\" is neither a control nor a view; the views are " +
               view_names());
      if (s.contains("task")) {
        const nlohmann::json& t = s["task"];
        if (!t.is_object()) refuse("\"task\" must be an object with instruction, check and solution");
        step.has_task = true;
        step.task.instruction = text(t, "instruction", true);
        if (!t.contains("check") || !t["check"].is_object() || t["check"].empty())
          refuse("task: \"check\" must be a non-empty object such as {\"mask_preset\": \"causal\"}");
        for (const auto& [what, value] : t["check"].items()) {
          if (!is_condition(what))
            refuse("task: check \"" + what + "\" is not something a check reads; it reads " +
                   condition_names());
          if (!value.is_string() && !value.is_number() && !value.is_boolean())
            refuse("task: check \"" + what + "\" must be a string, a number or true/false");
          step.task.check.push_back({what, value.is_string() ? value.get<std::string>() : value.dump()});
        }
        if (t.contains("hints")) {
          if (!t["hints"].is_array()) refuse("task: \"hints\" must be a list of strings");
          for (const nlohmann::json& h : t["hints"]) {
            if (!h.is_string()) refuse("task: every hint must be a string");
            step.task.hints.push_back(h.get<std::string>());
          }
        }
        step.task.solution = lines(t, "solution");
        if (step.task.solution.empty())
          refuse("task: \"solution\" must hold the script lines that do the task");
      }
      l.steps.push_back(std::move(step));
    }
    return l;
  }

 private:
  std::string path_;
  LessonLineCheck check_;
  int step_ = 0;  // the step being read, from 1; 0 outside the steps
};

}  // namespace

std::vector<std::string> action_words(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false, quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '\\' && i + 1 < line.size() && (line[i + 1] == '"' || line[i + 1] == '\\')) {
        word += line[++i];
      } else if (c == '"') {
        quoted = false;
      } else {
        word += c;
      }
    } else if (c == '"') {
      quoted = in_word = true;
    } else if (c == '#') {
      break;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quoted) throw ActionError("a quote is not closed");
  if (in_word) words.push_back(word);
  return words;
}

Lesson parse_lesson(const std::string& json_text, const std::string& path,
                    const LessonLineCheck& line_check) {
  return Reader(path, line_check).read(json_text);
}

Lesson load_lesson(const std::string& path, const LessonLineCheck& line_check) {
  std::ifstream f(path);
  if (!f) throw LessonError(path, path + ": cannot read the lesson");
  std::stringstream text;
  text << f.rdbuf();
  return parse_lesson(text.str(), path, line_check);
}

std::vector<std::string> list_lessons(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string condition_value(const std::string& what, const Scenario& s, const WindowState& w) {
  if (what == "tab") return view_info(w.tab).name;
  if (what == "mask_preset") return to_string(s.mask.preset);
  if (what == "key_padding")
    return std::any_of(s.mask.key_padding.begin(), s.mask.key_padding.end(), [](auto v) { return v != 0; })
               ? "true"
               : "false";
  if (what == "d_k") return s.num_heads > 0 ? std::to_string(s.embed_dim / s.num_heads) : "0";
  return control_value(s, w, what);
}

bool task_done(const LessonStep& step, const Scenario& s, const WindowState& w) {
  if (!step.has_task) return false;
  for (const LessonCondition& c : step.task.check) {
    std::string have = condition_value(c.what, s, w);
    // A view's name in any case and spacing, as `tab` takes it.
    if (c.what == "tab") {
      const ViewInfo* v = find_view(c.value);
      if (!v || have != v->name) return false;
      continue;
    }
    if (have != c.value) return false;
  }
  return true;
}

}  // namespace mha::studio
