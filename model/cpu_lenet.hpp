// The whole LeNet on the CPU for one replica: forward, summed softmax cross-entropy, backward into a
// flat gradient buffer. Knows nothing of replicas; the engine gives it rows and buffers.
#pragma once
#include <cstdint>
#include <vector>

#include "model/cpu_layers.hpp"
#include "model/lenet.hpp"

namespace lenet::model {

struct StepStats {
  double loss_sum = 0;  // summed over the rows
  int64_t correct = 0;  // rows whose argmax is the label
};

template <typename T>
class CpuLenet {
 public:
  // Gradient of the summed loss over `rows` examples (x: rows * 784 floats in [0, 1]) written into
  // `grads` (kNumParameters, overwritten). rows may be 0: the gradient is then zero. Rows at or past
  // `valid_rows` (default: all) are computed but masked out of loss and gradient (softmax_xent).
  StepStats forward_backward(const T* params, const T* x, const int32_t* labels, int rows, T* grads,
                             int valid_rows = -1);
  // Forward and loss only; logits() holds the rows * 10 logits afterwards.
  StepStats forward(const T* params, const T* x, const int32_t* labels, int rows, int valid_rows = -1);
  const std::vector<T>& logits() const { return logits_; }
  // Activations of the last forward (post-ReLU where the layer has one) and the loss gradient, for the
  // layer-by-layer comparison with the CUDA backend.
  const std::vector<T>& a1() const { return a1_; }
  const std::vector<T>& p1() const { return p1_; }
  const std::vector<T>& a2() const { return a2_; }
  const std::vector<T>& p2() const { return p2_; }
  const std::vector<T>& hidden() const { return h_; }
  const std::vector<T>& dlogits() const { return dlogits_; }

 private:
  void run_forward(const LenetView<const T>& p, const T* x, int rows);
  // Activations, kept for the backward pass (post-ReLU where the layer has one).
  std::vector<T> a1_, p1_, a2_, p2_, h_, logits_;
  // im2col buffers of both convolutions, kept from forward to backward, and scratch.
  std::vector<T> col1_, col2_, tmp_, dcol_;
  // Gradients of the activations.
  std::vector<T> dlogits_, dh_, dp2_, da2_, dp1_, da1_;
};

extern template class CpuLenet<float>;
extern template class CpuLenet<double>;

}  // namespace lenet::model
