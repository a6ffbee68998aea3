// Hostile input and faults, one case per class of docs/reliability.md: bounded readers, safe writes,
// range checks on load. The CLI's side is tests/cli_hostile_test.cmake; the app's, the [autosave]
// cases of the UI tests.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "autosave.hpp"
#include "errors.hpp"
#include "io/file_io.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "limits.hpp"
#include "scenario.hpp"
#include "temp_dir.hpp"

using namespace mha;
using Catch::Matchers::Contains;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string text_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// The names in `dir` that are temp files or staging folders of write_file_atomic/write_folder_atomic.
std::vector<std::string> temps_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (is_temp_name(e.path().filename().string())) out.push_back(e.path().filename().string());
  return out;
}

// The pid of a process that has exited and been reaped: no process runs under it (until reused).
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

}  // namespace

TEST_CASE("bounded readers: a file whose size disagrees with its header is refused unread", "[hostile]") {
  TempDir dir;
  const std::string path = dir.file("big.npy");
  Array a;
  a.dtype = DType::f32;
  a.shape = {1, 4, 8};
  a.data.assign(128, 0);
  write_npy(path, a);
  // A sparse 3 GB file whose header still says (1, 4, 8): the header and fstat disagree, so nothing
  // past the header may be read (reading it would take gigabytes of memory).
  REQUIRE(::truncate(path.c_str(), 3'000'000'000) == 0);
  const long rss_before = peak_rss_kib();
  CHECK_THROWS_WITH(read_npy(path), Contains(path) && Contains("needs 128 data bytes") &&
                                        Contains("unexpected bytes after the array"));
  CHECK(peak_rss_kib() - rss_before < 64 * 1024);  // KiB: far less than the file

  // A whole-file read with a cap refuses from the size alone.
  CHECK_THROWS_WITH(read_file_bytes(path, 1 << 20),
                    Contains("3000000000 bytes") && Contains("nothing was read"));

  // An NPY header may not ask for more than 64 KiB, whatever the file's size.
  const std::string huge = dir.file("huge_header.npy");
  {
    std::ofstream f(huge, std::ios::binary);
    const unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0x00, 0x00, 0x10, 0x00};  // 1 MiB
    f.write(reinterpret_cast<const char*>(pre), sizeof pre);
  }
  REQUIRE(::truncate(huge.c_str(), 12 + (1 << 20)) == 0);
  CHECK_THROWS_WITH(read_npy(huge), Contains("header length 1048576 exceeds the limit"));

  // Not regular files: refused at once, never read.
  CHECK_THROWS_WITH(read_npy("/dev/zero"), Contains("not a regular file"));
  CHECK_THROWS_WITH(read_file_bytes(dir.path.string()), Contains("Is a directory"));
  const std::string fifo = dir.file("fifo.npy");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_npy(fifo), Contains("not a regular file"));

  // safetensors: a name twice, or two tensors sharing bytes, refused.
  const std::string twice = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  const std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  for (const auto& [header, why] : {std::pair{twice, "appears twice"}, std::pair{overlap, "overlap"}}) {
    std::vector<unsigned char> bytes(8 + header.size() + 8, 0);
    for (int i = 0; i < 8; ++i) bytes[std::size_t(i)] = static_cast<unsigned char>(header.size() >> (8 * i));
    std::copy(header.begin(), header.end(), bytes.begin() + 8);
    const std::string st = dir.file("bad.safetensors");
    write_file_atomic(st, bytes);
    CHECK_THROWS_WITH(SafetensorsFile(st), Contains(why));
  }
}

TEST_CASE("safe writes: unique temp names, no link followed, the old file kept on failure", "[hostile]") {
  TempDir dir;
  const std::string path = dir.file("a.json");
  write_file_atomic(path, {'o', 'l', 'd'});

  // A link planted where the old fixed temp name was (and every file written through it) is left
  // alone: the temp file is a new file of its own.
  const std::string victim = dir.file("victim");
  write_text(victim, "precious");
  fs::create_symlink(victim, path + ".tmp");
  write_file_atomic(path, {'n', 'e', 'w'});
  CHECK(text_of(path) == "new");
  CHECK(text_of(victim) == "precious");
  CHECK(temps_in(dir.path).empty());

  // Two writers at once never share a temp file: every write succeeds and the file is one of theirs.
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (char c : {'x', 'y'})
    writers.emplace_back([&, c] {
      for (int i = 0; i < 100; ++i) try {
          write_file_atomic(path, std::vector<unsigned char>(4096, static_cast<unsigned char>(c)));
        } catch (const FileError&) {
          ++failures;
        }
    });
  for (auto& t : writers) t.join();
  CHECK(failures == 0);
  const std::string last = text_of(path);
  CHECK((last == std::string(4096, 'x') || last == std::string(4096, 'y')));

  // A write that fails part-way (a file-size limit: EFBIG, as a full disk gives ENOSPC, whoever
  // runs the test) leaves the old file byte for byte and no temp file.
  rlimit old_limit{};
  getrlimit(RLIMIT_FSIZE, &old_limit);
  rlimit small = old_limit;
  small.rlim_cur = 1000;
  auto* old_handler = signal(SIGXFSZ, SIG_IGN);
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string message;
  try {
    write_file_atomic(path, std::vector<unsigned char>(8192, 'z'));
  } catch (const FileError& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  signal(SIGXFSZ, old_handler);
  CHECK_THAT(message, Contains(path) && Contains("File too large"));
  CHECK(text_of(path) == last);
  CHECK(temps_in(dir.path).empty());
}

TEST_CASE("safe writes: a folder is replaced whole, or left as it was", "[hostile]") {
  TempDir dir;
  const std::string out = dir.file("run");
  const auto fill = [](const char* text) {
    return [text](const std::string& staging) {
      write_file_atomic(staging + "/trace.json", {'{', '}'});
      write_file_atomic(staging + "/output.npy", std::vector<unsigned char>(text, text + std::strlen(text)));
    };
  };
  write_folder_atomic(out, {"trace.json"}, fill("first"));
  write_text(out + "/stray.txt", "from the first run");
  // A failure half-way: the first run's folder is untouched and no staging folder is left.
  CHECK_THROWS_WITH(write_folder_atomic(out, {"trace.json"},
                                        [](const std::string& staging) {
                                          write_file_atomic(staging + "/output.npy", {'h', 'a', 'l', 'f'});
                                          throw FileError("x", "disk full");
                                        }),
                    Contains("disk full"));
  CHECK(text_of(out + "/output.npy") == "first");
  CHECK(fs::exists(out + "/stray.txt"));
  CHECK(temps_in(dir.path).empty());
  // Success: the folder is the new one, whole (nothing of the old one stays).
  write_folder_atomic(out + "/", {"trace.json"}, fill("second"));
  CHECK(text_of(out + "/output.npy") == "second");
  CHECK_FALSE(fs::exists(out + "/stray.txt"));
  CHECK(temps_in(dir.path).empty());
  // A folder of the user's that is not an earlier run is refused, not replaced.
  const std::string mine = dir.file("mine");
  fs::create_directory(mine);
  write_text(mine + "/notes.txt", "keep me");
  CHECK_THROWS_WITH(write_folder_atomic(mine, {"trace.json"}, fill("x")),
                    Contains("not an earlier run's output"));
  CHECK(text_of(mine + "/notes.txt") == "keep me");
}

TEST_CASE("safe writes: stale temps of dead processes are cleaned, a live one's kept", "[hostile]") {
  TempDir dir;
  const std::string dead = dir.file(".autosave.json.mha-" + std::to_string(dead_pid()) + "-0-0badf00d.tmp");
  const std::string live = dir.file(".autosave.json.mha-" + std::to_string(getpid()) + "-0-0badf00d.tmp");
  const std::string dead_dir = dir.file(".run.mha-" + std::to_string(dead_pid()) + "-3-0badf00d.staging");
  write_text(dead, std::string(1000, 'x'));
  write_text(live, "y");
  fs::create_directory(dead_dir);
  write_text(dir.file("autosave.json"), "{}");
  write_text(dir.file("notes.tmp"), "not ours");  // only our own names are touched
  CHECK(clean_stale_temps(dir.path.string()) == 2);
  CHECK_FALSE(fs::exists(dead));
  CHECK_FALSE(fs::exists(dead_dir));
  CHECK(fs::exists(live));
  CHECK(fs::exists(dir.file("autosave.json")));
  CHECK(fs::exists(dir.file("notes.tmp")));
}

TEST_CASE("safe writes: replacing a folder removes a dead run's staging of it, nothing else", "[hostile]") {
  TempDir dir;
  const std::string out = dir.file("run");
  const auto fill = [](const std::string& staging) {
    write_file_atomic(staging + "/trace.json", {'{', '}'});
  };
  write_folder_atomic(out, {"trace.json"}, fill);
  const std::string tag = ".mha-" + std::to_string(dead_pid()) + "-7-0badf00d.staging";
  const std::string dead_own = dir.file(".run" + tag), dead_other = dir.file(".other" + tag);
  const std::string live_own = dir.file(".run.mha-" + std::to_string(getpid()) + "-9-0badf00d.staging");
  for (const std::string& d : {dead_own, dead_other, live_own}) fs::create_directory(d);
  write_folder_atomic(out, {"trace.json"}, fill);
  CHECK_FALSE(fs::exists(dead_own));
  CHECK(fs::exists(dead_other));  // another folder's: its target may be missing, so it may be the only copy
  CHECK(fs::exists(live_own));
  CHECK(fs::exists(out + "/trace.json"));
}

TEST_CASE("safe writes: an output that resolves to an input is refused", "[hostile]") {
  TempDir dir;
  const std::string input = dir.file("query.npy");
  write_text(input, "q");
  fs::create_symlink(input, dir.file("link.npy"));
  CHECK_THROWS_WITH(refuse_output_over_inputs(input, {input}), Contains("--out") && Contains("overwrite"));
  CHECK_THROWS_WITH(refuse_output_over_inputs(dir.file("sub/../query.npy"), {input}), Contains("overwrite"));
  CHECK_THROWS_WITH(refuse_output_over_inputs(dir.file("link.npy"), {input}), Contains("overwrite"));
  // A folder output holding an input would replace it.
  CHECK_THROWS_WITH(refuse_output_over_inputs(dir.path.string() + "/", {input}), Contains("holds"));
  CHECK_NOTHROW(refuse_output_over_inputs(dir.file("out"), {input, "", dir.file("other.json")}));
}

TEST_CASE("range checks on load: view fields clamped, sizes and unknown tensors refused", "[hostile]") {
  TempDir dir;
  const std::string path = dir.file("s.json");
  const auto load_with = [&](const std::string& fields) {
    write_text(path, R"({"format": "mha-studio-scenario", "version": 1, )" + fields + "}");
    return studio::load_scenario(path);
  };
  const studio::Scenario s = load_with(R"("view": {"sel_head": -4, "reshape_step": 99, "mistake": -1})");
  CHECK(s.view.sel_head == 0);
  CHECK(s.view.reshape_step == 5);
  CHECK(s.view.mistake == 0);

  CHECK_THROWS_WITH(load_with(R"("sizes": {"tgt_len": 2097152})"),
                    Contains("sizes.tgt_len 2097152") && Contains("must be from 1 to 1048576"));
  // A tensor under a name the scenario does not hold would be ignored: refused, naming the names.
  CHECK_THROWS_WITH(load_with(R"("tensors": {"in_proj.weight": {"shape": [1], "data": [0]}})"),
                    Contains("tensors.\"in_proj.weight\"") && Contains("in_proj_weight"));
  // A custom mask of another rank would become zeros.
  CHECK_THROWS_WITH(
      load_with(R"("mask": {"preset": "custom", "cells": {"shape": [4], "data": [0, 1, 0, 1]}})"),
      Contains("mask.cells.shape") && Contains("got (4,)"));
  CHECK(limits::out_of_range("--src-len", limits::kSrcLen, "0") ==
        "--src-len 0: src_len (S) must be from 1 to 1048576");
}

TEST_CASE("autosave: one owner, an unreadable copy moved aside, dead instances' temps removed", "[hostile]") {
  TempDir dir;
  const std::string path = dir.file("autosave.json");
  const std::string dead_tmp =
      dir.file(".autosave.json.mha-" + std::to_string(dead_pid()) + "-0-0badf00d.tmp");
  write_text(dead_tmp, std::string(4096, 'x'));  // a kill -9 during an autosave
  write_text(path, R"({"format": "mha-studio-scenario", "version": 1, "name": "mine"})");

  studio::AutosaveSession first = studio::open_autosave(path);
  CHECK(first.path == path);
  REQUIRE(first.restored);
  CHECK(first.restored->name == "mine");
  CHECK_FALSE(fs::exists(dead_tmp));
  // A second instance (another open file description: flock is per open) is told who owns it.
  studio::AutosaveSession second = studio::open_autosave(path);
  CHECK(second.path.empty());
  CHECK_THAT(second.message, Contains("another MHA Studio (pid " + std::to_string(getpid()) + ")") &&
                                 Contains("owns the autosave"));
  first = studio::AutosaveSession{};  // the first one quits: the lock is free again
  studio::AutosaveSession third = studio::open_autosave(path);
  CHECK(third.path == path);
  third = studio::AutosaveSession{};

  // Corrupt (cut short) or from a newer version: moved aside under a timestamped name, byte for
  // byte, before anything could write over it; the message says where.
  for (const std::string& text : {std::string(R"({"format": "mha-studio-scenario", "vers)"),
                                  std::string(R"({"format": "mha-studio-scenario", "version": 99})")}) {
    write_text(path, text);
    studio::AutosaveSession s = studio::open_autosave(path);
    CHECK(s.path == path);
    CHECK_FALSE(s.restored);
    REQUIRE_FALSE(s.set_aside.empty());
    CHECK_THAT(s.set_aside, Contains(path + ".unreadable-"));
    CHECK(text_of(s.set_aside) == text);
    CHECK_FALSE(fs::exists(path));
    CHECK_THAT(s.message, Contains("could not be read") && Contains("moved to " + s.set_aside));
  }
}
