// Whole files as bytes, for the tests that write malformed inputs and read outputs back.
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace lenet::testing {

using Bytes = std::vector<uint8_t>;

inline Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << path;
}

// Safetensors files (a checkpoint): a little-endian 64-bit header length, the JSON header, the data.
inline uint64_t le64(const Bytes& b, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{b.at(at + i)} << (8 * i);
  return v;
}

// A checkpoint taken apart by the format's rules alone: length, header text, data section.
struct Parts {
  uint64_t header_length = 0;
  std::string header_text;
  Bytes data;
};

inline Parts split(const Bytes& file) {
  Parts p;
  p.header_length = le64(file, 0);
  p.header_text.assign(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(p.header_length));
  p.data.assign(file.begin() + 8 + static_cast<std::ptrdiff_t>(p.header_length), file.end());
  return p;
}

inline Bytes join(const std::string& header_text, const Bytes& data) {
  Bytes b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(uint64_t{header_text.size()} >> (8 * i)));
  b.insert(b.end(), header_text.begin(), header_text.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// IDX files (big-endian header, then the bytes): images with a pattern pixel_value gives, and labels.
inline void put_be32(Bytes& b, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(v >> shift));
}

inline uint8_t pixel_value(uint32_t image, uint32_t p) { return static_cast<uint8_t>(image * 31 + p * 7); }

inline Bytes idx_images(uint32_t count, uint32_t rows = 28, uint32_t cols = 28, uint32_t magic = 0x803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t i = 0; i < count; ++i)
    for (uint32_t p = 0; p < rows * cols; ++p) b.push_back(pixel_value(i, p));
  return b;
}

inline Bytes idx_labels(const Bytes& labels, uint32_t magic = 0x801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// The four IDX files of a small data set in `folder` (which exists): `train` and `test` examples, all of
// label 3.
inline void write_data_set(const std::string& folder, uint32_t train, uint32_t test) {
  for (const auto& [prefix, count] : {std::pair<std::string, uint32_t>{"train", train}, {"t10k", test}}) {
    write_bytes(folder + "/" + prefix + "-images-idx3-ubyte", idx_images(count));
    write_bytes(folder + "/" + prefix + "-labels-idx1-ubyte", idx_labels(Bytes(count, 3)));
  }
}

}  // namespace lenet::testing
