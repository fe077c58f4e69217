// libFuzzer target for the IDX reader: any bytes, raw or gzip, must parse or raise DataError. Anything
// else (a crash, a sanitizer report, a leak, another exception escaping) is a bug in io/idx.cpp.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A name without ".gz", so input without the gzip magic reaches the IDX parsers instead of being
  // rejected for its name.
  const std::string name = "fuzz-input";
  std::vector<uint8_t> bytes;
  try {
    bytes = lenet::io::maybe_gunzip(std::vector<uint8_t>(data, data + size), name);
  } catch (const lenet::io::DataError&) {
    return 0;
  }
  // The same bytes through both parsers: an images file is a corrupt labels file and the other way round.
  try {
    lenet::io::parse_idx_images(bytes.data(), bytes.size(), name);
  } catch (const lenet::io::DataError&) {
  }
  try {
    lenet::io::parse_idx_labels(bytes.data(), bytes.size(), name);
  } catch (const lenet::io::DataError&) {
  }
  return 0;
}
