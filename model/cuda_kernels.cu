#include "model/cuda_kernels.hpp"

#include "graphs/cuda_check.hpp"
#include "model/softmax_row.hpp"
#include "model/step_tracker.hpp"

namespace lenet::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 32 ? b : 65535 * 32);
}

__global__ void bias_add_rows_kernel(float* y, const float* b, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] += b[i % cols];
}

__global__ void softmax_xent_kernel(const float* logits, const int32_t* labels, int rows, int classes,
                                    float* dlogits, float* row_loss, int32_t* row_correct, const int32_t* valid_rows) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* z = logits + static_cast<size_t>(r) * classes;
  float* dz = dlogits + static_cast<size_t>(r) * classes;
  if (valid_rows != nullptr && r >= *valid_rows) {
    for (int c = 0; c < classes; ++c) dz[c] = 0.f;
    row_loss[r] = 0.f;
    row_correct[r] = 0;
    return;
  }
  const int best = model::argmax_row(z, classes);
  row_loss[r] = model::softmax_xent_row(z, labels[r], classes, best, dz);
  row_correct[r] = best == labels[r] ? 1 : 0;
}

__global__ void count_correct_kernel(const float* logits, const int32_t* labels, int rows, int classes,
                                     int32_t* row_correct) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  row_correct[r] = model::argmax_row(logits + static_cast<size_t>(r) * classes, classes) == labels[r] ? 1 : 0;
}

__global__ void accumulate_stats_kernel(const float* row_loss, const int32_t* row_correct, int rows,
                                        double* loss_sum, unsigned long long* correct, model::StepTracker* tracker) {
  __shared__ double loss[kThreads];
  __shared__ unsigned long long hits[kThreads];
  double l = 0;
  unsigned long long h = 0;
  for (int r = threadIdx.x; r < rows; r += kThreads) {
    l += row_loss[r];
    h += static_cast<unsigned long long>(row_correct[r]);
  }
  loss[threadIdx.x] = l;
  hits[threadIdx.x] = h;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      loss[threadIdx.x] += loss[threadIdx.x + stride];
      hits[threadIdx.x] += hits[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *loss_sum += loss[0];
    *correct += hits[0];
    if (tracker != nullptr) model::track_step(*tracker, loss[0]);
  }
}

// w - scale * g rounded twice (product, then difference), as model::sgd_update computes it: nvcc would
// otherwise fuse the two into one FMA, and the same gradients would give other bits than the CPU's.
__device__ __forceinline__ float sgd_step(float w, float scale, float g) { return __fsub_rn(w, __fmul_rn(scale, g)); }

__global__ void sgd_update_kernel(float* w, const float* g, size_t n, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    w[i] = sgd_step(w[i], scale, g[i]);
}

__global__ void sgd_update_device_scale_kernel(float* w, const float* g, size_t n, const float* scale) {
  const float sc = *scale;
  if (sc == 0.0f) return;  // w - 0 * g is w, even where g is not finite (the graph mode's warm-up step)
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    w[i] = sgd_step(w[i], sc, g[i]);
}

__global__ void add_into_kernel(float* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

}  // namespace

void launch_bias_add_rows(float* y, const float* b, int rows, int cols, cudaStream_t s) {
  if (rows == 0) return;
  bias_add_rows_kernel<<<blocks_for(size_t(rows) * cols), kThreads, 0, s>>>(y, b, rows, cols);
  LENET_CHECK_LAUNCH("bias_add_rows_kernel");
}

void launch_softmax_xent(const float* logits, const int32_t* labels, int rows, int classes, float* dlogits,
                         float* row_loss, int32_t* row_correct, const int32_t* valid_rows, cudaStream_t s) {
  if (rows == 0) return;
  softmax_xent_kernel<<<blocks_for(size_t(rows)), kThreads, 0, s>>>(logits, labels, rows, classes, dlogits, row_loss,
                                                                    row_correct, valid_rows);
  LENET_CHECK_LAUNCH("softmax_xent_kernel");
}

void launch_count_correct(const float* logits, const int32_t* labels, int rows, int classes, int32_t* row_correct,
                          cudaStream_t s) {
  if (rows == 0) return;
  count_correct_kernel<<<blocks_for(size_t(rows)), kThreads, 0, s>>>(logits, labels, rows, classes, row_correct);
  LENET_CHECK_LAUNCH("count_correct_kernel");
}

void launch_accumulate_stats(const float* row_loss, const int32_t* row_correct, int rows, double* loss_sum,
                             unsigned long long* correct, model::StepTracker* tracker, cudaStream_t s) {
  if (rows == 0 && tracker == nullptr) return;
  accumulate_stats_kernel<<<1, kThreads, 0, s>>>(row_loss, row_correct, rows, loss_sum, correct, tracker);
  LENET_CHECK_LAUNCH("accumulate_stats_kernel");
}

void launch_sgd_update(float* w, const float* g, size_t n, float scale, cudaStream_t s) {
  if (n == 0) return;
  sgd_update_kernel<<<blocks_for(n), kThreads, 0, s>>>(w, g, n, scale);
  LENET_CHECK_LAUNCH("sgd_update_kernel");
}

void launch_sgd_update(float* w, const float* g, size_t n, const float* scale, cudaStream_t s) {
  if (n == 0) return;
  sgd_update_device_scale_kernel<<<blocks_for(n), kThreads, 0, s>>>(w, g, n, scale);
  LENET_CHECK_LAUNCH("sgd_update_device_scale_kernel");
}

void launch_add_into(float* dst, const float* src, size_t n, cudaStream_t s) {
  if (n == 0) return;
  add_into_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n);
  LENET_CHECK_LAUNCH("add_into_kernel");
}

}  // namespace lenet::cuda
