#include "io/dataset.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace lenet::io {
namespace {

// 1: a regular file (through links); 0: nothing there; -1: something else (a folder, a device, ...).
// What keeps stat from looking (no permission, a loop of links) is an error naming it and `what` it is.
int file_kind(const std::string& path, const std::string& what = "") {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return 0;
    throw DataError(path + ": " + std::strerror(errno) + what);
  }
  return S_ISREG(st.st_mode) ? 1 : -1;
}

void to_floats(const uint8_t* pixels, float* x) {
  for (uint32_t i = 0; i < kImagePixels; ++i) x[i] = static_cast<float>(pixels[i]) / 255.0f;
}

void apply_limit(Split& split, size_t limit, const char* flag, const char* what) {
  if (limit == 0) return;
  if (limit > split.size()) {
    throw LimitError(std::string(flag) + " " + std::to_string(limit) + ": the " + what + " set has only " +
                         std::to_string(split.size()) + " examples",
                     flag);
  }
  split.labels.resize(limit);
  split.pixels.resize(limit * kImagePixels);
}

}  // namespace

void Split::gather(const uint32_t* idx, size_t n, float* x, int32_t* y) const {
  for (size_t i = 0; i < n; ++i) {
    to_floats(pixels.data() + size_t{idx[i]} * kImagePixels, x + i * kImagePixels);
    y[i] = labels[idx[i]];
  }
}

void Split::slice(size_t first, size_t n, float* x, int32_t* y) const {
  for (size_t i = 0; i < n; ++i) {
    to_floats(pixels.data() + (first + i) * kImagePixels, x + i * kImagePixels);
    y[i] = labels[first + i];
  }
}

uint64_t Split::fingerprint() const {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a's offset basis and prime
  for (const std::vector<uint8_t>* bytes : {&pixels, &labels})
    for (const uint8_t b : *bytes) hash = (hash ^ b) * 0x100000001b3ull;
  return hash;
}

std::string resolve_data_dir(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  const char* env = std::getenv("LENET_DATA_DIR");
  if (env != nullptr && *env != '\0') return env;
  return kDefaultDataDir;
}

std::string find_data_file(const std::string& dir, const std::string& name) {
  if (file_kind(dir, " (the data folder: --data-dir / LENET_DATA_DIR)") == 1) {
    throw DataError(dir + ": a file, not a folder; point --data-dir / LENET_DATA_DIR at the folder holding the "
                    "four IDX files");
  }
  const std::string plain = dir + "/" + name;
  std::string other;  // the first of the two that is there but not a regular file
  for (const std::string& path : {plain, plain + ".gz"}) {
    const int kind = file_kind(path);
    if (kind == 1) return path;
    if (kind == -1 && other.empty()) other = path;
  }
  if (!other.empty()) throw DataError(other + ": not a regular file");
  throw DataError(plain + "(.gz): not found; install the data set with `apt-get install dataset-fashion-mnist`"
                  " or point --data-dir / LENET_DATA_DIR at a folder holding the four IDX files");
}

Split load_split(const std::string& images_path, const std::string& labels_path) {
  IdxImages images = read_idx_images(images_path);
  Split split;
  split.labels = read_idx_labels(labels_path);
  if (images.count != split.labels.size()) {
    throw DataError(images_path + ": " + std::to_string(images.count) + " images but " + labels_path + " has " +
                    std::to_string(split.labels.size()) + " labels");
  }
  if (images.count == 0) throw DataError(images_path + ": holds no examples");
  split.pixels = std::move(images.pixels);
  return split;
}

FashionMnist load_fashion_mnist(const std::string& dir, size_t train_limit, size_t test_limit) {
  FashionMnist data;
  data.dir = dir;
  // Named one by one so a missing folder is reported by its first file, whatever the evaluation order.
  const std::string train_images = find_data_file(dir, "train-images-idx3-ubyte");
  const std::string train_labels = find_data_file(dir, "train-labels-idx1-ubyte");
  const std::string test_images = find_data_file(dir, "t10k-images-idx3-ubyte");
  const std::string test_labels = find_data_file(dir, "t10k-labels-idx1-ubyte");
  data.files = {train_images, train_labels, test_images, test_labels};
  data.train = load_split(train_images, train_labels);
  data.test = load_split(test_images, test_labels);
  apply_limit(data.train, train_limit, "--train-limit", "training");
  apply_limit(data.test, test_limit, "--test-limit", "test");
  return data;
}

}  // namespace lenet::io
