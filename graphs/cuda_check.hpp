// Checked CUDA, cuDNN and cuBLAS calls: a failure throws CudaError naming the call, the file and line,
// the device and the library's own error name, which the CLI prints as one line (exit status 1).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "graphs/cublas_library.hpp"
#include "graphs/cuda_error.hpp"

namespace lenet::cuda {

// What the user can do about an error, when there is something to say.
inline constexpr const char* kOutOfDeviceMemoryHint =
    "; out of device memory: try a smaller --batch-size or fewer --replicas per GPU";
inline constexpr const char* kBrokenInstallHint =
    "; the CUDA driver, runtime and cuDNN/cuBLAS libraries do not work together: check the installation, "
    "or use --backend cpu";

inline const char* cuda_hint(cudaError_t rc) {
  switch (rc) {
    case cudaErrorMemoryAllocation: return kOutOfDeviceMemoryHint;
    case cudaErrorInsufficientDriver:
      return "; the CUDA driver is missing or older than this build's CUDA runtime: update it, or use --backend cpu";
    case cudaErrorNoDevice:
    case cudaErrorStubLibrary: return "; no usable GPU: use --backend cpu";
    case cudaErrorInvalidDevice: return "; no such GPU: check --num-gpus and CUDA_VISIBLE_DEVICES";
    case cudaErrorDevicesUnavailable:
      return "; the GPU is busy or in an exclusive compute mode (nvidia-smi -q -d COMPUTE): wait, or use --backend cpu";
    case cudaErrorNoKernelImageForDevice:
      return "; this build has no code for this GPU: build again with -DCMAKE_CUDA_ARCHITECTURES=its compute "
             "capability (nvidia-smi --query-gpu=compute_cap, 9.0 as 90), or use --backend cpu";
    case cudaErrorUnsupportedPtxVersion: return kBrokenInstallHint;
    default: return "";
  }
}

inline const char* cudnn_hint(cudnnStatus_t rc) {
  switch (rc) {
    case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED: return kOutOfDeviceMemoryHint;
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED: return "; out of host memory";
    case CUDNN_STATUS_NOT_INITIALIZED:
    case CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH:
    case CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART:
    case CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH:
    case CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING:
    case CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE:
    case CUDNN_STATUS_LICENSE_ERROR: return kBrokenInstallHint;
    default: return "";
  }
}

inline const char* cublas_hint(cublasStatus_t rc) {
  switch (rc) {
    case CUBLAS_STATUS_ALLOC_FAILED: return kOutOfDeviceMemoryHint;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH: return kBrokenInstallHint;
    default: return "";
  }
}

// "CALL failed on cuda:D at FILE:LINE: LIB WHAT"; the device is left out when none is current.
[[noreturn]] inline void throw_cuda_error(const char* lib, const char* call, const char* file, int line,
                                          const std::string& what) {
  int device = -1;
  const std::string on = cudaGetDevice(&device) == cudaSuccess ? " on cuda:" + std::to_string(device) : "";
  cudaGetLastError();  // clear a non-sticky error (the call's or cudaGetDevice's) so no later call reports it
  throw CudaError(std::string(call) + " failed" + on + " at " + file + ":" + std::to_string(line) + ": " + lib +
                  " " + what);
}

inline void check_cuda(cudaError_t rc, const char* call, const char* file, int line) {
  if (rc == cudaSuccess) return;
  throw_cuda_error("CUDA", call, file, line,
                   std::string(cudaGetErrorName(rc)) + " (" + cudaGetErrorString(rc) + ")" + cuda_hint(rc));
}

inline void check_cudnn(cudnnStatus_t rc, const char* call, const char* file, int line) {
  if (rc == CUDNN_STATUS_SUCCESS) return;
  throw_cuda_error("cuDNN", call, file, line, std::string(cudnnGetErrorString(rc)) + cudnn_hint(rc));
}

inline void check_cublas(cublasStatus_t rc, const char* call, const char* file, int line) {
  if (rc == CUBLAS_STATUS_SUCCESS) return;
  const CublasLibrary& lib = cublas_library();  // open: it returned `rc`
  throw_cuda_error("cuBLAS", call, file, line,
                   std::string(lib.GetStatusName(rc)) + " (" + lib.GetStatusString(rc) + ")" + cublas_hint(rc));
}

// Sets a device for a scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice", __FILE__, __LINE__);
    if (device != previous_) check_cuda(cudaSetDevice(device), "cudaSetDevice", __FILE__, __LINE__);
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// DeviceGuard for destructors and other places that must not throw: errors are ignored (a sticky
// error from earlier work is reported by the next checked call instead).
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int device) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (device != previous_) cudaSetDevice(device);
  }
  ~QuietDeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace lenet::cuda

#define LENET_CUDA_CHECK(call) ::lenet::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define LENET_CUDNN_CHECK(call) ::lenet::cuda::check_cudnn((call), #call, __FILE__, __LINE__)
#define LENET_CUBLAS_CHECK(call) ::lenet::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// A checked call of cuBLAS's cublas<Entry> through the library opened on first use (graphs/cublas_library.hpp),
// named as the API names it: LENET_CUBLAS_CALL(Create, &handle) fails as "cublasCreate(&handle) failed ...".
#define LENET_CUBLAS_CALL(entry, ...)                                                          \
  ::lenet::cuda::check_cublas(::lenet::cuda::cublas_library().entry(__VA_ARGS__),             \
                              "cublas" #entry "(" #__VA_ARGS__ ")", __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here, not at the next call.
#define LENET_CHECK_LAUNCH(name) ::lenet::cuda::check_cuda(cudaGetLastError(), name, __FILE__, __LINE__)
