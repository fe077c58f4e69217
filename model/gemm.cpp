#include "model/gemm.hpp"

#include <cstddef>

#ifdef LENET_HAVE_CBLAS
#include <cblas.h>
#endif

namespace lenet::model {

template <typename T>
void gemm_portable(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
                   int ldb, T beta, T* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    T* ci = c + static_cast<size_t>(i) * ldc;
    for (int j = 0; j < n; ++j) ci[j] = beta == T(0) ? T(0) : beta * ci[j];  // beta 0 ignores NaN in C
  }
  auto A = [&](int i, int p) { return trans_a ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p]; };
  if (!trans_b) {
    // Loop order i, p, j: the inner loop runs along rows of B and C, contiguous and vectorisable.
    for (int i = 0; i < m; ++i) {
      T* ci = c + static_cast<size_t>(i) * ldc;
      for (int p = 0; p < k; ++p) {
        const T aip = alpha * A(i, p);
        const T* bp = b + static_cast<size_t>(p) * ldb;
        for (int j = 0; j < n; ++j) ci[j] += aip * bp[j];
      }
    }
  } else {
    // B transposed: C[i,j] is a dot product of a row of op(A) and a row of B.
    for (int i = 0; i < m; ++i) {
      T* ci = c + static_cast<size_t>(i) * ldc;
      for (int j = 0; j < n; ++j) {
        const T* bj = b + static_cast<size_t>(j) * ldb;
        T sum = T(0);
        if (!trans_a) {
          const T* ai = a + static_cast<size_t>(i) * lda;
          for (int p = 0; p < k; ++p) sum += ai[p] * bj[p];
        } else {
          for (int p = 0; p < k; ++p) sum += A(i, p) * bj[p];
        }
        ci[j] += alpha * sum;
      }
    }
  }
}

#ifdef LENET_HAVE_CBLAS
template <>
void gemm<float>(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return gemm_portable(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);  // BLAS rejects lda 0
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
              b, ldb, beta, c, ldc);
}
template <>
void gemm<double>(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
                  int ldb, double beta, double* c, int ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return gemm_portable(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
              b, ldb, beta, c, ldc);
}
const char* gemm_backend_name() { return "cblas"; }
#else
template <typename T>
void gemm(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta, T* c,
          int ldc) {
  gemm_portable(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
template void gemm<float>(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int);
template void gemm<double>(bool, bool, int, int, int, double, const double*, int, const double*, int, double, double*,
                           int);
const char* gemm_backend_name() { return "portable"; }
#endif

template void gemm_portable<float>(bool, bool, int, int, int, float, const float*, int, const float*, int, float,
                                   float*, int);
template void gemm_portable<double>(bool, bool, int, int, int, double, const double*, int, const double*, int,
                                    double, double*, int);

}  // namespace lenet::model
