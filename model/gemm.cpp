#include "model/gemm.hpp"

#include <algorithm>
#include <cstddef>

#ifdef LENET_HAVE_CBLAS
#include <cblas.h>
#endif

namespace lenet::model {

// Blocked so that a panel of B stays in cache while the rows of C sweep over it, and parallel over
// (row, panel) pairs when OpenMP is there: every element of C is computed by one thread in a fixed
// order, so the result does not depend on the thread count.
template <typename T>
void gemm_portable(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
                   int ldb, T beta, T* c, int ldc) {
  constexpr int kColumns = 256;  // columns of C per panel (NN, TN)
  constexpr int kDepth = 1024;   // depth of a dot-product panel (NT, TT)
  auto A = [&](int i, int p) {
    return trans_a ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
  };
  const long long work = static_cast<long long>(m) * n * k;
  const int panels = trans_b ? 1 : (n + kColumns - 1) / kColumns;
  const long long tasks = static_cast<long long>(m) * panels;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (work > (1 << 18))
#endif
  for (long long t = 0; t < tasks; ++t) {
    const int i = static_cast<int>(t % m);
    const int panel = static_cast<int>(t / m);
    T* ci = c + static_cast<size_t>(i) * ldc;
    const int j0 = trans_b ? 0 : panel * kColumns;
    const int j1 = trans_b ? n : std::min(n, j0 + kColumns);
    for (int j = j0; j < j1; ++j) ci[j] = beta == T(0) ? T(0) : beta * ci[j];  // beta 0 ignores NaN in C
    if (!trans_b) {
      // The inner loop runs along rows of B and C: contiguous and vectorisable.
      for (int p = 0; p < k; ++p) {
        const T aip = alpha * A(i, p);
        const T* bp = b + static_cast<size_t>(p) * ldb;
        for (int j = j0; j < j1; ++j) ci[j] += aip * bp[j];
      }
    } else {
      // B transposed: C[i, j] is a dot product of a row of op(A) and a row of B, taken in panels of depth.
      for (int p0 = 0; p0 < k; p0 += kDepth) {
        const int p1 = std::min(k, p0 + kDepth);
        for (int j = 0; j < n; ++j) {
          const T* bj = b + static_cast<size_t>(j) * ldb;
          T sum = T(0);
          if (!trans_a) {
            const T* ai = a + static_cast<size_t>(i) * lda;
            for (int p = p0; p < p1; ++p) sum += ai[p] * bj[p];
          } else {
            for (int p = p0; p < p1; ++p) sum += A(i, p) * bj[p];
          }
          ci[j] += alpha * sum;
        }
      }
    }
  }
  (void)work;
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
void gemm_single_threaded() {
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads(1);
#endif
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
void gemm_single_threaded() {}
const char* gemm_backend_name() { return "portable"; }
#endif

template void gemm_portable<float>(bool, bool, int, int, int, float, const float*, int, const float*, int, float,
                                   float*, int);
template void gemm_portable<double>(bool, bool, int, int, int, double, const double*, int, const double*, int,
                                    double, double*, int);

}  // namespace lenet::model
