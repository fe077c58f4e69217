// Replacing a file all at once: whoever reads it, and whatever stops the writer (a crash, a full disk, a
// second signal), finds either the old contents or the new, never a part. Checkpoints are written so, and
// lenet-bench's result files.
#pragma once
#include <sys/types.h>
#include <unistd.h>
#include <cstddef>
#include <functional>
#include <string>

namespace lenet::engine {

// The system calls through which a replacement reaches the disk, with POSIX's contracts: write(2) returns
// the bytes written (possibly fewer than asked) or -1 with errno set; fsync(2) and close(2) return 0 or -1
// with errno set, and close releases the descriptor either way (as Linux does). A seam so tests can
// simulate a full disk, a failing sync or a close that reports a deferred write error (NFS does);
// production code takes the default.
struct FileIo {
  std::function<ssize_t(int fd, const void* data, size_t size)> write = ::write;
  std::function<int(int fd)> fsync = ::fsync;
  std::function<int(int fd)> close = ::close;
};

// Writes `size` bytes to PATH.tmp.<pid>.<n> (PATH's name cut short where the folder's longest name needs
// it) in the same folder, fsyncs it, renames it over the regular file `path` names (through a symbolic
// link, the file it names; a new one where there is none), fsyncs the folder. The file replaced keeps its
// permission bits. Returns "" when that worked, else the problem, after removing the temporary file; where
// the rename had not happened, `path` still holds what it held, which the problem says, calling it the
// previous `kind` ("checkpoint", "file"). The problem does not name `path`.
std::string replace_file(const std::string& path, const void* data, size_t size, const std::string& kind,
                         const FileIo& io = {});

// For a signal handler about to end the process: removes the temporary file of a replacement in progress,
// if any (the file it was to replace stays as it was). Async-signal-safe: a lock-free atomic load and
// unlink(2).
void remove_replacement_in_progress() noexcept;

}  // namespace lenet::engine
