#include "engine/cuda_probe.hpp"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "graphs/cublas_library.hpp"

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
  std::string blas;
  try {
    const cuda::CublasLibrary& lib = cuda::cublas_library();
    int major = 0, minor = 0, patch = 0;
    const bool ok = lib.GetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
                    lib.GetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
                    lib.GetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS;
    blas = ok ? library_version(size_t(major) * 10000 + size_t(minor) * 100 + size_t(patch), CUBLAS_VERSION)
              : std::string("unknown");
  } catch (const cuda::CudaError& e) {
    blas = std::string("unavailable (") + e.what() + ")";
  }
  return "CUDA runtime " + rt + ", cuDNN " + library_version(cudnnGetVersion(), CUDNN_VERSION) + ", cuBLAS " + blas;
}

}  // namespace lenet::engine
