// One replica of the LeNet on one GPU: parameters, gradients, activations and cuDNN/cuBLAS state, with
// forward, loss and backward enqueued on a stream as separate library calls and kernels. Knows nothing
// of other replicas; the engine moves data between them.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/cpu_lenet.hpp"
#include "model/cuda_memory.hpp"
#include "model/lenet.hpp"
#include "model/step_tracker.hpp"

namespace lenet::cuda {

// The cuDNN and cuBLAS handles of one device, created once: naive mode shares one per GPU among the
// replicas on it, graph mode gives every replica its own (replicas sharing a GPU run concurrently).
// cuBLAS gets its own workspace, set again after every stream change (cublasSetStream resets it).
class DeviceContext {
 public:
  explicit DeviceContext(int device);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudaStream_t stream() const { return bound_; }
  // Binds both handles to `stream` (cudnnSetStream, cublasSetStream, cublasSetWorkspace).
  void bind(cudaStream_t stream);

 private:
  void release() noexcept;
  int device_;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer<char> cublas_workspace_;
  cudaStream_t bound_ = nullptr;
};

// Forward activations, downloaded for tests (layer-by-layer comparison with the CPU backend).
struct HostActivations {
  std::vector<float> a1, p1, a2, p2, h, logits, dlogits;
};

class CudaLenet {
 public:
  // Capacity for `max_rows` rows. `row_counts` lists every row count the replica will run (full and
  // partial minibatches, evaluation batches; none above max_rows): convolution algorithms are chosen
  // once here, deterministic and restricted to FMA math (full fp32, no TF32), so that every listed
  // count is supported, and one workspace is sized for the largest need.
  CudaLenet(DeviceContext& ctx, int max_rows, const std::vector<int>& row_counts);
  ~CudaLenet();
  CudaLenet(const CudaLenet&) = delete;
  CudaLenet& operator=(const CudaLenet&) = delete;

  int device() const { return ctx_.device(); }
  int max_rows() const { return max_rows_; }
  float* params() { return params_.get(); }
  float* grads() { return grads_.get(); }
  float* x() { return x_.get(); }  // max_rows * 784 floats, the replica's rows of the minibatch
  int32_t* labels() { return labels_.get(); }
  const DeviceBuffer<float>& param_buffer() const { return params_; }
  const DeviceBuffer<float>& grad_buffer() const { return grads_; }

  // Enqueued on the stream the context is bound to. rows may be 0: forward does nothing, loss only
  // counts the step for the tracker, and backward zeroes the gradient. Inputs default to the replica's
  // own x() and labels(); the graph mode passes its staging buffers instead.
  void forward(int rows, const float* x = nullptr);
  // Training and evaluation count into separate accumulators.
  enum Slot { kTrainStats = 0, kEvalStats = 1 };
  // dlogits, and the loss sum and correct count added to `slot`. With `valid_rows` (device memory),
  // rows at or past *valid_rows are masked out (see launch_softmax_xent).
  void loss(int rows, Slot slot = kTrainStats, const int32_t* labels = nullptr, const int32_t* valid_rows = nullptr);
  void backward(int rows, const float* x = nullptr);  // gradients of the summed loss, overwritten
  const float* logits() const { return logits_.get(); }
  void zero_stats(Slot slot);  // both slots start at zero
  // Waits for the context's stream only: work captured into a graph launched on another stream must be
  // waited for by the caller first. For kTrainStats, `first_nonfinite_step` (if given) receives the
  // index, among the steps since zero_stats, of the first whose loss on this replica was not finite, or -1.
  model::StepStats read_stats(Slot slot, int64_t* first_nonfinite_step = nullptr) const;

  HostActivations download_activations(int rows) const;  // waits as read_stats does
  // The chosen convolution algorithms, for the log.
  const std::string& algorithms() const { return algorithms_; }

 private:
  void create_descriptors();
  void destroy_descriptors() noexcept;
  void set_batch_descriptors(int rows);
  void choose_algorithms(const std::vector<int>& row_counts);
  // Checks once per row count not announced at construction that the chosen algorithms support it
  // within the workspace, and throws CudaError if not (never a silent wrong answer).
  void check_rows(int rows);

  DeviceContext& ctx_;
  int max_rows_;
  DeviceBuffer<float> params_, grads_, x_, a1_, p1_, a2_, p2_, h_, logits_, dlogits_, dh_, dp2_, da2_, dp1_, da1_;
  DeviceBuffer<float> ones_, row_loss_;
  DeviceBuffer<int32_t> labels_, row_correct_;
  DeviceBuffer<double> loss_sum_;
  DeviceBuffer<unsigned long long> correct_;
  DeviceBuffer<model::StepTracker> tracker_;
  DeviceBuffer<char> workspace_;

  cudnnTensorDescriptor_t x_desc_ = nullptr, a1_desc_ = nullptr, p1_desc_ = nullptr, a2_desc_ = nullptr,
                          p2_desc_ = nullptr, h_desc_ = nullptr, b1_desc_ = nullptr, b2_desc_ = nullptr;
  cudnnFilterDescriptor_t w1_desc_ = nullptr, w2_desc_ = nullptr;
  // One convolution descriptor per direction, so each can carry the math type of its own algorithm.
  cudnnConvolutionDescriptor_t conv1_fwd_ = nullptr, conv1_bwf_ = nullptr, conv2_fwd_ = nullptr, conv2_bwf_ = nullptr,
                               conv2_bwd_ = nullptr;
  cudnnPoolingDescriptor_t pool_desc_ = nullptr;
  cudnnActivationDescriptor_t relu_desc_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd1_{}, fwd2_{};
  cudnnConvolutionBwdFilterAlgo_t bwf1_{}, bwf2_{};
  cudnnConvolutionBwdDataAlgo_t bwd2_{};
  int described_rows_ = -1;
  std::vector<char> checked_rows_;
  std::string algorithms_;
};

}  // namespace lenet::cuda
