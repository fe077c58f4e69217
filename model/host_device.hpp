// What code shared by the CPU backend and our CUDA kernels needs to compile for both: the
// __host__ __device__ marker (empty in host-only translation units) and the few math functions whose
// spelling differs between host and device code.
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define LENET_HOST_DEVICE __host__ __device__
#else
#define LENET_HOST_DEVICE
#endif

namespace lenet::model {

#if defined(__CUDA_ARCH__)
LENET_HOST_DEVICE inline bool finite_value(double x) { return isfinite(x); }
LENET_HOST_DEVICE inline float exp_of(float x) { return expf(x); }
LENET_HOST_DEVICE inline double exp_of(double x) { return exp(x); }
LENET_HOST_DEVICE inline float log_of(float x) { return logf(x); }
LENET_HOST_DEVICE inline double log_of(double x) { return log(x); }
#else
LENET_HOST_DEVICE inline bool finite_value(double x) { return std::isfinite(x); }
LENET_HOST_DEVICE inline float exp_of(float x) { return std::exp(x); }
LENET_HOST_DEVICE inline double exp_of(double x) { return std::exp(x); }
LENET_HOST_DEVICE inline float log_of(float x) { return std::log(x); }
LENET_HOST_DEVICE inline double log_of(double x) { return std::log(x); }
#endif

}  // namespace lenet::model
