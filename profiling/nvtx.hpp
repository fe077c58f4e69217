// NVTX ranges in the `lenet` domain, so an Nsight Systems timeline reads like the algorithm (epoch,
// step, h2d, forward, backward, allreduce, update, eval; graph mode's replay, the CPU's
// forward_backward). Header-only; costs a branch when no tool is attached, and nothing with
// NVTX_DISABLE or in a build without CUDA (NVTX comes with the toolkit).
#pragma once
#include "graphs/have_cuda.hpp"
#if LENET_HAVE_CUDA
#include <nvtx3/nvtx3.hpp>
#endif

namespace lenet::profiling {

#if LENET_HAVE_CUDA
struct LenetDomain {
  static constexpr const char* name{"lenet"};
};

using Range = nvtx3::scoped_range_in<LenetDomain>;
#else
struct Range {
  explicit Range(const char*) {}
};
#endif

}  // namespace lenet::profiling
