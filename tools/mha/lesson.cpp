// `mha lesson-list`: the shipped lessons (assets/lessons), each checked as the app reads it but for
// its script lines' actions, which only the app's script runner knows.
// `mha lesson-export`: a lesson as a PDF handout or a folder of Markdown and PNG figures.
#include <cstdio>
#include <filesystem>

#include "commands.hpp"
#include "data_dir.hpp"
#include "errors.hpp"
#include "io/file_io.hpp"
#include "lesson.hpp"
#include "lesson_handout.hpp"
#include "progress.hpp"

namespace mha::cli {

std::function<int()> add_lesson_list(CLI::App& app) {
  auto* cmd = app.add_subcommand("lesson-list", "List the lessons: name, title, number of steps");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("--dir", *dir, "A folder of lesson files (default: the shipped assets/lessons)");
  return [dir]() {
    std::string folder = *dir;
    if (folder.empty()) {
      const std::string assets = platform::assets_dir();
      if (assets.empty()) throw FileError("--dir", "no assets folder next to the program; give --dir");
      folder = assets + "/lessons";
    }
    if (!std::filesystem::is_directory(folder)) throw FileError("--dir", folder + ": not a folder");
    int bad = 0;
    for (const std::string& file : studio::list_lessons(folder)) {
      try {
        const studio::Lesson l = studio::load_lesson(file);
        // Columns padded by characters, not bytes: a title may hold "√".
        std::string title = l.title;
        std::size_t chars = 0;
        for (unsigned char c : title) chars += (c & 0xC0) != 0x80;
        title.append(chars < 36 ? 36 - chars : 1, ' ');
        std::printf("%-24s %s %zu steps\n", l.name.c_str(), title.c_str(), l.steps.size());
      } catch (const studio::LessonError& e) {
        std::fprintf(stderr, "mha: error: %s\n", e.what());
        ++bad;
      }
    }
    return bad ? 2 : 0;
  };
}

std::function<int()> add_lesson_export(CLI::App& app) {
  struct Args {
    std::string name, out, format, dir, font;
    bool quiet = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "lesson-export",
      "A lesson as a handout: --out FILE.pdf writes an A4 vector PDF (a title page, one page a step with\n"
      "its narration, the figure of what the app shows and its task, the answers last); --out DIR/\n"
      "writes index.md and a PNG a figure, for a website or a course page.");
  cmd->add_option("name", a->name, "The lesson: its file's name without .json (mha lesson-list), or a path")
      ->required();
  cmd->add_option("--out", a->out, "A .pdf file, or a folder (ending in /) for Markdown and PNG")->required();
  cmd->add_option("--format", a->format, "pdf or md; wins over --out's form")
      ->check(CLI::IsMember({"pdf", "md"}));
  cmd->add_option("--dir", a->dir, "The folder of lessons NAME is looked up in (default: the shipped ones)");
  cmd->add_option("--font", a->font, "A TrueType/OpenType font (default: the bundled DejaVu Sans)");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress line");
  return [a]() {
    const std::string assets = platform::assets_dir();
    std::string folder = a->dir;
    if (folder.empty()) {
      if (assets.empty()) throw FileError("--dir", "no assets folder next to the program; give --dir");
      folder = assets + "/lessons";
    }
    const handout::Format format = handout::handout_format(a->out, a->format);  // before any work
    const std::string file = handout::lesson_file(folder, a->name);
    if (a->font.empty()) {
      const platform::FontLookup found = platform::default_font();
      if (!found.note.empty()) std::fprintf(stderr, "mha: %s\n", found.note.c_str());
      a->font = found.path;
    }
    refuse_output_over_inputs(a->out, {file, a->font});
    platform::ProgressLine progress("mha lesson-export", a->quiet);
    const handout::Written w = handout::write_lesson_handout(
        file, assets, format, a->out, a->font,
        [&](int k, int n) { progress.step(k, n, "step " + std::to_string(k + 1)); });
    progress.clear();
    if (format == handout::Format::pdf)
      std::printf("wrote %s (%d pages, %d figures)\n", a->out.c_str(), w.pages, w.figures);
    else
      std::printf("wrote %s: index.md and %d figures\n", a->out.c_str(), w.figures);
    return 0;
  };
}

}  // namespace mha::cli
