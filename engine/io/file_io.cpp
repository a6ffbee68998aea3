// Bounded reads and safe writes (see file_io.hpp). Temp files and staging folders carry the writing
// process's id in their name, so a later run can tell a dead process's leftovers from a live one's.
#include "io/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "errors.hpp"

namespace mha {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw FileError(name, name + ": " + what);
}

constexpr const char* kTempTag = ".mha-";  // ".<name>.mha-<pid>-<n>-<random>.tmp" / ".staging"

// A name beside `path` that no other process (pid), call (counter) or earlier boot (random) uses.
std::string unique_sibling(const std::string& path, const char* suffix) {
  static std::atomic<unsigned> counter{0};
  static const unsigned salt = std::random_device{}();
  const fs::path p(path);
  const std::string name = p.filename().string();
  char tag[64];
  std::snprintf(tag, sizeof tag, "%s%ld-%u-%08x%s", kTempTag, long(::getpid()), counter++, salt, suffix);
  return (p.parent_path() / ("." + name + tag)).string();
}

// Writes every byte to fd, then closes it (fsync first when `sync`); 0 or the first errno.
int write_all_and_close(int fd, const std::vector<unsigned char>& bytes, bool sync) {
  int err = 0;
  for (std::size_t done = 0; done < bytes.size() && !err;) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno != EINTR) err = errno;
    if (n > 0) done += std::size_t(n);
  }
  if (!err && sync && ::fsync(fd) != 0) err = errno;  // a full disk can show up only here
  if (::close(fd) != 0 && !err) err = errno;
  return err;
}

void fsync_folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  const int dir = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {  // the rename itself survives a power loss once the folder is synced
    ::fsync(dir);
    ::close(dir);
  }
}

// The writing process's id from a temp name, or 0 when the name is not one of ours.
long temp_pid(const std::string& name) {
  if (name.empty() || name[0] != '.') return 0;
  const bool tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
  const bool staging = name.size() > 8 && name.compare(name.size() - 8, 8, ".staging") == 0;
  if (!tmp && !staging) return 0;
  const std::size_t at = name.rfind(kTempTag);
  if (at == std::string::npos) return 0;
  long pid = 0;
  std::size_t i = at + std::strlen(kTempTag);
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && pid < (1L << 31); ++i)
    pid = pid * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '-' ? pid : 0;
}

}  // namespace

int open_regular_file(const std::string& path, std::uint64_t* size) {
  // A device, FIFO or folder named in a scenario would block or never end: refuse it up front.
  // O_NONBLOCK keeps open() itself from waiting for a FIFO's writer; it changes nothing for files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path,
         std::string("cannot read: ") + (S_ISDIR(st.st_mode) ? std::strerror(EISDIR) : "not a regular file"));
  }
  if (size) *size = std::uint64_t(st.st_size);
  return fd;
}

void read_exact(int fd, std::uint64_t offset, unsigned char* out, std::size_t size, const std::string& path) {
  constexpr std::size_t kChunk = std::size_t(1) << 24;  // bounded reads; EINTR-safe
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = ::pread(fd, out + done, std::min(kChunk, size - done), off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, std::string("cannot read: ") + std::strerror(errno));
    if (n == 0)
      fail(path, "cannot read: the file ended after " + std::to_string(offset + done) +
                     " bytes (was it cut "
                     "while being read?)");
    done += std::size_t(n);
  }
}

std::vector<unsigned char> read_file_bytes(const std::string& path, std::uint64_t max_bytes) {
  std::uint64_t size = 0;
  const int fd = open_regular_file(path, &size);
  if (size > max_bytes) {
    ::close(fd);
    fail(path, "is " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
                   " bytes a file of this kind may have; nothing was read");
  }
  std::vector<unsigned char> bytes;
  try {
    bytes.resize(std::size_t(size));
    read_exact(fd, 0, bytes.data(), bytes.size(), path);
    unsigned char more;  // a file that grew since fstat is not the file whose size was checked
    if (::pread(fd, &more, 1, off_t(size)) > 0) fail(path, "cannot read: the file grew while being read");
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return bytes;
}

void write_file_atomic(const std::string& path, const std::vector<unsigned char>& bytes) {
  // A device or a pipe (/dev/stdout, /dev/full, a FIFO) has no folder entry to replace: written in
  // place. Renaming a temp file over it would replace the device node itself.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) fail(path, "cannot write: it is a folder");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(path, std::string("cannot write: ") + std::strerror(errno));
    const int err = write_all_and_close(fd, bytes, false);
    if (err) fail(path, std::string("cannot write: ") + std::strerror(err));
    return;
  }
  // O_EXCL | O_NOFOLLOW: the temp file is new and ours; a file or link planted under its name makes
  // the open fail rather than be written through.
  const std::string tmp = unique_sibling(path, ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot write " + tmp + ": " + std::strerror(errno));
  const int err = write_all_and_close(fd, bytes, true);
  if (err) {
    ::unlink(tmp.c_str());
    fail(path, "cannot write " + tmp + ": " + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    ::unlink(tmp.c_str());
    fail(path, "cannot rename " + tmp + " to it: " + std::strerror(rename_err));
  }
  fsync_folder_of(path);
}

void write_folder_atomic(const std::string& dir_in, const std::vector<std::string>& markers,
                         const std::function<void(const std::string& staging)>& fill) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // "run/" names the folder "run"
  std::error_code ec;
  const fs::file_status old = fs::symlink_status(dir, ec);
  const bool exists = fs::exists(old);
  if (exists && !fs::is_directory(old))
    fail(dir, fs::is_symlink(old) ? "cannot write: it is a link; give the folder itself"
                                  : "cannot write: it exists and is not a folder");
  const bool earlier_run = std::any_of(markers.begin(), markers.end(), [&](const std::string& m) {
    return fs::exists(fs::path(dir) / m, ec);
  });
  if (exists && !fs::is_empty(dir, ec) && !earlier_run)
    fail(dir, "holds files but no " + (markers.empty() ? std::string("output") : markers[0]) +
                  ", so it is not an earlier run's output; it would be replaced whole: give a new or empty "
                  "folder");
  if (exists) {  // a dead run's staging or set-aside copies of this folder: redundant while it exists
    const std::string own = "." + fs::path(dir).filename().string() + kTempTag;
    const fs::path parent = fs::path(dir).parent_path();
    for (fs::directory_iterator it(parent.empty() ? fs::path(".") : parent, ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const long pid = temp_pid(name);
      if (pid <= 0 || name.rfind(own, 0) != 0) continue;
      if (::kill(pid_t(pid), 0) == 0 || errno == EPERM) continue;  // that process still runs
      std::error_code rm;
      fs::remove_all(it->path(), rm);
    }
    ec.clear();
  }
  const std::string staging = unique_sibling(dir, ".staging");
  if (const fs::path parent = fs::path(dir).parent_path(); !parent.empty()) {  // "out/run": out is made
    fs::create_directories(parent, ec);
    if (ec) fail(dir, "cannot create " + parent.string() + ": " + ec.message());
  }
  if (!fs::create_directory(staging, ec) || ec)
    fail(dir, "cannot create " + staging + ": " + (ec ? ec.message() : std::strerror(EEXIST)));
  try {
    fill(staging);
  } catch (...) {
    fs::remove_all(staging, ec);  // the old folder is as it was
    throw;
  }
  fsync_folder_of(staging + "/x");
  if (!exists) {
    if (std::rename(staging.c_str(), dir.c_str()) != 0) {
      const int err = errno;
      fs::remove_all(staging, ec);
      fail(dir, "cannot rename " + staging + " to it: " + std::strerror(err));
    }
  } else {
    // Two renames: the old folder steps aside (to a dead-looking name if we are killed here), the
    // new one takes its place, then the old one is removed.
    const std::string aside = unique_sibling(dir, ".staging");
    if (std::rename(dir.c_str(), aside.c_str()) != 0) {
      const int err = errno;
      fs::remove_all(staging, ec);
      fail(dir, std::string("cannot replace: ") + std::strerror(err));
    }
    if (std::rename(staging.c_str(), dir.c_str()) != 0) {
      const int err = errno;
      std::rename(aside.c_str(), dir.c_str());
      fs::remove_all(staging, ec);
      fail(dir, "cannot rename " + staging + " to it: " + std::strerror(err));
    }
    fs::remove_all(aside, ec);
  }
  fsync_folder_of(dir);
}

bool is_temp_name(const std::string& name) {
  return temp_pid(name) > 0;
}

int clean_stale_temps(const std::string& folder) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const long pid = temp_pid(it->path().filename().string());
    if (pid <= 0) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno == EPERM) continue;  // that process still runs
    std::error_code rm;
    if (fs::remove_all(it->path(), rm) > 0 && !rm) ++removed;
  }
  return removed;
}

void refuse_output_over_inputs(const std::string& output, const std::vector<std::string>& inputs,
                               const std::string& option) {
  std::error_code ec;
  const auto resolve = [&ec](const std::string& path) {
    fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
    return p.filename().empty() ? p.parent_path() : p;  // "run/" is the folder "run"
  };
  const fs::path out = resolve(output);
  struct stat out_st {};
  const bool out_exists = ::stat(output.c_str(), &out_st) == 0;
  for (const std::string& input : inputs) {
    if (input.empty()) continue;
    const fs::path in = resolve(input);
    struct stat in_st {};
    const bool same_file = out_exists && ::stat(input.c_str(), &in_st) == 0 &&
                           in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino;
    // `in` inside `out`: writing the folder `out` would replace it.
    const auto [o, i] = std::mismatch(out.begin(), out.end(), in.begin(), in.end());
    if (same_file || out == in || o == out.end())
      throw FileError(option, option + " " + output + ": it is, or holds, the input " + input +
                                  ", which writing it would overwrite; choose another output");
  }
}

}  // namespace mha
