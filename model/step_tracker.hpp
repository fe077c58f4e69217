// Which step of an epoch first had a non-finite loss, tracked where the step's loss is summed: on the
// host in the CPU backend, inside the loss-reduction kernel on a GPU. A diverged GPU run then names its
// step although the host reads the loss only once per epoch. One definition for both, so the CPU tests
// check the rule the kernel runs.
#pragma once
#include <cstdint>

#include "model/host_device.hpp"

namespace lenet::model {

// All zero bytes is the empty state (a memset resets it on a device).
struct StepTracker {
  int32_t steps = 0;               // steps seen since the reset
  int32_t first_bad_plus_one = 0;  // 1 + the index of the first whose loss was not finite; 0: none yet
};

// Counts one step with the given loss (one replica's share, or the whole step's).
LENET_HOST_DEVICE inline void track_step(StepTracker& t, double step_loss) {
  if (t.first_bad_plus_one == 0 && !finite_value(step_loss)) t.first_bad_plus_one = t.steps + 1;
  ++t.steps;
}

// The index of the first step whose loss was not finite, or -1.
inline int64_t first_bad_step(const StepTracker& t) { return int64_t{t.first_bad_plus_one} - 1; }

// The earlier of two such answers (replicas each track their own share of a step).
inline int64_t earlier_bad_step(int64_t a, int64_t b) { return a < 0 ? b : b < 0 ? a : a < b ? a : b; }

}  // namespace lenet::model
