// Whether a CUDA device answers, without ever failing: the CLI's --backend auto and the GPU tests'
// skip rule both start here.
#pragma once
#include <string>

namespace lenet::engine {

struct CudaProbe {
  int status = 0;         // cudaError_t of cudaGetDeviceCount
  std::string status_name;
  int devices = 0;        // 0 unless status is cudaSuccess
  // No driver or no device: cudaErrorStubLibrary (34), cudaErrorInsufficientDriver (35),
  // cudaErrorNoDevice (100). Any other error is a real failure, not an absent GPU.
  bool no_device() const { return status == 34 || status == 35 || status == 100; }
  bool ok() const { return status == 0 && devices > 0; }
  std::string describe() const;  // e.g. "2 CUDA devices" or "cudaGetDeviceCount: cudaErrorNoDevice (100)"
};

CudaProbe probe_cuda();

// Versions of the CUDA libraries this binary was built with and loads (queried without a GPU), e.g.
// "CUDA runtime 13.0, cuDNN 9.19.0, cuBLAS 13.1.0".
std::string cuda_library_versions();

}  // namespace lenet::engine
