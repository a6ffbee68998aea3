// The GUI-free helpers behind the app's file dialogs and the CLI's progress line: helper processes
// run without a shell, the chooser's answers (a path, cancel, none installed) from a stand-in
// zenity, and the progress bar's text.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "file_chooser.hpp"
#include "progress.hpp"
#include "subprocess.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace mha::platform;

namespace {

// A stand-in helper: prints its arguments (one a line) to a log, then `body`.
void write_tool(const fs::path& dir, const std::string& name, const std::string& body) {
  const fs::path p = dir / name;
  std::ofstream(p) << "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > \""
                   << (dir / (name + ".args")).string() << "\"\n"
                   << body << "\n";
  ::chmod(p.c_str(), 0755);
}

struct PathOverride {  // PATH and MHA_CHOOSER for one test, restored after
  std::string old_path;
  explicit PathOverride(const fs::path& dir) : old_path(std::getenv("PATH") ? std::getenv("PATH") : "") {
    ::setenv("PATH", (dir.string() + ":/usr/bin:/bin").c_str(), 1);
    ::unsetenv("MHA_CHOOSER");
  }
  ~PathOverride() { ::setenv("PATH", old_path.c_str(), 1); }
};

}  // namespace

TEST_CASE("a helper runs without a shell: argv as given, stdin fed, stdout read back", "[platform]") {
  const ProcessResult r = run_process({"cat"}, {std::string("a b; $(rm -rf /)\n"), true, {}, nullptr});
  REQUIRE(r.started);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "a b; $(rm -rf /)\n");
  const ProcessResult echo = run_process({"printf", "%s|", "one arg with spaces", "$HOME"});
  CHECK(echo.out == "one arg with spaces|$HOME|");
  const ProcessResult missing = run_process({"mha-no-such-program"});
  CHECK_FALSE(missing.started);
  CHECK(missing.error == "mha-no-such-program is not installed");
  // A helper that quits without reading its input: no SIGPIPE for us, its status comes back.
  const ProcessResult quits = run_process({"false"}, {std::string(1 << 20, 'x'), false, {}, nullptr});
  CHECK(quits.exit_code == 1);
  const ProcessResult env =
      run_process({"sh", "-c", "echo $MHA_TEST_VAR"}, {"", true, {"MHA_TEST_VAR=set"}, nullptr});
  CHECK(env.out == "set\n");
}

TEST_CASE("the file chooser: a chosen path, a cancel, and none installed", "[platform]") {
  mha::test::TempDir tmp("mha_chooser_");
  const fs::path bin = tmp.path / "bin";
  fs::create_directories(bin);
  PathOverride path(bin);
  ChooserRequest open;
  open.title = "Open a scenario";
  open.filters = {{"Scenarios", {"*.json"}}};

  CHECK(chooser_tool().empty());
  ChooserResult none = run_chooser(open);
  CHECK(none.status == ChooserResult::Status::unavailable);
  CHECK(none.message.find("zenity") != std::string::npos);

  write_tool(bin, "zenity",
             "echo \"$GTK_USE_PORTAL\" > \"$(dirname \"$0\")/portal\"; echo '/home/u/my file.json'");
  CHECK(chooser_tool() == "zenity");
  ChooserResult chosen = run_chooser(open);
  CHECK(chosen.status == ChooserResult::Status::chosen);
  CHECK(chosen.path == "/home/u/my file.json");
  std::ifstream args(bin / "zenity.args");
  std::string all((std::istreambuf_iterator<char>(args)), std::istreambuf_iterator<char>());
  CHECK(all ==
        "--file-selection\n--title=Open a scenario\n--file-filter=Scenarios | *.json\n--file-filter=All "
        "files | *\n");
  std::ifstream portal(bin / "portal");
  std::string portal_flag;
  portal >> portal_flag;
  CHECK(portal_flag == "1");  // GTK asks the desktop portal where one runs

  write_tool(bin, "zenity", "exit 1");
  CHECK(run_chooser(open).status == ChooserResult::Status::cancelled);
  write_tool(bin, "zenity", "exit 5");
  const ChooserResult failed = run_chooser(open);
  CHECK(failed.status == ChooserResult::Status::failed);
  CHECK(failed.message == "zenity exited with status 5");

  // The asynchronous chooser: busy until its answer is polled, which comes once.
  write_tool(bin, "zenity", "sleep 0.2; echo /tmp/x.json");
  FileChooser fc;
  REQUIRE(fc.start(open, "open"));
  CHECK_FALSE(fc.start(open, "again"));
  std::optional<std::pair<std::string, ChooserResult>> got;
  for (int i = 0; i < 500 && !got; ++i) {
    got = fc.poll();
    if (!got) ::usleep(10000);
  }
  REQUIRE(got);
  CHECK(got->first == "open");
  CHECK(got->second.path == "/tmp/x.json");
  CHECK_FALSE(fc.busy());
  CHECK_FALSE(fc.poll());
}

TEST_CASE("the chooser's argv for saving and for folders, zenity and kdialog", "[platform]") {
  ChooserRequest save;
  save.kind = ChooserRequest::Kind::save_file;
  save.title = "Save";
  save.start = "scenario.json";
  CHECK(chooser_argv("zenity", save) == std::vector<std::string>{"zenity", "--file-selection", "--title=Save",
                                                                 "--save", "--confirm-overwrite",
                                                                 "--filename=scenario.json"});
  CHECK(chooser_argv("kdialog", save) ==
        std::vector<std::string>{"kdialog", "--title", "Save", "--getsavefilename", "scenario.json"});
  ChooserRequest folder;
  folder.kind = ChooserRequest::Kind::open_folder;
  folder.title = "Model";
  CHECK(chooser_argv("kdialog", folder) ==
        std::vector<std::string>{"kdialog", "--title", "Model", "--getexistingdirectory", "."});
}

TEST_CASE("the progress line: a bar, a percentage, the count; nothing when stderr is no terminal",
          "[platform]") {
  CHECK(ProgressLine::bar_text("mha export", 0.5, "3/6", "x.png", 10) ==
        "mha export [#####.....]  50% 3/6 x.png");
  CHECK(ProgressLine::bar_text("l", 2.0, "", "", 4) == "l [####] 100%");
  CHECK(ProgressLine::bar_text("l", -1.0, "", "", 4) == "l [....]   0%");
  // Under ctest stderr is a pipe or a file: the line stays quiet, and --quiet always is.
  ProgressLine quiet("q", true);
  CHECK_FALSE(quiet.shown());
  if (!stderr_is_terminal()) CHECK_FALSE(ProgressLine("p", false).shown());
}
