// A lesson as a handout to print or put online: every step's narration, the figure of what the app
// shows at that step, its task, and the answers. The lesson is walked on a state of its own (the
// lesson's setup, then each step's, as the app runs them), so the figures are the views' own
// figures (export/: the one renderer) of the state each step sets up. Written as an A4 PDF or as a
// folder of Markdown and PNG figures. `mha lesson-export` and the app's File > Export lesson... both
// call write_lesson_handout.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "document_export.hpp"
#include "heatmap_export.hpp"
#include "lesson.hpp"
#include "mha.hpp"
#include "stage_export.hpp"

namespace mha::handout {

enum class Format { pdf, markdown };

// The format: `format` when given ("pdf" or "md"), else from `out`: a folder (an existing one, or a
// path ending in '/') is Markdown, a name ending .pdf is PDF. ConfigError naming --format or --out
// for anything else.
Format handout_format(const std::string& out, const std::string& format);

// The lesson file for a name (`dir`/NAME.json) or a path to a .json; LessonError listing the lessons
// in `dir` when there is no such lesson.
std::string lesson_file(const std::string& dir, const std::string& name_or_path);

// What the app shows at one step, drawn: a heatmap figure (pointing into `forward`) or a drawing.
struct StepFigure {
  std::string caption;                                  // "The Heads view: attn_weights, every head"
  std::shared_ptr<const ForwardResult<float>> forward;  // keeps the stage figure's values alive
  std::unique_ptr<exporter::StageFigure> stage;
  std::unique_ptr<exporter::Drawing> drawing;
};

struct Handout {
  studio::Lesson lesson;
  std::vector<std::vector<StepFigure>> figures;  // per step; a step with no setup of its own has none
};

// Walks `lesson` on a fresh state: its setup, then each step's setup, waiting for each forward, and
// draws the step's view. `assets_dir` resolves the lines' relative `open` paths; `font_path` is the
// figures' font. `progress(k, n)` is called before step k of n. Throws LessonError naming the file,
// the step and the line when a line cannot be applied, or the error of a figure.
Handout walk_lesson(const studio::Lesson& lesson, const std::string& assets_dir, const std::string& font_path,
                    const std::function<void(int, int)>& progress = nullptr);

struct Written {
  int pages = 0;                   // PDF
  int figures = 0;                 // figures drawn
  std::vector<std::string> files;  // Markdown: the folder's files, index.md first
};

// The PDF's pages: a title page, one page a step, and the answers on the last page (when the lesson
// has a task). Each page the document renderer lays out, in order.
exporter::Document handout_document(const Handout& h, const std::string& font_path);
// index.md: the same text in Markdown, each figure as ![caption](step_NN.png).
std::string handout_markdown(const Handout& h);

// Writes the handout: the PDF atomically (an old file stays whole on failure), or the folder as one
// (write_folder_atomic: a folder holding index.md is replaced, any other non-empty folder refused).
// FileError naming the path and the reason (unwritable, disk full) on failure.
Written write_handout(const Handout& h, Format format, const std::string& out, const std::string& font_path);

// walk_lesson then write_handout: what the CLI and the app call.
Written write_lesson_handout(const std::string& lesson_path, const std::string& assets_dir, Format format,
                             const std::string& out, const std::string& font_path,
                             const std::function<void(int, int)>& progress = nullptr);

}  // namespace mha::handout
