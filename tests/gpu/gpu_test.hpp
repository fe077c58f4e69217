// Shared by the GPU tests: skip only when no CUDA driver or device answers (cudaGetDeviceCount errors
// 34, 35, 100), fail on any other CUDA error; relative error of two vectors. Where a GPU must be there
// (profiling/gpu-check.sh sets LENET_GPU_REQUIRED=1), no device fails the test instead of skipping it,
// so that a GPU check that tested nothing is not reported as passed.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/cuda_probe.hpp"

#define LENET_REQUIRE_GPU()                                                                              \
  do {                                                                                                  \
    const ::lenet::engine::CudaProbe probe_ = ::lenet::engine::probe_cuda();                            \
    if (probe_.no_device()) {                                                                           \
      const char* required_ = std::getenv("LENET_GPU_REQUIRED");                                        \
      if (required_ != nullptr && std::strcmp(required_, "1") == 0)                                     \
        FAIL() << "LENET_GPU_REQUIRED=1, but no CUDA device answers: " << probe_.describe();            \
      GTEST_SKIP() << "no CUDA device: " << probe_.describe();                                          \
    }                                                                                                   \
    ASSERT_TRUE(probe_.ok()) << probe_.describe();                                                      \
  } while (0)

namespace lenet::testing {

// The bound on a GPU run's parameters against the CPU backend's (or another mode's), tensor by tensor,
// relative to how far that tensor moved (worst_tensor_error in train_steps.hpp): the CPU backend with
// other replica counts stays under 6e-6 (test_equivalence), cuDNN's algorithms add summation orders of
// their own; an error of 1% in one tensor's gradient is caught.
constexpr double kTensorBound = 1e-3;

// ||got - ref|| / ||ref|| in double; 0 when both are zero.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline std::vector<float> slice(const std::vector<float>& v, size_t offset, size_t count) {
  return std::vector<float>(v.begin() + long(offset), v.begin() + long(offset + count));
}

}  // namespace lenet::testing
