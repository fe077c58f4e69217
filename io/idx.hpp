// IDX files (the MNIST container format, big-endian header) read from disk, raw or gzip-compressed.
// Every malformed input becomes a DataError naming the file and what is wrong; nothing here trusts a
// header field before checking it against the bytes actually present.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace lenet::io {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
constexpr uint32_t kImageSide = 28;
constexpr uint32_t kImagePixels = kImageSide * kImageSide;
constexpr uint32_t kNumClasses = 10;
// Larger than any Fashion-MNIST file decompressed (47 MB): a bound against decompression bombs.
constexpr size_t kMaxDecompressedBytes = size_t{256} << 20;

struct IdxImages {
  uint32_t count = 0;
  std::vector<uint8_t> pixels;  // count * 28 * 28, row-major per image
};

// True when this build can read .gz files (zlib was found at configure time).
bool gzip_supported();

// Bytes of `data` decompressed when they start with the gzip magic, else returned unchanged.
// `name` is used in error messages only.
std::vector<uint8_t> maybe_gunzip(std::vector<uint8_t> data, const std::string& name);

// The whole file, decompressed when it is gzip. Throws DataError when it cannot be read.
std::vector<uint8_t> read_file_bytes(const std::string& path);

IdxImages parse_idx_images(const uint8_t* data, size_t size, const std::string& name);
std::vector<uint8_t> parse_idx_labels(const uint8_t* data, size_t size, const std::string& name);

IdxImages read_idx_images(const std::string& path);
std::vector<uint8_t> read_idx_labels(const std::string& path);

}  // namespace lenet::io
