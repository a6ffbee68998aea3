// `mha lesson-list`: the shipped lessons (assets/lessons), each checked as the app reads it but for
// its script lines' actions, which only the app's script runner knows.
#include <cstdio>
#include <filesystem>

#include "commands.hpp"
#include "data_dir.hpp"
#include "errors.hpp"
#include "lesson.hpp"

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

}  // namespace mha::cli
