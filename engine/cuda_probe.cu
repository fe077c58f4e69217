#include "engine/cuda_probe.hpp"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace lenet::engine {

CudaProbe probe_cuda() {
  CudaProbe p;
  int count = 0;  // left untouched on error
  const cudaError_t rc = cudaGetDeviceCount(&count);
  p.status = static_cast<int>(rc);
  p.status_name = cudaGetErrorName(rc);
  p.devices = rc == cudaSuccess ? count : 0;
  if (rc != cudaSuccess) cudaGetLastError();  // do not leave a sticky "last error" for later calls
  return p;
}

namespace {
std::string dotted(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}
}  // namespace

std::string library_version(size_t loaded, size_t headers) {
  return dotted(loaded) + (loaded == headers ? "" : " (built with " + dotted(headers) + ")");
}

std::string cuda_library_versions() {
  int runtime = 0;
  const std::string rt = cudaRuntimeGetVersion(&runtime) == cudaSuccess
                             ? std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10)
                             : std::string("unknown");
  int major = 0, minor = 0, patch = 0;
  const bool blas_ok = cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
                       cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
                       cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS;
  const size_t blas = size_t(major) * 10000 + size_t(minor) * 100 + size_t(patch);
  return "CUDA runtime " + rt + ", cuDNN " + library_version(cudnnGetVersion(), CUDNN_VERSION) + ", cuBLAS " +
         (blas_ok ? library_version(blas, CUBLAS_VERSION) : std::string("unknown"));
}

}  // namespace lenet::engine
