#include "engine/replace_file.hpp"
#include <fcntl.h>
#include <sys/stat.h>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include "engine/output_file.hpp"

namespace lenet::engine {
namespace {

// The path of the temporary file of a replacement in progress, for remove_replacement_in_progress(): a
// fixed buffer (a signal handler must not read memory that may be freed under it) and a lock-free flag.
char g_in_progress_path[4096];
std::atomic<bool> g_in_progress{false};
static_assert(std::atomic<bool>::is_always_lock_free);

// The temporary file while it exists: closed and removed unless committed.
class TemporaryFile {
 public:
  TemporaryFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
    if (path_.size() < sizeof g_in_progress_path) {  // a longer path is simply not cleaned up by a signal
      std::memcpy(g_in_progress_path, path_.c_str(), path_.size() + 1);
      g_in_progress.store(true);
    }
  }
  ~TemporaryFile() {  // the flag cleared last: a second signal before the unlink still removes the file
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
    g_in_progress.store(false);
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  int fd() const { return fd_; }
  int close(const FileIo& io) {
    const int rc = io.close(fd_);
    fd_ = -1;  // closed even when close reports an error (POSIX leaves it unspecified; Linux closes)
    return rc;
  }
  void commit() {
    g_in_progress.store(false);
    committed_ = true;
  }

 private:
  std::string path_;
  int fd_;
  bool committed_ = false;
};

}  // namespace

void remove_replacement_in_progress() noexcept {
  if (g_in_progress.load()) ::unlink(g_in_progress_path);
}

std::string replace_file(const std::string& path, const void* data, size_t size, const std::string& kind,
                         const FileIo& io) {
  // The rename replaces `target`: through a symbolic link, the file it names, not the link; and never
  // anything but a regular file.
  const std::string target = follow_links(path);
  if (other_than_regular_file(target)) return "not a regular file";

  // Same folder, so the rename is atomic (same file system). The counter keeps two replacements of one
  // process apart; the pid, two processes.
  static std::atomic<unsigned> counter{0};
  const std::string tmp_path = temporary_name(target, ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    return "cannot create temporary file " + tmp_path + reason(err);
  }
  TemporaryFile tmp(tmp_path, fd);
  // Called as failed("fsync", errno): errno is read before any message is built.
  const auto failed = [&](const char* call, int err, const char* detail = "") {
    return std::string(call) + " of " + tmp_path + " failed" + detail + reason(err) + "; the previous " + kind +
           ", if any, is unchanged";
  };
  // The file replaced keeps its permission bits (a private checkpoint stays private); a new one gets the
  // umask's. Where the file system takes no chmod (vfat, some network mounts), the write goes on.
  struct stat replaced {};
  if (::stat(target.c_str(), &replaced) == 0) (void)::fchmod(tmp.fd(), replaced.st_mode & 0777);

  const auto* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = io.write(tmp.fd(), bytes + done, size - done);
    // A write that makes no progress would loop forever; the kernel reports a full disk as ENOSPC.
    const int err = n < 0 ? errno : ENOSPC;
    if (n < 0 && err == EINTR) continue;
    if (n <= 0) return failed("write", err, (" after " + std::to_string(done) + " bytes").c_str());
    done += static_cast<size_t>(n);
  }
  // Data on disk before the rename makes it visible, else a crash could leave an empty file under `path`.
  if (io.fsync(tmp.fd()) != 0) return failed("fsync", errno);
  if (tmp.close(io) != 0) return failed("close", errno);
  if (::rename(tmp_path.c_str(), target.c_str()) != 0) return failed("rename", errno);
  tmp.commit();

  // The rename itself is durable only once the folder is synced.
  const std::string folder = folder_of(target);
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    const int err = errno;
    return "written, but cannot open folder " + folder + " to sync it" + reason(err);
  }
  const int rc = io.fsync(dir);
  const int err = errno;
  ::close(dir);
  // EINVAL: the file system cannot sync folders (some network and FUSE file systems); nothing to wait for.
  if (rc != 0 && err != EINVAL) return "written, but fsync of folder " + folder + " failed" + reason(err);
  return "";
}

}  // namespace lenet::engine
