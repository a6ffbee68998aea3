// Reading and writing files safely, for every format in engine/io and every program: bounded reads
// of regular files only, and writes that leave the old file (or folder) or the new one, never a mix,
// never through a planted link, never over one of the run's own inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mha {

// What a whole-file read may take unless the caller says otherwise: a JSON scenario or config is far
// smaller; a larger file is refused from its size before anything is read.
inline constexpr std::uint64_t kMaxWholeFileBytes = std::uint64_t(1) << 30;

// A read-only descriptor (the caller closes it) and the file's size from fstat; a missing file, a
// folder, a FIFO or a device is a FileError naming the path, and nothing blocks.
int open_regular_file(const std::string& path, std::uint64_t* size);
// The whole file, refused before reading when fstat says it is larger than `max_bytes`; read in
// bounded chunks, never past the size fstat gave (a file that grows meanwhile is refused too).
std::vector<unsigned char> read_file_bytes(const std::string& path,
                                           std::uint64_t max_bytes = kMaxWholeFileBytes);
// Exactly `size` bytes at `offset` of an open descriptor; FileError naming `path` when short.
void read_exact(int fd, std::uint64_t offset, unsigned char* out, std::size_t size, const std::string& path);

// Writes `bytes` to a temp file created beside `path` with O_CREAT | O_EXCL | O_NOFOLLOW under a
// name no other process or call uses (".<name>.<pid>-<n>-<random>.mha-tmp"), fsyncs it, renames it
// over `path` and fsyncs the folder: a crash, kill -9 or full disk leaves the old file or the new
// one, and a link planted where a temp file would go is never followed. A device or pipe
// (/dev/stdout) is written in place. FileError naming the path and the system's reason on failure.
void write_file_atomic(const std::string& path, const std::vector<unsigned char>& bytes);

// Fills a folder as a whole: `fill` writes into a fresh staging folder beside `dir`, which then
// takes `dir`'s place in one rename (an existing `dir` is swapped out and removed). When `fill`
// throws, the staging folder is removed and `dir` is as it was. An existing non-empty `dir` is
// replaced only when it holds one of `markers` (files every earlier run wrote), so a user's folder
// named by mistake is refused, not deleted.
void write_folder_atomic(const std::string& dir, const std::vector<std::string>& markers,
                         const std::function<void(const std::string& staging)>& fill);

// Whether a name is one of the temp files or staging folders above.
bool is_temp_name(const std::string& name);
// Removes the temp files and staging folders in `folder` left by processes that no longer run
// (kill -9, power loss); another running process's are left alone. Returns how many were removed.
int clean_stale_temps(const std::string& folder);

// Refuses (FileError naming both) an output path that is, or would overwrite, one of `inputs`:
// the same file through another spelling, a link, or a folder that contains an input.
void refuse_output_over_inputs(const std::string& output, const std::vector<std::string>& inputs,
                               const std::string& option = "--out");

}  // namespace mha
