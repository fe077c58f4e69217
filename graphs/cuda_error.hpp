// The error of a failed CUDA, cuDNN or cuBLAS call (graphs/cuda_check.hpp throws it), in a header of its
// own so code built without CUDA can name it too.
#pragma once
#include <stdexcept>

namespace lenet::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace lenet::cuda
