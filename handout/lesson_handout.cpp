#include "lesson_handout.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "actions.hpp"
#include "app_state.hpp"
#include "colour_range.hpp"
#include "cost_export.hpp"
#include "document_export.hpp"
#include "errors.hpp"
#include "io/file_io.hpp"
#include "reshape_export.hpp"
#include "rope_export.hpp"
#include "saturation_export.hpp"
#include "scenario.hpp"
#include "views.hpp"

namespace fs = std::filesystem;

namespace mha::handout {

using studio::AppState;
using studio::Lesson;
using studio::LessonError;
using studio::LessonStep;
using studio::ViewTab;

Format handout_format(const std::string& out, const std::string& format) {
  if (format == "pdf") return Format::pdf;
  if (format == "md" || format == "markdown") return Format::markdown;
  if (!format.empty()) throw ConfigError("--format", "--format " + format + ": expected pdf or md");
  if (out.empty()) throw FileError("--out", "--out is empty: give a .pdf file or a folder");
  if (out.back() == '/' || fs::is_directory(out)) return Format::markdown;
  std::string ext = fs::path(out).extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".pdf") return Format::pdf;
  throw ConfigError("--out", "--out " + out +
                                 ": a handout is a .pdf file or a folder (end the name with / for "
                                 "Markdown and PNG figures), or give --format");
}

std::string lesson_file(const std::string& dir, const std::string& name_or_path) {
  const bool path =
      name_or_path.find('/') != std::string::npos || fs::path(name_or_path).extension() == ".json";
  const std::string file = path ? name_or_path : dir + "/" + name_or_path + ".json";
  if (path || fs::exists(file)) return file;
  std::string names;
  for (const std::string& f : studio::list_lessons(dir))
    names += (names.empty() ? "" : ", ") + fs::path(f).stem().string();
  throw LessonError(name_or_path, "no lesson \"" + name_or_path + "\"; the lessons are " +
                                      (names.empty() ? "(none)" : names));
}

namespace {

// The result of everything applied so far (the forward runs on the state's worker for large sizes).
void settle(AppState& state, const std::string& where) {
  for (int i = 0; i < 30000 && state.computer.busy(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  state.tick(state.now);
  if (state.computer.busy()) throw LessonError(where, where + ": the forward did not finish in a minute");
  if (state.compute_failed || !state.result.valid()) {
    std::string why = "no result";
    for (const auto& [slot, message] : state.errors) why = slot + ": " + message;
    throw LessonError(where, where + ": the forward failed: " + why);
  }
}

// One script line of a lesson on the state, as the app's script runs it (docs/scripting.md), for the
// actions a lesson may use; a line refused names the lesson, the step and the line.
void run_line(AppState& state, const std::vector<std::string>& w, const std::string& assets_dir,
              const std::string& where) {
  std::string line;
  for (const std::string& word : w) line += (line.empty() ? "" : " ") + word;
  auto refuse = [&](const std::string& why) {
    throw LessonError(where, where + ": \"" + line + "\": " + why);
  };
  auto applied = [&](const studio::Action& a) {
    if (!state.apply(a)) refuse(state.errors.count(a.slot) ? state.errors[a.slot] : "refused");
  };
  try {
    if (w[0] == "open") {
      const fs::path file = fs::path(w[1]).is_relative() ? fs::path(assets_dir) / w[1] : fs::path(w[1]);
      state.load(studio::load_scenario(file.string()), "lesson: open " + w[1]);
    } else if (w[0] == "tab" && w.size() == 2) {
      const studio::ViewInfo* v = studio::find_view(w[1]);
      if (!v) refuse("no tab \"" + w[1] + "\"; the tabs are " + studio::view_names());
      state.apply(studio::show_view(v->id));
    } else if (w[0] == "set" && w.size() == 3) {
      if (w[1] == "backend" || w[1] == "Backend") return;  // this machine's choice, not the lesson's state
      applied(studio::set_control(w[1], w[2]));
    } else if (w[0] == "mask-preset" && w.size() == 2) {
      applied(studio::set_mask_preset(w[1]));
    } else if (w[0] == "mask-paint" && (w.size() == 3 || w.size() == 4)) {
      const int row = std::stoi(w[1]), col = std::stoi(w[2]);
      bool block;
      if (w.size() == 4) {
        if (w[3] != "block" && w[3] != "unblock") refuse("the third word is block or unblock");
        block = w[3] == "block";
      } else {  // a click: the cell pressed decides, as in the mask editor
        const studio::Scenario& s = state.scenario();
        const std::size_t k =
            std::size_t(row) * std::size_t(std::max<std::int64_t>(1, s.S())) + std::size_t(col);
        block = !(k < s.mask.cells.size() && std::isinf(s.mask.cells[k]));
      }
      applied(studio::paint_mask_cells({{row, col}}, block));
    } else if (w[0] == "compare" && w.size() == 3) {
      if (w[1] == "previous" && w[2] == "live")
        state.apply(studio::set_compare_mode(studio::CompareMode::before_after));
      else
        state.apply(studio::set_compare_pins(w[1], w[2]));
      state.apply(studio::show_view(ViewTab::compare));
    } else {
      refuse("not an action a lesson may use (open, tab, set, mask-preset, mask-paint, compare)");
    }
  } catch (const LessonError&) {
    throw;
  } catch (const studio::ActionError& e) {
    refuse(e.what());
  } catch (const Error& e) {
    refuse(e.what());
  } catch (const std::logic_error&) {  // std::stoi
    refuse("expected a row and a column number");
  }
}

std::string heads_words(int heads) {
  return heads > 1 ? "every head and their average" : "the one head";
}

// The figure of the view a step leaves on screen; none for a view with no figure to draw. `mistake`:
// the Reshape mistake the step is about (its task may be to choose it), -1: the one shown. `stage`:
// the Heads view's choice the step is about, where it draws a figure of its own (the scores without
// RoPE); empty: the one shown.
std::vector<StepFigure> step_figures(const AppState& state, const std::string& font_path, int mistake,
                                     const std::string& stage_about = "") {
  std::vector<StepFigure> out;
  const studio::ViewState& view = state.view();
  const ViewTab tab = state.window().tab;
  const std::shared_ptr<const ForwardResult<float>> fwd = state.result.forward;
  std::string layer;
  if (state.result.model)
    layer = ", layer " + std::to_string(state.result.model->layer) + " of " + state.result.model->name;
  const std::string item =
      state.scenario().batch > 1 ? ", batch item " + std::to_string(view.batch_index) : "";

  auto stage = [&](const std::string& name, const std::string& caption) {
    exporter::StageSlice slice;
    slice.stage = name;
    slice.batch_index = view.batch_index;
    const int heads = exporter::stage_heads(*fwd, name);
    slice.head = heads > 1 ? exporter::kAllHeads : 0;
    slice.colormap = render::stage_colormap(name, state.window().colormap);
    slice.row_scale = view.weights_row_scale && (name == "attn_weights" || name == "attn_weights_avg");
    slice.query_labels = state.result.query_tokens;
    slice.key_labels = state.result.key_tokens;
    StepFigure f;
    f.forward = fwd;
    f.stage = std::make_unique<exporter::StageFigure>(exporter::stage_figure(*fwd, slice));
    f.stage->spec.font_path = font_path;
    f.caption = caption + ": " + name + ", " + heads_words(heads) + item + layer;
    out.push_back(std::move(f));
  };

  // The Heads view's scores without RoPE (a model with rotary positions): its own figure, the maps
  // before and after the rotation of the selected head and their mean by distance.
  const std::string heads_stage = stage_about.empty() ? view.stage : stage_about;
  if (tab == ViewTab::heads && heads_stage == exporter::kRopeStage && state.result.model &&
      state.result.model->scores_without_rope) {
    exporter::RopeSpec rs;
    rs.head = std::clamp(view.sel_head, 0, int(fwd->dims.H) - 1);
    rs.query_labels = state.result.query_tokens;
    rs.title_prefix = "layer " + std::to_string(state.result.model->layer) + "  ";
    rs.font_path = font_path;
    StepFigure f;
    f.forward = fwd;
    f.drawing = std::make_unique<exporter::Drawing>(
        exporter::rope_figure(*fwd, rs, state.result.model->scores_without_rope.get()).drawing);
    f.caption = "The Heads view's scores of head " + std::to_string(rs.head) +
                " without RoPE and with it, and their mean by distance" + layer;
    out.push_back(std::move(f));
    return out;
  }
  switch (tab) {
    case ViewTab::heads:
    case ViewTab::overview:
    case ViewTab::token_lines:
      // A choice that is no stage of the trace (the scores without RoPE, where the result has none)
      // is drawn as the weights, which every forward holds.
      stage(find_stage(*fwd, view.stage, false) ? view.stage : std::string("attn_weights"),
            std::string("The ") + studio::view_info(tab).name + " view");
      break;
    case ViewTab::pipeline: stage(view.pipeline_stage, "The Pipeline's stage below its graph"); break;
    case ViewTab::mask:
      stage("attn_weights", "The Mask view's effect: the weights, blocked cells hatched");
      break;
    case ViewTab::reshape: {
      exporter::ReshapeSpec rs;
      rs.batch_index = view.batch_index;
      rs.tokens = state.result.query_tokens;
      rs.font_path = font_path;
      rs.vertical = true;  // three steps one above the other: large enough to read on a page
      rs.mistake = mistake >= 0 ? mistake : view.mistake;
      StepFigure f;
      f.forward = fwd;
      f.drawing = std::make_unique<exporter::Drawing>(exporter::reshape_figure(*fwd, rs).drawing);
      static const char* const what[] = {"", ", with mistake 1: the split without transpose",
                                         ", with mistake 2: .view on the transposed context",
                                         ", with mistake 3: no output projection"};
      f.caption = "The Reshape view: q, q.view(N, L, H, d_k), then .transpose(1, 2)" + item +
                  what[std::clamp(rs.mistake, 0, 3)];
      out.push_back(std::move(f));
      break;
    }
    case ViewTab::sqrt_dk: {
      const Dims& d = fwd->dims;
      const SaturationCurves c = exporter::lesson_saturation_curves(int(d.S_total));
      exporter::SaturationSpec ss;
      ss.font_path = font_path;
      ss.mark_d_k = int(d.d_k);
      ss.mark_scaled = state.scenario().what_if.scale_by_sqrt_dk;
      StepFigure f;
      f.forward = fwd;
      f.drawing = std::make_unique<exporter::Drawing>(exporter::saturation_figure(c, ss));
      f.caption =
          "The \xE2\x88\x9A"
          "d_k view: a row's largest weight and its entropy against d_k, random q and k";
      out.push_back(std::move(f));
      break;
    }
    case ViewTab::complexity: {
      exporter::CostSpec cs;
      cs.bias = fwd->config.bias;
      cs.mask = fwd->trace.has("attn_mask");
      cs.font_path = font_path;
      StepFigure f;
      f.forward = fwd;
      f.drawing = std::make_unique<exporter::Drawing>(exporter::cost_figure(fwd->dims, cs));
      f.caption = "The Complexity view's cost of one forward, stage by stage" + layer;
      out.push_back(std::move(f));
      break;
    }
    default: break;  // Compare, Large L, Attention file, Check: no figure of the step's state
  }
  return out;
}

std::string step_where(const Lesson& l, std::size_t k) {
  return l.name + ": step " + std::to_string(k + 1);
}

// "the Heads view", "the control “stage”".
std::string point_at_words(const std::string& id) {
  if (const studio::ViewInfo* v = studio::find_view(id)) return std::string("the ") + v->name + " view";
  for (const studio::ControlInfo& c : studio::controls())
    if (id == c.id) return std::string("the control `") + c.label + "`";
  return "`" + id + "`";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t i = 0;
  while (i <= text.size()) {
    const std::size_t end = std::min(text.find('\n', i), text.size());
    lines.push_back(text.substr(i, end - i));
    i = end + 1;
  }
  return lines;
}

std::string joined_code(const std::vector<std::vector<std::string>>& lines) {
  std::string out;
  for (const std::vector<std::string>& words : lines) {
    std::string l;
    for (const std::string& w : words)
      l += (l.empty() ? "" : " ") + (w.find(' ') != std::string::npos ? "\"" + w + "\"" : w);
    out += (out.empty() ? "`" : ", `") + l + "`";
  }
  return out;
}

std::string done_when(const studio::LessonTask& t) {
  std::string out;
  for (const studio::LessonCondition& c : t.check)
    out += (out.empty() ? "`" : ", `") + c.what + " = " + c.value + "`";
  return out;
}

std::string figure_file(std::size_t step, std::size_t k, std::size_t count) {
  char name[64];
  if (count > 1)
    std::snprintf(name, sizeof name, "step_%02zu_%zu.png", step + 1, k + 1);
  else
    std::snprintf(name, sizeof name, "step_%02zu.png", step + 1);
  return name;
}

int task_count(const Lesson& l) {
  int n = 0;
  for (const LessonStep& s : l.steps) n += s.has_task;
  return n;
}

}  // namespace

Handout walk_lesson(const Lesson& lesson, const std::string& assets_dir, const std::string& font_path,
                    const std::function<void(int, int)>& progress) {
  Handout h;
  h.lesson = lesson;
  AppState state;  // no autosave path: nothing written
  for (const std::vector<std::string>& w : lesson.setup)
    run_line(state, w, assets_dir, lesson.name + ": setup");
  for (std::size_t k = 0; k < lesson.steps.size(); ++k) {
    if (progress) progress(int(k), int(lesson.steps.size()));
    const LessonStep& step = lesson.steps[k];
    for (const std::vector<std::string>& w : step.setup)
      run_line(state, w, assets_dir, step_where(lesson, k));
    // A step that sets up nothing (a closing word) shows nothing new: no figure to print again.
    if (step.setup.empty()) {
      h.figures.emplace_back();
      continue;
    }
    settle(state, step_where(lesson, k));
    // A step whose task is to choose a Reshape mistake, or the scores without RoPE, is about that
    // choice: its figure shows it (the task's other stages are the trace's, drawn as shown).
    int mistake = -1;
    std::string stage;
    if (step.has_task)
      for (const studio::LessonCondition& c : step.task.check) {
        if (c.what == "mistake") mistake = std::atoi(c.value.c_str());
        if (c.what == "stage" && c.value == exporter::kRopeStage) stage = c.value;
      }
    try {
      h.figures.push_back(step_figures(state, font_path, mistake, stage));
    } catch (const Error& e) {
      throw LessonError(lesson.name, step_where(lesson, k) + ": its figure: " + e.what());
    }
  }
  return h;
}

exporter::Document handout_document(const Handout& h, const std::string& font_path) {
  using exporter::DocBlock;
  using exporter::markdown_runs;
  using exporter::TextRun;
  const Lesson& l = h.lesson;
  exporter::Document doc;
  doc.title = l.title;
  doc.font_path = font_path;
  auto add = [&](DocBlock::Kind kind, const std::string& md) {
    DocBlock b;
    b.kind = kind;
    b.runs = markdown_runs(md);
    doc.blocks.push_back(std::move(b));
  };
  auto narration = [&](const std::string& text) {
    for (const std::string& line : lines_of(text)) {
      if (line.find_first_not_of(' ') == std::string::npos) continue;
      if (line.rfind("- ", 0) == 0)
        add(DocBlock::Kind::bullet, line.substr(2));
      else
        add(DocBlock::Kind::paragraph, line);
    }
  };
  const int tasks = task_count(l);
  const std::size_t n = l.steps.size();

  add(DocBlock::Kind::kicker, "MHA Studio lesson");
  add(DocBlock::Kind::title, l.title);
  if (!l.summary.empty()) add(DocBlock::Kind::paragraph, l.summary);
  add(DocBlock::Kind::paragraph, std::to_string(n) + " steps, " + std::to_string(tasks) + " task" +
                                     (tasks == 1 ? "" : "s") +
                                     ". Each page shows a step's narration and what the app shows at that "
                                     "step; the answers are on the last page. To follow it in the app: "
                                     "`mha-studio --lesson " +
                                     l.name + "`, or the **Lessons** menu.");
  for (std::size_t k = 0; k < n; ++k) {
    add(DocBlock::Kind::bullet, l.steps[k].title + (l.steps[k].has_task ? " (**task**)" : ""));
    doc.blocks.back().marker = std::to_string(k + 1) + ".";
  }

  for (std::size_t k = 0; k < n; ++k) {
    const LessonStep& s = l.steps[k];
    add(DocBlock::Kind::page_break, "");
    add(DocBlock::Kind::kicker,
        l.title + "  \xC2\xB7  step " + std::to_string(k + 1) + " of " + std::to_string(n));
    add(DocBlock::Kind::heading, s.title);
    narration(s.narration);
    if (!s.point_at.empty()) add(DocBlock::Kind::paragraph, "**Look at:** " + point_at_words(s.point_at));
    if (s.has_task)
      add(DocBlock::Kind::note, "**Task:** " + s.task.instruction + " (answer on the last page)");
    for (const StepFigure& f : h.figures[k]) {
      DocBlock b;
      b.kind = DocBlock::Kind::figure;
      b.spec = f.stage ? &f.stage->spec : nullptr;
      b.drawing = f.drawing.get();
      b.caption = f.caption;
      doc.blocks.push_back(std::move(b));
    }
  }

  if (tasks) {
    add(DocBlock::Kind::page_break, "");
    add(DocBlock::Kind::kicker, l.title);
    add(DocBlock::Kind::heading, "Answers");
    for (std::size_t k = 0; k < n; ++k) {
      const LessonStep& s = l.steps[k];
      if (!s.has_task) continue;
      add(DocBlock::Kind::paragraph, "**Step " + std::to_string(k + 1) + ": " + s.title + "**");
      add(DocBlock::Kind::paragraph, "**Task:** " + s.task.instruction);
      for (const std::string& hint : s.task.hints) add(DocBlock::Kind::bullet, "Hint: " + hint);
      add(DocBlock::Kind::paragraph,
          "**Solution** (the app's actions, as a script writes them): " + joined_code(s.task.solution));
      add(DocBlock::Kind::paragraph, "**Done when** " + done_when(s.task));
    }
  }
  return doc;
}

std::string handout_markdown(const Handout& h) {
  const Lesson& l = h.lesson;
  const std::size_t n = l.steps.size();
  std::string md = "# " + l.title + "\n\n";
  if (!l.summary.empty()) md += l.summary + "\n\n";
  md += std::to_string(n) + " steps. To follow it in MHA Studio: `mha-studio --lesson " + l.name +
        "`, or the **Lessons** menu. The answers are at the end.\n\n";
  for (std::size_t k = 0; k < n; ++k) {
    const LessonStep& s = l.steps[k];
    md += "## Step " + std::to_string(k + 1) + " of " + std::to_string(n) + ": " + s.title + "\n\n";
    // The narration is Markdown already; a blank line between its lines keeps each a paragraph, and
    // a list stays one list.
    const std::vector<std::string> lines = lines_of(s.narration);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].find_first_not_of(' ') == std::string::npos) continue;
      md += lines[i] + "\n";
      const bool list = lines[i].rfind("- ", 0) == 0;
      const bool next_list = i + 1 < lines.size() && lines[i + 1].rfind("- ", 0) == 0;
      if (!(list && next_list) && !(next_list && !list)) md += "\n";
    }
    if (!s.point_at.empty()) md += "**Look at:** " + point_at_words(s.point_at) + "\n\n";
    for (std::size_t f = 0; f < h.figures[k].size(); ++f)
      md += "![" + h.figures[k][f].caption + "](" + figure_file(k, f, h.figures[k].size()) + ")\n\n";
    if (s.has_task) md += "> **Task:** " + s.task.instruction + "\n\n";
  }
  if (task_count(l)) {
    md += "## Answers\n\n";
    for (std::size_t k = 0; k < n; ++k) {
      const LessonStep& s = l.steps[k];
      if (!s.has_task) continue;
      md += "### Step " + std::to_string(k + 1) + ": " + s.title + "\n\n";
      md += "**Task:** " + s.task.instruction + "\n\n";
      for (const std::string& hint : s.task.hints) md += "- Hint: " + hint + "\n";
      if (!s.task.hints.empty()) md += "\n";
      md += "**Solution** (the app's actions, as a script writes them): " + joined_code(s.task.solution) +
            "\n\n";
      md += "**Done when** " + done_when(s.task) + "\n\n";
    }
  }
  return md;
}

Written write_handout(const Handout& h, Format format, const std::string& out, const std::string& font_path) {
  Written w;
  if (format == Format::pdf) {
    const exporter::RenderedDocument r = exporter::render_document_pdf(handout_document(h, font_path));
    exporter::write_file(out, r.pdf.data(), r.pdf.size());
    w.pages = r.pages;
    for (const std::vector<StepFigure>& figs : h.figures) w.figures += int(figs.size());
    w.files = {out};
    return w;
  }
  const std::string dir = out.size() > 1 && out.back() == '/' ? out.substr(0, out.size() - 1) : out;
  write_folder_atomic(dir, {"index.md"}, [&](const std::string& staging) {
    w.files = {"index.md"};
    for (std::size_t k = 0; k < h.figures.size(); ++k)
      for (std::size_t f = 0; f < h.figures[k].size(); ++f) {
        const StepFigure& fig = h.figures[k][f];
        const std::string name = figure_file(k, f, h.figures[k].size());
        const std::string path = (fs::path(staging) / name).string();
        if (fig.stage)
          exporter::write_figure("png", fig.stage->spec, path);
        else
          exporter::write_figure("png", *fig.drawing, path);
        w.files.push_back(name);
        ++w.figures;
      }
    const std::string md = handout_markdown(h);
    exporter::write_file((fs::path(staging) / "index.md").string(), md.data(), md.size());
  });
  return w;
}

Written write_lesson_handout(const std::string& lesson_path, const std::string& assets_dir, Format format,
                             const std::string& out, const std::string& font_path,
                             const std::function<void(int, int)>& progress) {
  const Lesson lesson = studio::load_lesson(lesson_path);
  return write_handout(walk_lesson(lesson, assets_dir, font_path, progress), format, out, font_path);
}

}  // namespace mha::handout
