#include "model/cuda_lenet.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <stdexcept>
#include <utility>

#include "model/conv_algos.hpp"
#include "model/cuda_kernels.hpp"
#include "model/fc_blas.hpp"

namespace lenet::cuda {
namespace {

using model::kC1;
using model::kC2;
using model::kClasses;
using model::kFlat;
using model::kHidden;
using model::kInSide;
using model::kK1;
using model::kK2;
using model::kP1;
using model::kP2;
using model::kS1;
using model::kS2;

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // cuBLAS's recommendation for sm_90
constexpr size_t kMaxConvWorkspaceBytes = size_t{256} << 20;

void set4d(cudnnTensorDescriptor_t d, int n, int c, int h, int w) {
  LENET_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
}

// cuDNN's heuristic list in model/conv_algos.hpp's terms.
template <typename Perf>
std::vector<model::ConvAlgoPerf> plain(const Perf* perf, int count) {
  std::vector<model::ConvAlgoPerf> out;
  for (int i = 0; i < count; ++i) {
    const cudnnMathType_t m = perf[i].mathType;
    out.push_back({static_cast<int>(perf[i].algo), perf[i].status == CUDNN_STATUS_SUCCESS,
                   perf[i].determinism == CUDNN_DETERMINISTIC,
                   m == CUDNN_FMA_MATH       ? model::ConvAlgoPerf::kFma
                   : m == CUDNN_DEFAULT_MATH ? model::ConvAlgoPerf::kDefault
                                             : model::ConvAlgoPerf::kTensorOp});
  }
  return out;
}

// Runs a call of model/fc_blas.hpp (host pointer mode: cuBLAS reads alpha and beta before it returns).
// The caller checks the status, so an error names the layer's call and line.
[[nodiscard]] cublasStatus_t run_blas(cublasHandle_t handle, const model::BlasCall& c) {
  const cublasOperation_t op_a = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (c.kind == model::BlasCall::kGemv) {
    return cublas_library().Sgemv(handle, op_a, c.m, c.n, &c.alpha, c.a, c.lda, c.b, c.ldb, &c.beta, c.c, c.ldc);
  }
  return cublas_library().Sgemm(handle, op_a, c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, c.m, c.n, c.k, &c.alpha, c.a,
                                c.lda, c.b, c.ldb, &c.beta, c.c, c.ldc);
}

}  // namespace

DeviceContext::DeviceContext(int device) : device_(device) {
  DeviceGuard guard(device);
  try {
    // cuBLAS first, as when it was linked: cuDNN opens libcublasLt.so by soname too, and the first one
    // loaded serves both (graphs/cublas_library.hpp).
    LENET_CUBLAS_CALL(Create, &cublas_);
    LENET_CUBLAS_CALL(SetMathMode, cublas_, CUBLAS_DEFAULT_MATH);
    LENET_CUDNN_CHECK(cudnnCreate(&cudnn_));
    cublas_workspace_ = DeviceBuffer<char>(device, kCublasWorkspaceBytes);
    bind(nullptr);
  } catch (...) {
    release();
    throw;
  }
}

DeviceContext::~DeviceContext() { release(); }

void DeviceContext::release() noexcept {
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  if (cublas_ != nullptr) cublas_library().Destroy(std::exchange(cublas_, nullptr));
  if (cudnn_ != nullptr) cudnnDestroy(std::exchange(cudnn_, nullptr));
  cudaSetDevice(previous);
}

void DeviceContext::bind(cudaStream_t stream) {
  DeviceGuard guard(device_);
  LENET_CUDNN_CHECK(cudnnSetStream(cudnn_, stream));
  LENET_CUBLAS_CALL(SetStream, cublas_, stream);
  LENET_CUBLAS_CALL(SetWorkspace, cublas_, cublas_workspace_.get(), cublas_workspace_.bytes());
  bound_ = stream;
}

CudaLenet::CudaLenet(DeviceContext& ctx, int max_rows, const std::vector<int>& row_counts)
    : ctx_(ctx), max_rows_(max_rows) {
  if (max_rows < 1) throw std::invalid_argument("CudaLenet: max_rows " + std::to_string(max_rows));
  const int dev = ctx.device();
  const size_t n = static_cast<size_t>(max_rows);
  params_ = DeviceBuffer<float>(dev, model::kNumParameters);
  grads_ = DeviceBuffer<float>(dev, model::kNumParameters);
  x_ = DeviceBuffer<float>(dev, n * model::kInPixels);
  a1_ = DeviceBuffer<float>(dev, n * kC1 * kS1 * kS1);
  da1_ = DeviceBuffer<float>(dev, n * kC1 * kS1 * kS1);
  p1_ = DeviceBuffer<float>(dev, n * kC1 * kP1 * kP1);
  dp1_ = DeviceBuffer<float>(dev, n * kC1 * kP1 * kP1);
  a2_ = DeviceBuffer<float>(dev, n * kC2 * kS2 * kS2);
  da2_ = DeviceBuffer<float>(dev, n * kC2 * kS2 * kS2);
  p2_ = DeviceBuffer<float>(dev, n * kFlat);
  dp2_ = DeviceBuffer<float>(dev, n * kFlat);
  h_ = DeviceBuffer<float>(dev, n * kHidden);
  dh_ = DeviceBuffer<float>(dev, n * kHidden);
  logits_ = DeviceBuffer<float>(dev, n * kClasses);
  dlogits_ = DeviceBuffer<float>(dev, n * kClasses);
  row_loss_ = DeviceBuffer<float>(dev, n);
  labels_ = DeviceBuffer<int32_t>(dev, n);
  row_correct_ = DeviceBuffer<int32_t>(dev, n);
  loss_sum_ = DeviceBuffer<double>(dev, 2);
  correct_ = DeviceBuffer<unsigned long long>(dev, 2);
  tracker_ = DeviceBuffer<model::StepTracker>(dev, 1);
  ones_ = DeviceBuffer<float>(dev, n);
  ones_.upload(std::vector<float>(n, 1.0f).data(), n);  // the bias gradients are GEMVs with a ones vector

  DeviceGuard guard(dev);
  try {
    create_descriptors();
    choose_algorithms(row_counts);
    // On the stream the context is bound to now: a caller that binds another afterwards synchronises
    // first (the graph mode does).
    zero_stats(kTrainStats);
    zero_stats(kEvalStats);
  } catch (...) {  // the destructor does not run for a constructor that throws
    destroy_descriptors();
    throw;
  }
}

void CudaLenet::create_descriptors() {
  for (cudnnTensorDescriptor_t* d : {&x_desc_, &a1_desc_, &p1_desc_, &a2_desc_, &p2_desc_, &h_desc_, &b1_desc_, &b2_desc_})
    LENET_CUDNN_CHECK(cudnnCreateTensorDescriptor(d));
  LENET_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w1_desc_));
  LENET_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w2_desc_));
  for (cudnnConvolutionDescriptor_t* d : {&conv1_fwd_, &conv1_bwf_, &conv2_fwd_, &conv2_bwf_, &conv2_bwd_}) {
    LENET_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(d));
    // Cross-correlation, as torch.nn.Conv2d and the CPU backend compute.
    LENET_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(*d, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  }
  LENET_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool_desc_));
  // Windows never cover padding here (none), so both average modes agree; output size floors (9 -> 4).
  LENET_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_desc_, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                                CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
  LENET_CUDNN_CHECK(cudnnCreateActivationDescriptor(&relu_desc_));
  LENET_CUDNN_CHECK(cudnnSetActivationDescriptor(relu_desc_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  LENET_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w1_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kC1, 1, kK1, kK1));
  LENET_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w2_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kC2, kC1, kK2, kK2));
  set4d(b1_desc_, 1, kC1, 1, 1);
  set4d(b2_desc_, 1, kC2, 1, 1);
  // The shapes of model/lenet.hpp against cuDNN's own output-size formulas, once.
  set_batch_descriptors(1);
  std::array<int, 4> d{};  // n, c, h, w
  auto expect = [&d](const char* layer, const std::array<int, 4>& want) {
    if (d != want) {
      throw std::logic_error(std::string("CudaLenet: cuDNN gives ") + layer + " an output of " + std::to_string(d[1]) +
                             "x" + std::to_string(d[2]) + "x" + std::to_string(d[3]) + ", the model " +
                             std::to_string(want[1]) + "x" + std::to_string(want[2]) + "x" + std::to_string(want[3]));
    }
  };
  LENET_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv1_fwd_, x_desc_, w1_desc_, &d[0], &d[1], &d[2], &d[3]));
  expect("conv1", {1, kC1, kS1, kS1});
  LENET_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(pool_desc_, a1_desc_, &d[0], &d[1], &d[2], &d[3]));
  expect("pool1", {1, kC1, kP1, kP1});
  LENET_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv2_fwd_, p1_desc_, w2_desc_, &d[0], &d[1], &d[2], &d[3]));
  expect("conv2", {1, kC2, kS2, kS2});
  LENET_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(pool_desc_, a2_desc_, &d[0], &d[1], &d[2], &d[3]));
  expect("pool2", {1, kC2, kP2, kP2});
}

CudaLenet::~CudaLenet() { destroy_descriptors(); }

void CudaLenet::destroy_descriptors() noexcept {
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(ctx_.device());
  for (cudnnTensorDescriptor_t* d : {&x_desc_, &a1_desc_, &p1_desc_, &a2_desc_, &p2_desc_, &h_desc_, &b1_desc_, &b2_desc_})
    if (*d != nullptr) cudnnDestroyTensorDescriptor(std::exchange(*d, nullptr));
  for (cudnnFilterDescriptor_t* d : {&w1_desc_, &w2_desc_})
    if (*d != nullptr) cudnnDestroyFilterDescriptor(std::exchange(*d, nullptr));
  for (cudnnConvolutionDescriptor_t* d : {&conv1_fwd_, &conv1_bwf_, &conv2_fwd_, &conv2_bwf_, &conv2_bwd_})
    if (*d != nullptr) cudnnDestroyConvolutionDescriptor(std::exchange(*d, nullptr));
  if (pool_desc_ != nullptr) cudnnDestroyPoolingDescriptor(std::exchange(pool_desc_, nullptr));
  if (relu_desc_ != nullptr) cudnnDestroyActivationDescriptor(std::exchange(relu_desc_, nullptr));
  cudaSetDevice(previous);
}

void CudaLenet::set_batch_descriptors(int rows) {
  if (rows == described_rows_) return;
  set4d(x_desc_, rows, 1, kInSide, kInSide);
  set4d(a1_desc_, rows, kC1, kS1, kS1);
  set4d(p1_desc_, rows, kC1, kP1, kP1);
  set4d(a2_desc_, rows, kC2, kS2, kS2);
  set4d(p2_desc_, rows, kC2, kP2, kP2);
  set4d(h_desc_, rows, kHidden, 1, 1);
  described_rows_ = rows;
}

void CudaLenet::choose_algorithms(const std::vector<int>& row_counts) {
  const std::vector<int> rows = model::trial_rows(row_counts, max_rows_);
  cudnnHandle_t h = ctx_.cudnn();
  size_t workspace = 0;

  // The trial runs read and write the replica's own buffers: zero them first (the start parameters
  // are uploaded later, and whatever a trial leaves is overwritten before it is read).
  for (const DeviceBuffer<float>* b : {&params_, &grads_, &x_, &a1_, &da1_, &p1_, &dp1_, &a2_, &da2_})
    LENET_CUDA_CHECK(cudaMemsetAsync(b->get(), 0, b->bytes(), ctx_.stream()));  // on the trials' stream
  const model::LenetView<float> p = model::view(params_.get());
  const model::LenetView<float> g = model::view(grads_.get());

  // model::choose_conv_algo's policy over one convolution's candidates, with cuDNN calls as its trials.
  // The descriptor's math type is CUDNN_FMA_MATH from the algorithm query on (the callers set it). A
  // failing cuDNN status is a skipped candidate; a fault on the device is sticky and still ends the run,
  // named, at the next checked call.
  auto pick = [&](const char* what, const std::vector<int>& candidates,
                  const std::function<cudnnStatus_t(int, size_t*)>& query,
                  const std::function<cudnnStatus_t(int, void*, size_t)>& run) -> int {
    DeviceBuffer<char> scratch;
    model::ConvAlgoTrials trials;
    trials.workspace = [&](int algo, int r, size_t* bytes) -> std::string {
      set_batch_descriptors(r);
      const cudnnStatus_t rc = query(algo, bytes);
      return rc == CUDNN_STATUS_SUCCESS ? "" : cudnnGetErrorString(rc);
    };
    trials.reserve = [&](size_t bytes) {
      try {
        scratch = DeviceBuffer<char>(ctx_.device(), std::max<size_t>(bytes, 1));
        return true;
      } catch (const CudaError&) {  // the check has cleared the allocation's error
        return false;
      }
    };
    trials.run = [&](int algo, int r, size_t bytes) -> std::string {
      set_batch_descriptors(r);
      const cudnnStatus_t rc = run(algo, scratch.get(), bytes);
      if (rc == CUDNN_STATUS_SUCCESS) return "";
      cudaGetLastError();  // a failed launch inside cuDNN must not surface at our next check
      return cudnnGetErrorString(rc);
    };
    trials.settle = [&] {
      set_batch_descriptors(max_rows_);
      // Before the scratch workspace is freed: trials at other row counts may still run when one fails.
      LENET_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
      scratch = DeviceBuffer<char>();
    };
    const model::ConvAlgoChoice choice = model::choose_conv_algo(candidates, rows, kMaxConvWorkspaceBytes, trials);
    if (choice.algo < 0) {
      throw CudaError(std::string("cuDNN offers no deterministic fp32 algorithm for ") + what + " on cuda:" +
                      std::to_string(ctx_.device()) + " (" + choice.passed_over + ")");
    }
    workspace = std::max(workspace, choice.workspace);
    algorithms_ += std::string(algorithms_.empty() ? "" : ", ") + what + " " + std::to_string(choice.algo);
    return choice.algo;
  };

  // One query per convolution and direction, at the largest row count, then pick() as above.
  constexpr int kMaxAlgos = 16;
  int returned = 0;
  auto forward = [&](const char* what, cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t x, const float* xd,
                     cudnnFilterDescriptor_t w, const float* wd, cudnnTensorDescriptor_t y, float* yd) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
    set_batch_descriptors(max_rows_);
    LENET_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
    LENET_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, kMaxAlgos, &returned, perf));
    return static_cast<cudnnConvolutionFwdAlgo_t>(
        pick(what, model::fp32_deterministic(plain(perf, returned)), [&](int a, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, static_cast<cudnnConvolutionFwdAlgo_t>(a),
                                                         bytes);
        }, [&](int a, void* ws, size_t bytes) {
          return cudnnConvolutionForward(h, &kOne, x, xd, w, wd, conv, static_cast<cudnnConvolutionFwdAlgo_t>(a), ws,
                                         bytes, &kZero, y, yd);
        }));
  };
  auto backward_filter = [&](const char* what, cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t x,
                             const float* xd, cudnnTensorDescriptor_t dy, const float* dyd, cudnnFilterDescriptor_t dw,
                             float* dwd) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
    set_batch_descriptors(max_rows_);
    LENET_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
    LENET_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, dy, conv, dw, kMaxAlgos, &returned, perf));
    return static_cast<cudnnConvolutionBwdFilterAlgo_t>(
        pick(what, model::fp32_deterministic(plain(perf, returned)), [&](int a, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x, dy, conv, dw,
                                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(a), bytes);
        }, [&](int a, void* ws, size_t bytes) {
          return cudnnConvolutionBackwardFilter(h, &kOne, x, xd, dy, dyd, conv,
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(a), ws, bytes, &kZero, dw, dwd);
        }));
  };
  auto backward_data = [&](const char* what, cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t w,
                           const float* wd, cudnnTensorDescriptor_t dy, const float* dyd, cudnnTensorDescriptor_t dx,
                           float* dxd) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
    set_batch_descriptors(max_rows_);
    LENET_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
    LENET_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w, dy, conv, dx, kMaxAlgos, &returned, perf));
    return static_cast<cudnnConvolutionBwdDataAlgo_t>(
        pick(what, model::fp32_deterministic(plain(perf, returned)), [&](int a, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w, dy, conv, dx,
                                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(a), bytes);
        }, [&](int a, void* ws, size_t bytes) {
          return cudnnConvolutionBackwardData(h, &kOne, w, wd, dy, dyd, conv, static_cast<cudnnConvolutionBwdDataAlgo_t>(a),
                                              ws, bytes, &kZero, dx, dxd);
        }));
  };
  fwd1_ = forward("conv1 forward", conv1_fwd_, x_desc_, x_.get(), w1_desc_, p.conv1_w, a1_desc_, a1_.get());
  fwd2_ = forward("conv2 forward", conv2_fwd_, p1_desc_, p1_.get(), w2_desc_, p.conv2_w, a2_desc_, a2_.get());
  bwf1_ = backward_filter("conv1 backward filter", conv1_bwf_, x_desc_, x_.get(), a1_desc_, da1_.get(), w1_desc_,
                          g.conv1_w);
  bwf2_ = backward_filter("conv2 backward filter", conv2_bwf_, p1_desc_, p1_.get(), a2_desc_, da2_.get(), w2_desc_,
                          g.conv2_w);
  bwd2_ = backward_data("conv2 backward data", conv2_bwd_, w2_desc_, p.conv2_w, a2_desc_, da2_.get(), p1_desc_,
                        dp1_.get());
  workspace_ = DeviceBuffer<char>(ctx_.device(), std::max<size_t>(workspace, 1));
  checked_rows_.assign(static_cast<size_t>(max_rows_) + 1, 0);
  for (int r : rows) checked_rows_[static_cast<size_t>(r)] = 1;
}

void CudaLenet::check_rows(int rows) {
  if (rows < 0 || rows > max_rows_) {
    throw std::invalid_argument("CudaLenet: " + std::to_string(rows) + " rows, capacity " + std::to_string(max_rows_));
  }
  if (rows == 0 || checked_rows_[static_cast<size_t>(rows)]) return;
  set_batch_descriptors(rows);
  cudnnHandle_t h = ctx_.cudnn();
  size_t need[5] = {};
  const cudnnStatus_t rc[5] = {
      cudnnGetConvolutionForwardWorkspaceSize(h, x_desc_, w1_desc_, conv1_fwd_, a1_desc_, fwd1_, &need[0]),
      cudnnGetConvolutionForwardWorkspaceSize(h, p1_desc_, w2_desc_, conv2_fwd_, a2_desc_, fwd2_, &need[1]),
      cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x_desc_, a1_desc_, conv1_bwf_, w1_desc_, bwf1_, &need[2]),
      cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p1_desc_, a2_desc_, conv2_bwf_, w2_desc_, bwf2_, &need[3]),
      cudnnGetConvolutionBackwardDataWorkspaceSize(h, w2_desc_, a2_desc_, conv2_bwd_, p1_desc_, bwd2_, &need[4])};
  for (int i = 0; i < 5; ++i) {
    if (rc[i] != CUDNN_STATUS_SUCCESS || need[i] > workspace_.bytes()) {
      throw CudaError("cuDNN algorithms chosen at start-up on cuda:" + std::to_string(ctx_.device()) +
                      " do not support " + std::to_string(rows) + " rows (" + algorithms_ + ")");
    }
  }
  checked_rows_[static_cast<size_t>(rows)] = 1;
}

void CudaLenet::forward(int rows, const float* x) {
  DeviceGuard guard(ctx_.device());
  check_rows(rows);
  if (rows == 0) return;
  if (x == nullptr) x = x_.get();
  set_batch_descriptors(rows);
  cudnnHandle_t h = ctx_.cudnn();
  const model::LenetView<float> p = model::view(params_.get());
  void* ws = workspace_.get();
  const size_t wsb = workspace_.bytes();
  LENET_CUDNN_CHECK(cudnnConvolutionForward(h, &kOne, x_desc_, x, w1_desc_, p.conv1_w, conv1_fwd_, fwd1_, ws,
                                            wsb, &kZero, a1_desc_, a1_.get()));
  LENET_CUDNN_CHECK(cudnnAddTensor(h, &kOne, b1_desc_, p.conv1_b, &kOne, a1_desc_, a1_.get()));
  LENET_CUDNN_CHECK(cudnnActivationForward(h, relu_desc_, &kOne, a1_desc_, a1_.get(), &kZero, a1_desc_, a1_.get()));
  LENET_CUDNN_CHECK(cudnnPoolingForward(h, pool_desc_, &kOne, a1_desc_, a1_.get(), &kZero, p1_desc_, p1_.get()));
  LENET_CUDNN_CHECK(cudnnConvolutionForward(h, &kOne, p1_desc_, p1_.get(), w2_desc_, p.conv2_w, conv2_fwd_, fwd2_, ws,
                                            wsb, &kZero, a2_desc_, a2_.get()));
  LENET_CUDNN_CHECK(cudnnAddTensor(h, &kOne, b2_desc_, p.conv2_b, &kOne, a2_desc_, a2_.get()));
  LENET_CUDNN_CHECK(cudnnActivationForward(h, relu_desc_, &kOne, a2_desc_, a2_.get(), &kZero, a2_desc_, a2_.get()));
  LENET_CUDNN_CHECK(cudnnPoolingForward(h, pool_desc_, &kOne, a2_desc_, a2_.get(), &kZero, p2_desc_, p2_.get()));
  // The fully connected layers' column-major argument lists are model/fc_blas.hpp's, tested on the CPU.
  cublasHandle_t b = ctx_.cublas();
  LENET_CUBLAS_CHECK(run_blas(b, model::fc_forward(rows, kFlat, kHidden, p2_.get(), p.fc1_w, h_.get())));
  launch_bias_add_rows(h_.get(), p.fc1_b, rows, kHidden, ctx_.stream());
  LENET_CUDNN_CHECK(cudnnActivationForward(h, relu_desc_, &kOne, h_desc_, h_.get(), &kZero, h_desc_, h_.get()));
  LENET_CUBLAS_CHECK(run_blas(b, model::fc_forward(rows, kHidden, kClasses, h_.get(), p.fc2_w, logits_.get())));
  launch_bias_add_rows(logits_.get(), p.fc2_b, rows, kClasses, ctx_.stream());
}

void CudaLenet::loss(int rows, Slot slot, const int32_t* labels, const int32_t* valid_rows) {
  DeviceGuard guard(ctx_.device());
  check_rows(rows);
  if (rows > 0) {
    launch_softmax_xent(logits_.get(), labels != nullptr ? labels : labels_.get(), rows, kClasses, dlogits_.get(),
                        row_loss_.get(), row_correct_.get(), valid_rows, ctx_.stream());
  }
  // Training steps are counted even without rows, so every replica's step index is the step's.
  launch_accumulate_stats(row_loss_.get(), row_correct_.get(), rows, loss_sum_.get() + slot, correct_.get() + slot,
                          slot == kTrainStats ? tracker_.get() : nullptr, ctx_.stream());
}

void CudaLenet::backward(int rows, const float* x) {
  DeviceGuard guard(ctx_.device());
  check_rows(rows);
  if (x == nullptr) x = x_.get();
  cudaStream_t s = ctx_.stream();
  if (rows == 0) {
    LENET_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), s));
    return;
  }
  set_batch_descriptors(rows);
  cudnnHandle_t h = ctx_.cudnn();
  cublasHandle_t b = ctx_.cublas();
  const model::LenetView<float> p = model::view(params_.get());
  const model::LenetView<float> g = model::view(grads_.get());
  void* ws = workspace_.get();
  const size_t wsb = workspace_.bytes();

  // fc2 then fc1, each dW, db (a GEMV with the ones vector) and dx, in model::linear_backward's order.
  LENET_CUBLAS_CHECK(run_blas(b, model::fc_weight_grad(rows, kHidden, kClasses, h_.get(), dlogits_.get(), g.fc2_w)));
  LENET_CUBLAS_CHECK(run_blas(b, model::fc_bias_grad(rows, kClasses, dlogits_.get(), ones_.get(), g.fc2_b)));
  LENET_CUBLAS_CHECK(run_blas(b, model::fc_input_grad(rows, kHidden, kClasses, p.fc2_w, dlogits_.get(), dh_.get())));
  // ReLU's input is positive exactly where its output is, so the output stands in for the input.
  LENET_CUDNN_CHECK(cudnnActivationBackward(h, relu_desc_, &kOne, h_desc_, h_.get(), h_desc_, dh_.get(), h_desc_,
                                            h_.get(), &kZero, h_desc_, dh_.get()));
  LENET_CUBLAS_CHECK(run_blas(b, model::fc_weight_grad(rows, kFlat, kHidden, p2_.get(), dh_.get(), g.fc1_w)));
  LENET_CUBLAS_CHECK(run_blas(b, model::fc_bias_grad(rows, kHidden, dh_.get(), ones_.get(), g.fc1_b)));
  LENET_CUBLAS_CHECK(run_blas(b, model::fc_input_grad(rows, kFlat, kHidden, p.fc1_w, dh_.get(), dp2_.get())));
  // pool2 drops conv2's last row and column (9 -> 4); zero them explicitly rather than rely on cuDNN
  // writing gradient elements that no window covers.
  LENET_CUDA_CHECK(cudaMemsetAsync(da2_.get(), 0, size_t(rows) * kC2 * kS2 * kS2 * sizeof(float), s));
  LENET_CUDNN_CHECK(cudnnPoolingBackward(h, pool_desc_, &kOne, p2_desc_, p2_.get(), p2_desc_, dp2_.get(), a2_desc_,
                                         a2_.get(), &kZero, a2_desc_, da2_.get()));
  LENET_CUDNN_CHECK(cudnnActivationBackward(h, relu_desc_, &kOne, a2_desc_, a2_.get(), a2_desc_, da2_.get(), a2_desc_,
                                            a2_.get(), &kZero, a2_desc_, da2_.get()));
  LENET_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &kOne, a2_desc_, da2_.get(), &kZero, b2_desc_, g.conv2_b));
  LENET_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &kOne, p1_desc_, p1_.get(), a2_desc_, da2_.get(), conv2_bwf_,
                                                   bwf2_, ws, wsb, &kZero, w2_desc_, g.conv2_w));
  LENET_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &kOne, w2_desc_, p.conv2_w, a2_desc_, da2_.get(), conv2_bwd_,
                                                 bwd2_, ws, wsb, &kZero, p1_desc_, dp1_.get()));
  LENET_CUDNN_CHECK(cudnnPoolingBackward(h, pool_desc_, &kOne, p1_desc_, p1_.get(), p1_desc_, dp1_.get(), a1_desc_,
                                         a1_.get(), &kZero, a1_desc_, da1_.get()));
  LENET_CUDNN_CHECK(cudnnActivationBackward(h, relu_desc_, &kOne, a1_desc_, a1_.get(), a1_desc_, da1_.get(), a1_desc_,
                                            a1_.get(), &kZero, a1_desc_, da1_.get()));
  LENET_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &kOne, a1_desc_, da1_.get(), &kZero, b1_desc_, g.conv1_b));
  LENET_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &kOne, x_desc_, x, a1_desc_, da1_.get(), conv1_bwf_,
                                                   bwf1_, ws, wsb, &kZero, w1_desc_, g.conv1_w));
}

void CudaLenet::zero_stats(Slot slot) {
  DeviceGuard guard(ctx_.device());
  LENET_CUDA_CHECK(cudaMemsetAsync(loss_sum_.get() + slot, 0, sizeof(double), ctx_.stream()));
  LENET_CUDA_CHECK(cudaMemsetAsync(correct_.get() + slot, 0, sizeof(unsigned long long), ctx_.stream()));
  if (slot == kTrainStats) LENET_CUDA_CHECK(cudaMemsetAsync(tracker_.get(), 0, tracker_.bytes(), ctx_.stream()));
}

model::StepStats CudaLenet::read_stats(Slot slot, int64_t* first_nonfinite_step) const {
  DeviceGuard guard(ctx_.device());
  LENET_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  model::StepStats st;
  st.loss_sum = loss_sum_.download(1, slot)[0];
  st.correct = static_cast<int64_t>(correct_.download(1, slot)[0]);
  if (first_nonfinite_step != nullptr) {
    *first_nonfinite_step = slot == kTrainStats ? model::first_bad_step(tracker_.download()[0]) : -1;
  }
  return st;
}

HostActivations CudaLenet::download_activations(int rows) const {
  DeviceGuard guard(ctx_.device());
  LENET_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  const size_t n = static_cast<size_t>(rows);
  return {a1_.download(n * kC1 * kS1 * kS1), p1_.download(n * kC1 * kP1 * kP1), a2_.download(n * kC2 * kS2 * kS2),
          p2_.download(n * kFlat),           h_.download(n * kHidden),          logits_.download(n * kClasses),
          dlogits_.download(n * kClasses)};
}

}  // namespace lenet::cuda
