// libFuzzer target for the checkpoint loader: any bytes must load or raise CheckpointError. Anything
// else (a crash, a sanitizer report, a leak, another exception escaping) is a bug in engine/checkpoint.cpp.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/checkpoint.hpp"
#include "model/lenet.hpp"

namespace {

void load(const uint8_t* data, size_t size) {
  try {
    lenet::engine::load_checkpoint_bytes(data, size, "fuzz-input");
  } catch (const lenet::engine::CheckpointError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // 1. The bytes as a whole file.
  load(data, size);

  // 2. The bytes' length field and header followed by a zero-filled data section of exactly the size a
  // valid checkpoint has. A real checkpoint is 516 KB, far above the few KB libFuzzer mutates well; this
  // lets small inputs (the corpus holds the valid header alone) reach the offset tiling, the metadata
  // and the float decoding, which the whole-file path only reaches with a complete file.
  if (size < 8) return 0;
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | data[i];
  if (header_length > size - 8) return 0;
  std::vector<uint8_t> file(data, data + 8 + header_length);
  file.resize(file.size() + 4 * lenet::model::kNumParameters, 0);
  load(file.data(), file.size());
  return 0;
}
