// Input files read whole, without waiting for a FIFO's writer.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace lenet::engine {

// The bytes of `path`, at most `limit` (a larger file reads as `limit` bytes, for the caller to refuse).
// Opened without blocking: a FIFO with no writer would wait for one, maybe for ever; instead it reads as
// empty, which is refused by name. A pipe with its writer there (`--load <(...)`) reads as any file.
// Failures throw Error naming the file and, in `what`, what it was for.
template <typename Error>
std::vector<uint8_t> read_without_waiting(const std::string& path, size_t limit, const std::string& what) {
  std::vector<uint8_t> bytes(limit);  // before the open: nothing after it throws until it is closed
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (const int err = errno; fd < 0) throw Error(path + ": cannot open " + what + " (" + std::strerror(err) + ")");
  size_t got = 0;
  int err = 0;
  if (const int flags = ::fcntl(fd, F_GETFL); flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) err = errno;
  while (err == 0 && got < limit) {
    const ssize_t n = ::read(fd, bytes.data() + got, limit - got);
    if (n < 0 && errno != EINTR) err = errno;
    if (n == 0) break;
    if (n > 0) got += static_cast<size_t>(n);
  }
  struct stat st {};
  const bool fifo = ::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
  ::close(fd);
  if (err != 0) throw Error(path + ": cannot read " + what + " (" + std::strerror(err) + ")");
  if (got == 0 && fifo) throw Error(path + ": a FIFO that no process writes to (its writer must open it first)");
  bytes.resize(got);
  return bytes;
}

}  // namespace lenet::engine
