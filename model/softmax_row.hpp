// One row of the softmax cross-entropy, written once for the CPU layer (model/cpu_layers.cpp) and the
// CUDA loss and evaluation kernels (model/cuda_kernels.cu): the CPU tests (finite differences,
// masking, learning) check the arithmetic the kernels run.
#pragma once
#include <cstdint>

#include "model/host_device.hpp"

namespace lenet::model {

// The prediction: the first maximal logit (torch.argmax's rule for ties).
template <typename T>
LENET_HOST_DEVICE inline int argmax_row(const T* z, int classes) {
  int best = 0;
  for (int c = 1; c < classes; ++c)
    if (z[c] > z[best]) best = c;
  return best;
}

// dz = softmax(z) - onehot(label), the gradient of the row's loss, which is returned:
// logsumexp(z) - z[label], both taken relative to z[best], the row's maximum (argmax_row).
template <typename T>
LENET_HOST_DEVICE inline T softmax_xent_row(const T* z, int32_t label, int classes, int best, T* dz) {
  const T zmax = z[best];
  T sum = T(0);
  for (int c = 0; c < classes; ++c) {
    dz[c] = exp_of(z[c] - zmax);
    sum += dz[c];
  }
  for (int c = 0; c < classes; ++c) dz[c] /= sum;
  dz[label] -= T(1);
  return log_of(sum) - (z[label] - zmax);
}

}  // namespace lenet::model
