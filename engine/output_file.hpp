// Output files are checked before the work whose results they will hold, not after it.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <iostream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace lenet::engine {

// For a tool's start: a standard descriptor the caller closed (`>&-`) is taken by /dev/null opened the
// other way round, so that no file opened later (--metrics) lands on it and a write to it fails; and a
// reader that goes away or a file-size limit makes a write fail with an error the tool reports (exit 1, a
// checkpoint save leaving no temporary file), not a silent death by SIGPIPE or SIGXFSZ.
inline void prepare_output() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    const int got = ::open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);  // the lowest free descriptor: fd
    if (got >= 0 && got != fd) {
      ::dup2(got, fd);
      ::close(got);
    }
  }
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGXFSZ, SIG_IGN);
}

// An output named "-" is stdout, as most tools that write a file take it: the file /dev/stdout names,
// which the checks and writes below then treat as stdout.
inline void dash_is_stdout(std::string& path) {
  if (path == "-") path = "/dev/stdout";
}

// " (the system's reason)" for an errno value, or nothing for 0 (a stream may fail without one).
inline std::string reason(int err) { return err != 0 ? std::string(" (") + std::strerror(err) + ")" : std::string(); }

// Writes `text` to `out` and flushes it: empty when that worked, else "WHAT: write failed (reason)".
inline std::string write_all(std::ostream& out, const std::string& text, const std::string& what) {
  errno = 0;
  if (out << text << std::flush) return "";
  return what + ": write failed" + reason(errno);
}

// A message as one line: the control characters a file name or a flag's value may bring (a newline, an
// escape sequence; C1 controls such as CSI, U+0080..U+009F, in their UTF-8 form 0xc2 0x80..0x9f) written
// as \n, \r, \t or \xNN, so that a message can neither span lines nor move a terminal's cursor. Other
// bytes, the rest of UTF-8 included, stay as they are.
inline std::string one_line(const std::string& text) {
  std::string line;
  auto hex = [&line](unsigned char b) { line += {'\\', 'x', "0123456789abcdef"[b >> 4], "0123456789abcdef"[b & 15]}; };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const bool c1 = byte == 0xc2 && i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xe0) == 0x80;
    if (byte == '\n' || byte == '\r' || byte == '\t') {
      line += byte == '\n' ? "\\n" : byte == '\r' ? "\\r" : "\\t";
    } else if (byte < 0x20 || byte == 0x7f || c1) {
      hex(byte);
      if (c1) hex(static_cast<unsigned char>(text[++i]));
    } else {
      line += text[i];
    }
  }
  return line;
}

// A message on stderr: one line (see one_line), after the tool's name.
inline void say(const char* program, const std::string& message) {
  std::cerr << program << ": " << one_line(message) << std::endl;
}

// What `path` names once symbolic links are followed, the last one even when what it names does not
// exist yet (a file written there goes where the link points).
inline std::string follow_links(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = path;
  for (int hops = 0; hops < 40 && std::filesystem::is_symlink(p, ec); ++hops) {
    const std::filesystem::path to = std::filesystem::read_symlink(p, ec);
    if (ec) break;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  return p.string();
}

// The longest file name `folder` takes (255, the usual limit, where it cannot tell).
inline size_t longest_name(const std::filesystem::path& folder) {
  const long n = ::pathconf(folder.empty() ? "." : folder.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<size_t>(n) : 255;
}

// Where a file replaced by a rename (a checkpoint) at `target` is first written: in its folder, under
// `target`'s name cut short enough to leave room for `suffix` within the folder's longest name.
inline std::string temporary_name(const std::string& target, const std::string& suffix) {
  const std::filesystem::path t = target;
  const std::string name = t.filename().string();
  const size_t room = longest_name(t.parent_path());
  return (t.parent_path() / (name.substr(0, room > suffix.size() ? room - suffix.size() : 1) + suffix)).string();
}

// Why a new file cannot be made at `path`: its folder (the folder of the file a symbolic link names) is
// not writable or takes no new file, or the name is longer than that folder takes; empty when none.
inline std::string new_file_problem(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::absolute(follow_links(path), ec), folder = file.parent_path();
  if (ec) return path + ": cannot find the current folder (" + ec.message() + ")";  // removed while running
  struct stat st {};
  const int no_folder = ::stat(folder.c_str(), &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  if (no_folder != 0 || ::access(folder.c_str(), W_OK) != 0)
    return path + ": cannot write into the folder " + folder.string() + reason(no_folder != 0 ? no_folder : errno);
  if (const size_t most = longest_name(folder); file.filename().string().size() > most)
    return path + ": a file name longer than the " + std::to_string(most) + " bytes its folder takes";
  // access() lets root through where no file can be made (/proc): make one there. Unnamed where the file
  // system can (nothing appears in the folder, nothing is left behind), else named as a checkpoint's
  // temporary file is, and removed.
  int fd = ::open(folder.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  int err = errno;
  if (fd < 0 && (err == EOPNOTSUPP || err == EISDIR)) {
    const std::string probe = temporary_name(file.string(), ".tmp." + std::to_string(::getpid()) + ".probe");
    fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    err = fd < 0 && errno == EEXIST ? 0 : errno;  // EEXIST: a file could be made there
    if (fd >= 0) ::unlink(probe.c_str());
  }
  if (fd >= 0) ::close(fd);
  return fd < 0 && err != 0 ? path + ": cannot create a file in the folder " + folder.string() + reason(err) : "";
}

// Why `path` cannot be written as a file: it names a folder, a loop of symbolic links or a file that
// may not be written, or nothing yet where no file can be made (new_file_problem); empty when none.
inline std::string output_file_problem(const std::string& path) {
  // Stdout or stderr ("-" too) must take writes: one the caller closed is /dev/null opened for reading
  // (prepare_output), which a second open of the name would write into unseen.
  if (path == "/dev/stdout" || path == "/dev/stderr") {
    const int flags = ::fcntl(path == "/dev/stdout" ? STDOUT_FILENO : STDERR_FILENO, F_GETFL);
    return flags >= 0 && (flags & O_ACCMODE) != O_RDONLY ? "" : path + ": closed, nothing can be written to it";
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return path + ": is a folder, not a file name";
  if (::access(path.c_str(), F_OK) == 0) return ::access(path.c_str(), W_OK) == 0 ? "" : path + ": is read-only";
  if (errno == ELOOP) return path + ": a loop of symbolic links, naming no file";
  return new_file_problem(path);
}

// Whether something other than a regular file is there (a rename over /dev/null would replace the
// device).
inline bool other_than_regular_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec);
}

// The standard stream (std::cout, else std::cerr) that writes the regular file, pipe or socket `path`
// names, or nullptr. Opened a second time, a regular file that stdout writes (`--metrics /dev/stdout >
// log`) would be truncated and written at an offset of its own, over the stream's lines; written through
// the stream, every line lands whole and in order. /dev/stdout and /dev/stderr (and "-") name their stream
// whatever it writes: a terminal too, so that the other lines go to the other stream there as well.
inline std::ostream* standard_stream_of(const std::string& path) {
  if (path == "/dev/stdout") return &std::cout;
  if (path == "/dev/stderr") return &std::cerr;
  struct stat target {}, st {};
  if (path.empty() || ::stat(path.c_str(), &target) != 0) return nullptr;
  // A device (a terminal, /dev/null: maybe the one that took a closed descriptor) keeps no offset.
  if (!S_ISREG(target.st_mode) && !S_ISFIFO(target.st_mode) && !S_ISSOCK(target.st_mode)) return nullptr;
  if (::fstat(STDOUT_FILENO, &st) == 0 && st.st_dev == target.st_dev && st.st_ino == target.st_ino) return &std::cout;
  if (::fstat(STDERR_FILENO, &st) == 0 && st.st_dev == target.st_dev && st.st_ino == target.st_ino) return &std::cerr;
  return nullptr;
}

// The folder that holds `file`: "." for a bare name.
inline std::string folder_of(const std::string& file) {
  const std::filesystem::path folder = std::filesystem::path(file).parent_path();
  return folder.empty() ? "." : folder.string();
}

// Whether the sticky bit of `folder` (as /tmp's) keeps `user` from renaming over `file` in it, though the
// file may be written and the folder take new files: rename(2) then fails with EPERM unless the user owns
// the file or the folder, or is root.
inline bool sticky_bit_forbids_rename(const struct stat& folder, const struct stat& file, uid_t user) {
  return (folder.st_mode & S_ISVTX) != 0 && user != 0 && user != file.st_uid && user != folder.st_uid;
}

// The same as output_file_problem for a file replaced by a rename (a checkpoint): a new file must also
// be possible in its folder, what `path` names must be a regular file, or nothing yet, and a rename must
// be allowed to replace it.
inline std::string replaced_file_problem(const std::string& path) {
  if (std::string problem = output_file_problem(path); !problem.empty()) return problem;
  if (other_than_regular_file(path)) return path + ": not a regular file";
  if (standard_stream_of(path) != nullptr) return path + ": the file stdout or stderr writes (a rename would cut it off)";
  const std::string target = follow_links(path);
  struct stat file {}, dir {};
  if (::stat(target.c_str(), &file) == 0 && ::stat(folder_of(target).c_str(), &dir) == 0 &&
      sticky_bit_forbids_rename(dir, file, ::geteuid()))
    return path + ": another user's file in a folder with the sticky bit (as /tmp): no rename may replace it";
  // The rename's new file (for a path that names nothing yet, output_file_problem checked that already).
  return ::access(path.c_str(), F_OK) == 0 ? new_file_problem(path) : "";
}

// Opening a named pipe for writing waits until some process opens it for reading, maybe for ever. Held
// from before such an open until after it, a PipeWriteEnd checks, without waiting, that a reader is
// there and the pipe may be written (problem() names the pipe otherwise), and keeps a write end of its
// own open meanwhile: while the reader stays, the later open does not wait, and the reader never sees
// the pipe without a writer, which it would take as the end of the stream. For anything but a named
// pipe it does nothing.
class PipeWriteEnd {
 public:
  explicit PipeWriteEnd(const std::string& path) {
    struct stat st {};
    if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) return;
    fd_ = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    const int err = errno;
    if (fd_ < 0 && err == ENXIO) problem_ = path + ": a named pipe that no process reads (start its reader first)";
    else if (fd_ < 0) problem_ = path + ": cannot open the named pipe for writing" + reason(err);
  }
  ~PipeWriteEnd() {
    if (fd_ >= 0) ::close(fd_);
  }
  PipeWriteEnd(const PipeWriteEnd&) = delete;
  PipeWriteEnd& operator=(const PipeWriteEnd&) = delete;
  const std::string& problem() const { return problem_; }

 private:
  int fd_ = -1;
  std::string problem_;
};

// Whether `a` and `b` name one file, symbolic links followed: one standard stream ("-" twice, a
// terminal too); the same inode when both exist (a pipe too, which std::filesystem::equivalent refuses
// to compare) but for a character device such as a terminal or /dev/null, which two outputs may share;
// else the same resolved path.
inline bool same_file(const std::string& a, const std::string& b) {
  if (const std::ostream* stream = standard_stream_of(a); stream != nullptr && stream == standard_stream_of(b)) return true;
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return !S_ISCHR(sa.st_mode) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ec;
  auto resolved = [&](const std::string& p) {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(follow_links(p), ec), ec);
  };
  return resolved(a) == resolved(b);
}

// "FLAG PATH names the data file FILE" for the first of `outputs` (flag, path; an empty path: none) that
// names one of `files` (same_file) or its other form (FILE.gz beside a raw FILE, which the reader passed
// over, and the raw one beside a .gz), else "": an output written over a data file would destroy it.
inline std::string output_over_data_file(std::initializer_list<std::pair<const char*, std::string>> outputs,
                                         const std::vector<std::string>& files) {
  const std::string gz = ".gz";
  for (const auto& [flag, path] : outputs)
    for (const std::string& read : files) {
      const bool zipped = read.size() > gz.size() && read.compare(read.size() - gz.size(), gz.size(), gz) == 0;
      for (const std::string& file : {read, zipped ? read.substr(0, read.size() - gz.size()) : read + gz})
        if (!path.empty() && same_file(path, file))
          return std::string(flag) + " " + path + " names the data file " + file;
    }
  return "";
}

// The folder for files written beside the file `path` names (links followed: `/dev/stdout > r.json`
// gives r.json's folder), when that is a regular file or nothing yet; empty beside a pipe or a device.
inline std::filesystem::path folder_beside(const std::string& path) {
  struct stat st {};
  if (path.empty() || (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))) return {};
  std::error_code ec;
  return std::filesystem::absolute(follow_links(path), ec).parent_path();
}

}  // namespace lenet::engine
