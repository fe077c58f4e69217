// Fashion-MNIST in memory: pixels kept as bytes (47 MB for the training set) and turned into floats in
// [0, 1] only when a minibatch is gathered.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/idx.hpp"

namespace lenet::io {

constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

struct Split {
  std::vector<uint8_t> pixels;  // size() * 784
  std::vector<uint8_t> labels;  // 0..9

  size_t size() const { return labels.size(); }
  // Rows idx[0..n) into x (n * 784 floats, pixel / 255) and y (n labels).
  void gather(const uint32_t* idx, size_t n, float* x, int32_t* y) const;
  // Rows [first, first + n) in order.
  void slice(size_t first, size_t n, float* x, int32_t* y) const;
  // FNV-1a (64 bits) of the pixels, then the labels: which examples these are, in which order. The same
  // in every build (no optional library), so that a checkpoint can say which data its run trained on.
  uint64_t fingerprint() const;
};

struct FashionMnist {
  std::string dir;
  std::vector<std::string> files;  // the four IDX files read (raw or .gz)
  Split train;
  Split test;
};

// The data folder: the flag's value when not empty, else $LENET_DATA_DIR when set and not empty, else
// the folder of Debian's dataset-fashion-mnist package.
std::string resolve_data_dir(const std::string& flag_value);

// The path of `name` in `dir`, or of `name`.gz when only that exists. Throws DataError, with how to get
// the data, when neither exists.
std::string find_data_file(const std::string& dir, const std::string& name);

// A --train-limit or --test-limit larger than its split: the flag is wrong, not the data.
class LimitError : public DataError {
 public:
  LimitError(const std::string& message, std::string flag) : DataError(message), flag(std::move(flag)) {}
  std::string flag;  // "--train-limit" or "--test-limit"
};

// Loads the four files. A limit of 0 keeps every example; a larger limit than the split holds is a
// LimitError naming the flag.
FashionMnist load_fashion_mnist(const std::string& dir, size_t train_limit = 0, size_t test_limit = 0);

// One split from an images file and a labels file whose counts must agree.
Split load_split(const std::string& images_path, const std::string& labels_path);

}  // namespace lenet::io
