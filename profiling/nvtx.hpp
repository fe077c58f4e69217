// NVTX ranges in the `lenet` domain, so an Nsight Systems timeline reads like the algorithm (epoch,
// step, h2d, forward, backward, allreduce, update, eval). Header-only; costs a branch when no tool is
// attached, and nothing with NVTX_DISABLE.
#pragma once
#include <nvtx3/nvtx3.hpp>

namespace lenet::profiling {

struct LenetDomain {
  static constexpr const char* name{"lenet"};
};

using Range = nvtx3::scoped_range_in<LenetDomain>;

}  // namespace lenet::profiling
