// The CUDA probe of a build without CUDA (LENET_WITH_CUDA=OFF): no device ever answers, so --backend auto
// trains on the CPU and --backend cuda is refused, each saying why.
#include "engine/cuda_probe.hpp"

namespace lenet::engine {

CudaProbe probe_cuda() {
  CudaProbe p;
  p.status = CudaProbe::kNotBuilt;
  p.status_name = "not built";
  return p;
}

std::string cuda_library_versions() { return "no CUDA"; }

}  // namespace lenet::engine
