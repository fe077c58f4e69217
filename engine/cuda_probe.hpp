// Whether a CUDA device answers, without ever failing: the CLI's --backend auto and the GPU tests'
// skip rule both start here.
#pragma once
#include <cstddef>
#include <string>

namespace lenet::engine {

struct CudaProbe {
  static constexpr int kNotBuilt = -1;  // the status of a build without CUDA (LENET_WITH_CUDA=OFF)
  int status = 0;         // cudaError_t of cudaGetDeviceCount, or kNotBuilt
  std::string status_name;
  int devices = 0;        // 0 unless status is cudaSuccess
  // No driver or no device: cudaErrorStubLibrary (34), cudaErrorInsufficientDriver (35),
  // cudaErrorNoDevice (100), or no CUDA in this build. Any other error is a real failure, not an absent GPU.
  bool no_device() const { return status == 34 || status == 35 || status == 100 || status == kNotBuilt; }
  bool ok() const { return status == 0 && devices > 0; }
  // e.g. "2 CUDA devices" or "cudaGetDeviceCount: cudaErrorNoDevice (100)"
  std::string describe() const {
    if (status == 0) return std::to_string(devices) + (devices == 1 ? " CUDA device" : " CUDA devices");
    if (status == kNotBuilt) return "this build has no CUDA: it was configured with -DLENET_WITH_CUDA=OFF";
    return "cudaGetDeviceCount: " + status_name + " (" + std::to_string(status) + ")";
  }
};

CudaProbe probe_cuda();

// Versions of the CUDA libraries this binary was built with and loads (queried without a GPU), e.g.
// "CUDA runtime 13.0, cuDNN 9.19.0, cuBLAS 13.1.0", cuDNN and cuBLAS as library_version writes them;
// "no CUDA" in a build without it. Opens cuBLAS (graphs/cublas_library.hpp), or says why it cannot:
// "cuBLAS unavailable (cannot load cuBLAS (...): ...)".
std::string cuda_library_versions();

// In CUDA builds: "9.19.0" for a library that reports 91900 (major * 10000 + minor * 100 + patch, as cuDNN 9
// and cuBLAS encode their versions), then " (built with X.Y.Z)" where the headers the build used say
// another version: a cuDNN or cuBLAS older than its headers is what to suspect first when a GPU run fails
// in one of them.
std::string library_version(size_t loaded, size_t headers);

}  // namespace lenet::engine
