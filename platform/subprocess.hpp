// Helper programs run without a shell: an argv vector, fork and exec, stdin fed from a string, stdout
// read back. The app's file chooser (zenity, kdialog) and its PNG clipboard (wl-copy, xclip) use it.
// Blocking: call it from a thread of its own, never from the UI thread.
#pragma once

#include <atomic>
#include <string>
#include <vector>

namespace mha::platform {

// The program's full path from $PATH ("" when it is not installed). A name with a '/' is taken as is
// when it is executable.
std::string find_program(const std::string& name);

struct ProcessResult {
  bool started = false;    // false: not found or could not fork/exec (error says why)
  int exit_code = -1;      // when it exited
  bool signalled = false;  // killed by a signal instead
  bool timed_out = false;  // still running after ProcessOptions::timeout_s: it was killed
  std::string out, error;  // its stdout (when captured); why it did not start
};

struct ProcessOptions {
  std::string input;                        // written to its stdin, then stdin is closed
  bool capture_stdout = true;               // false: stdout goes to /dev/null (helpers that stay in the
                                            // background, as clipboard owners do, would hold the pipe open)
  std::vector<std::string> env;             // NAME=value entries added to (or replacing) the environment
  std::atomic<int>* running_pid = nullptr;  // set to the helper's pid while it runs (0 after), so that
                                            // another thread can end it (kill) when its answer is no
                                            // longer wanted
  double timeout_s = 0;          // > 0: killed, with whatever it started, when still running after this
  std::string working_dir = {};  // "": ours; else the helper starts in this folder
};

// Runs argv[0] (looked up on $PATH) with argv, waits for it and returns what it printed. stderr
// goes to /dev/null. A broken pipe (the helper quit before reading its input) is no signal here.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

}  // namespace mha::platform
