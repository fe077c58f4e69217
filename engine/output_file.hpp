// Output files are checked before the work whose results they will hold, not after it.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace lenet::engine {

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

// Why `path` cannot be written as a file: it names a folder, or its folder (the folder of the file a
// symbolic link names) is not writable; empty when neither. (A file that exists is replaced.)
inline std::string output_file_problem(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return path + ": is a folder, not a file name";
  const std::filesystem::path folder = std::filesystem::absolute(follow_links(path), ec).parent_path();
  if (ec || ::access(folder.c_str(), W_OK) != 0) return path + ": cannot write into the folder " + folder.string();
  return "";
}

// Whether something other than a regular file is there (a rename over /dev/null would replace the
// device).
inline bool other_than_regular_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec);
}

// The same as output_file_problem for a file replaced by a rename (a checkpoint): what `path` names
// must also be a regular file that may be written, or nothing yet.
inline std::string replaced_file_problem(const std::string& path) {
  if (std::string problem = output_file_problem(path); !problem.empty()) return problem;
  if (other_than_regular_file(path)) return path + ": not a regular file";
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) return path + ": is read-only";
  return "";
}

// Whether `a` and `b` name one file, symbolic links followed: the same file when both exist, else the
// same resolved path.
inline bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec)) return std::filesystem::equivalent(a, b, ec);
  auto resolved = [&](const std::string& p) {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(follow_links(p), ec), ec);
  };
  return resolved(a) == resolved(b);
}

}  // namespace lenet::engine
