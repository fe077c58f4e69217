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

std::string cuda_library_versions() {
  int runtime = 0;
  const std::string rt = cudaRuntimeGetVersion(&runtime) == cudaSuccess
                             ? std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10)
                             : std::string("unknown");
  const size_t dnn = cudnnGetVersion();  // major * 10000 + minor * 100 + patch for cuDNN 9
  int major = 0, minor = 0, patch = 0;
  const bool blas_ok = cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
                       cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
                       cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS;
  return "CUDA runtime " + rt + ", cuDNN " + std::to_string(dnn / 10000) + "." + std::to_string(dnn / 100 % 100) + "." +
         std::to_string(dnn % 100) + ", cuBLAS " +
         (blas_ok ? std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch)
                  : std::string("unknown"));
}

}  // namespace lenet::engine
