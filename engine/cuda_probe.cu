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
// "9.19.0" for 91900: the major * 10000 + minor * 100 + patch encoding of cuDNN 9 and cuBLAS.
std::string dotted(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}
// The library this process loaded, and the headers it was built with where those differ (a cuDNN or
// cuBLAS older than its headers is what to suspect first when a GPU run fails in one of them).
std::string loaded(size_t version, size_t headers) {
  return dotted(version) + (version == headers ? "" : " (built with " + dotted(headers) + ")");
}
}  // namespace

std::string cuda_library_versions() {
  int runtime = 0;
  const std::string rt = cudaRuntimeGetVersion(&runtime) == cudaSuccess
                             ? std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10)
                             : std::string("unknown");
  int major = 0, minor = 0, patch = 0;
  const bool blas_ok = cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
                       cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
                       cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS;
  const size_t blas = static_cast<size_t>(major) * 10000 + static_cast<size_t>(minor) * 100 + static_cast<size_t>(patch);
  return "CUDA runtime " + rt + ", cuDNN " + loaded(cudnnGetVersion(), CUDNN_VERSION) + ", cuBLAS " +
         (blas_ok ? loaded(blas, CUBLAS_VERSION) : std::string("unknown"));
}

}  // namespace lenet::engine
