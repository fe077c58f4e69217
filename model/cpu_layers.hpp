// CPU layers of the LeNet, forward and backward side by side, on NCHW tensors of `n` examples. Templated
// on the scalar so the gradient tests can run the same code in double precision. Backward functions
// overwrite their gradient outputs (no accumulation).
#pragma once
#include <cstdint>
#include <vector>

namespace lenet::model {

// Convolution with stride 1 and no padding, as im2col + GEMM over all the rows given (one GEMM per call).
struct ConvShape {
  int n, c, h, w;  // input
  int oc, k;       // output channels, square kernel
  int oh() const { return h - k + 1; }
  int ow() const { return w - k + 1; }
  long long col_rows() const { return static_cast<long long>(c) * k * k; }
  long long col_cols() const { return static_cast<long long>(n) * oh() * ow(); }
};

// y[n, oc, oh, ow] = conv(x, w) + b. `col` receives im2col(x) ([c*k*k, n*oh*ow]) and is kept for the
// backward pass; `tmp` is scratch.
template <typename T>
void conv2d_forward(const ConvShape& s, const T* x, const T* w, const T* b, T* y, std::vector<T>& col,
                    std::vector<T>& tmp);

// From dy and the forward's `col`: dw, db, and dx when not null.
template <typename T>
void conv2d_backward(const ConvShape& s, const T* w, const T* dy, const std::vector<T>& col, T* dw, T* db, T* dx,
                     std::vector<T>& tmp, std::vector<T>& dcol);

// 2x2 average pooling with stride 2 over `planes` planes of h x w; output (h/2) x (w/2), floor.
template <typename T>
void avgpool2_forward(int planes, int h, int w, const T* x, T* y);
template <typename T>
void avgpool2_backward(int planes, int h, int w, const T* dy, T* dx);

template <typename T>
void relu_forward(long long count, T* x);  // in place
// dx = dy where the forward output y > 0, else 0 (dx may alias dy).
template <typename T>
void relu_backward(long long count, const T* y, const T* dy, T* dx);

// y[n, out] = x[n, in] * w[out, in]^T + b.
template <typename T>
void linear_forward(int n, int in, int out, const T* x, const T* w, const T* b, T* y);
template <typename T>
void linear_backward(int n, int in, int out, const T* x, const T* w, const T* dy, T* dw, T* db, T* dx);

// Softmax cross-entropy summed over the n rows; dlogits = softmax - onehot (the gradient of the sum).
// Returns the loss sum; `correct` counts rows whose first maximal logit is the label. Rows at or past
// `valid` (default: all valid) are masked: zero gradient, no loss, not counted, as the CUDA graph mode
// masks the rows a partial minibatch leaves in buffers sized for a full one.
template <typename T>
T softmax_xent(int n, int classes, const T* logits, const int32_t* labels, T* dlogits, int64_t* correct,
               int valid = -1);

}  // namespace lenet::model
