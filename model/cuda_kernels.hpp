// Our own small kernels for what cuDNN and cuBLAS do not do: bias add after a GEMM, softmax
// cross-entropy and its gradient, deterministic reduction of per-row statistics, SGD and elementwise
// sums. Host launchers take the stream and check the launch.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "model/step_tracker.hpp"

namespace lenet::cuda {

// y[r, c] += b[c] for r < rows, c < cols (row-major).
void launch_bias_add_rows(float* y, const float* b, int rows, int cols, cudaStream_t s);

// Per row: dlogits = softmax(z) - onehot(label) (the gradient of the summed loss), row_loss =
// logsumexp(z) - z[label], row_correct = 1 when the first maximal logit is the label. When
// `valid_rows` (device memory) is given, rows at or past *valid_rows are masked: zero gradient, loss
// and count, so a graph captured for `rows` rows serves any smaller minibatch.
void launch_softmax_xent(const float* logits, const int32_t* labels, int rows, int classes, float* dlogits,
                         float* row_loss, int32_t* row_correct, const int32_t* valid_rows, cudaStream_t s);

// row_correct[r] = 1 when the first maximal logit of row r is its label (evaluation).
void launch_count_correct(const float* logits, const int32_t* labels, int rows, int classes, int32_t* row_correct,
                          cudaStream_t s);

// Adds sum(row_loss) to *loss_sum and sum(row_correct) to *correct, in a fixed order (one block), so
// two runs give the same bits. With a tracker (device memory), also counts the step in it, rows == 0
// included, and notes it when its loss sum is not finite.
void launch_accumulate_stats(const float* row_loss, const int32_t* row_correct, int rows, double* loss_sum,
                             unsigned long long* correct, model::StepTracker* tracker, cudaStream_t s);

// w -= scale * g, with the scale given by value or read from device memory at run time (graph replay).
void launch_sgd_update(float* w, const float* g, size_t n, float scale, cudaStream_t s);
void launch_sgd_update(float* w, const float* g, size_t n, const float* scale, cudaStream_t s);

// dst += src.
void launch_add_into(float* dst, const float* src, size_t n, cudaStream_t s);

}  // namespace lenet::cuda
