// Rotation of the graph mode's staging buffers, as plain arithmetic the tests check without a GPU: step
// k stages its minibatch in slot k mod S, and before the host refills that slot the copy of step k - S
// (the last to read it) must have finished, as must the replay of step k - S that read the slot's
// device copy.
#pragma once
#include <cstdint>
#include <stdexcept>

namespace lenet::engine {

class StagingSlots {
 public:
  explicit StagingSlots(int slots) : slots_(slots) {
    if (slots < 2) throw std::invalid_argument("StagingSlots: at least two slots, or copies cannot overlap compute");
  }
  int slots() const { return slots_; }
  int slot(uint64_t step) const { return static_cast<int>(step % static_cast<uint64_t>(slots_)); }
  // The earlier step that used the same slot, or -1 for the first S steps.
  int64_t previous_user(uint64_t step) const {
    return step >= static_cast<uint64_t>(slots_) ? static_cast<int64_t>(step) - slots_ : -1;
  }

 private:
  int slots_;
};

// What one replica's captured step reads from device memory at replay: its row count (rows past it
// are masked) and the SGD scale lr / (rows of the whole minibatch).
struct StepParams {
  int32_t rows = 0;
  float scale = 0.0f;
};

inline StepParams step_params(int replica_rows, int minibatch_rows, float lr) {
  if (minibatch_rows < 1) throw std::invalid_argument("step_params: empty minibatch");
  return {replica_rows, lr / static_cast<float>(minibatch_rows)};
}

}  // namespace lenet::engine
