// See subprocess.hpp. Everything the child needs (argv, envp, the program's path) is built before
// fork: between fork and exec a multi-threaded parent's child may only make async-signal-safe calls.
#include "subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace mha::platform {

std::string find_program(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  const std::string dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const std::size_t colon = std::min(dirs.find(':', at), dirs.size());
    const std::string dir = dirs.substr(at, colon - at);
    const std::string full = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(full.c_str(), X_OK) == 0) return full;
    at = colon + 1;
  }
  return "";
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  ProcessResult res;
  if (argv.empty()) {
    res.error = "no program given";
    return res;
  }
  const std::string program = find_program(argv[0]);
  if (program.empty()) {
    res.error = argv[0] + " is not installed";
    return res;
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The environment: ours, with options.env's names replaced or added.
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& o : options.env) replaced |= o.compare(0, name.size() + 1, name + "=") == 0;
    if (!replaced) env_strings.push_back(entry);
  }
  for (const std::string& o : options.env) env_strings.push_back(o);
  std::vector<char*> envp;
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || (options.capture_stdout && ::pipe2(out_pipe, O_CLOEXEC) != 0)) {
    res.error = std::string("cannot make a pipe: ") + std::strerror(errno);
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]})
      if (fd >= 0) ::close(fd);
    return res;
  }
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t pid = ::fork();
  if (pid < 0) {
    res.error = std::string("cannot fork: ") + std::strerror(errno);
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], devnull})
      if (fd >= 0) ::close(fd);
    return res;
  }
  if (pid == 0) {  // the child: only async-signal-safe calls from here to exec
    ::dup2(in_pipe[0], STDIN_FILENO);
    ::dup2(options.capture_stdout ? out_pipe[1] : devnull, STDOUT_FILENO);
    ::dup2(devnull, STDERR_FILENO);
    // A group of its own, so that a timeout ends whatever it started too.
    if (options.timeout_s > 0) ::setpgid(0, 0);
    if (!options.working_dir.empty() && ::chdir(options.working_dir.c_str()) != 0) ::_exit(127);
    ::execve(program.c_str(), args.data(), envp.data());
    ::_exit(127);
  }
  if (options.running_pid) *options.running_pid = int(pid);
  ::close(in_pipe[0]);
  if (options.capture_stdout) ::close(out_pipe[1]);
  if (devnull >= 0) ::close(devnull);
  res.started = true;

  // A helper that quits before reading all its input must not kill us with SIGPIPE: blocked on this
  // thread while writing, and a pending one taken away before the mask is restored.
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  std::size_t written = 0;
  int to_child = in_pipe[1];
  if (options.input.empty()) {
    ::close(to_child);
    to_child = -1;
  }
  const int from_child = options.capture_stdout ? out_pipe[0] : -1;
  bool reading = from_child >= 0;
  char buf[4096];
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(options.timeout_s));
  // Milliseconds left before the deadline for poll(); -1 without a timeout.
  const auto left_ms = [&]() -> int {
    if (options.timeout_s <= 0) return -1;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return int(std::max<long long>(0, std::min<long long>(ms, 1 << 30)));
  };
  const auto stop = [&] {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    res.timed_out = true;
  };
  while ((to_child >= 0 || reading) && !res.timed_out) {
    pollfd fds[2];
    int n = 0;
    if (to_child >= 0) fds[n++] = {to_child, POLLOUT, 0};
    if (reading) fds[n++] = {from_child, POLLIN, 0};
    const int wait_ms = left_ms();
    if (wait_ms == 0) {
      stop();
      break;
    }
    if (::poll(fds, nfds_t(n), wait_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < n; ++k) {
      if (fds[k].fd == to_child && fds[k].revents) {
        const ssize_t w = ::write(to_child, options.input.data() + written, options.input.size() - written);
        if (w > 0) written += std::size_t(w);
        if (w < 0 && errno != EINTR && errno != EAGAIN) written = options.input.size();  // EPIPE: it quit
        if (written >= options.input.size()) {
          ::close(to_child);
          to_child = -1;
        }
      } else if (fds[k].fd == from_child && fds[k].revents) {
        const ssize_t r = ::read(from_child, buf, sizeof buf);
        if (r > 0)
          res.out.append(buf, std::size_t(r));
        else if (r == 0 || (errno != EINTR && errno != EAGAIN))
          reading = false;
      }
    }
  }
  if (to_child >= 0) ::close(to_child);
  if (from_child >= 0) ::close(from_child);
  const timespec zero{0, 0};
  while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);

  int status = 0;
  bool reaped = false;
  while (options.timeout_s > 0 && !res.timed_out) {  // it may have closed its output and still run
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) {
      reaped = true;
      break;
    }
    if (left_ms() == 0)
      stop();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  while (!reaped && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (options.running_pid) *options.running_pid = 0;
  if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
  res.signalled = WIFSIGNALED(status);
  if (res.exit_code == 127) res.error = argv[0] + " could not be run";
  return res;
}

}  // namespace mha::platform
