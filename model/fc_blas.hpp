// The BLAS calls of a fully connected layer on a GPU, as plain data: cuda_lenet.cpp hands each to cuBLAS,
// and tests/cpu/test_fc_blas.cpp runs the same calls through a reference BLAS against linear_forward and
// linear_backward of cpu_layers.hpp. The argument lists are then checked on any machine, not only where
// a GPU runs them.
//
// The layer is y[rows, out] = x[rows, in] * W[out, in]^T, everything row-major as in cpu_layers.hpp.
// cuBLAS is column-major: a row-major [r, c] matrix is the column-major [c, r] one with leading dimension
// c, its transpose, so each call below computes the transposed product on those views.
#pragma once

namespace lenet::model {

// One SGEMM or SGEMV in column-major BLAS terms.
// GEMM: C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C.
// GEMV: y = alpha * op(A) * x + beta * y, A being m x n as stored; b and c are x and y, ldb and ldc
// their increments; k and trans_b are unused.
// beta = 0 means C is written without being read (the BLAS rule), so stale gradients never leak in.
struct BlasCall {
  enum Kind { kGemm, kGemv };
  Kind kind = kGemm;
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* a = nullptr;
  int lda = 0;
  const float* b = nullptr;
  int ldb = 0;
  float* c = nullptr;
  int ldc = 0;
};

// y^T[out, rows] = W[out, in] * x^T[in, rows]: op(A) = A^T on the column-major [in, out] view of W. No bias.
inline BlasCall fc_forward(int rows, int in, int out, const float* x, const float* w, float* y) {
  return {BlasCall::kGemm, true, false, out, rows, in, 1.0f, 0.0f, w, in, x, in, y, out};
}

// dW[out, in] is the column-major [in, out] = x^T[in, rows] * dy[rows, out] (dy's column-major view is
// [out, rows], hence op(B) = B^T).
inline BlasCall fc_weight_grad(int rows, int in, int out, const float* x, const float* dy, float* dw) {
  return {BlasCall::kGemm, false, true, in, out, rows, 1.0f, 0.0f, x, in, dy, out, dw, in};
}

// db[out] = dy^T[out, rows] * ones[rows]: a GEMV, where cuBLAS has no column sum. `ones` holds at least
// `rows` ones.
inline BlasCall fc_bias_grad(int rows, int out, const float* dy, const float* ones, float* db) {
  return {BlasCall::kGemv, false, false, out, rows, 0, 1.0f, 0.0f, dy, out, ones, 1, db, 1};
}

// dx^T[in, rows] = W^T[in, out] * dy^T[out, rows]: W's column-major view is already [in, out].
inline BlasCall fc_input_grad(int rows, int in, int out, const float* w, const float* dy, float* dx) {
  return {BlasCall::kGemm, false, false, in, rows, out, 1.0f, 0.0f, w, in, dy, out, dx, in};
}

}  // namespace lenet::model
