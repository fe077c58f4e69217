// Output files are checked before the work whose results they will hold, not after it.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace lenet::engine {

// Why `path` cannot be written as a file: it names a folder, or its folder is not writable; empty when
// neither. (A file that exists is replaced by the writer.)
inline std::string output_file_problem(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return path + ": is a folder, not a file name";
  const std::filesystem::path folder = std::filesystem::absolute(path, ec).parent_path();
  if (ec || ::access(folder.c_str(), W_OK) != 0) return path + ": cannot write into the folder " + folder.string();
  return "";
}

}  // namespace lenet::engine
