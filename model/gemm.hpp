// Row-major GEMM for the CPU backend: C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, where op
// transposes when asked. OpenBLAS when the build found it, else a portable GEMM.
#pragma once

namespace lenet::model {

template <typename T>
void gemm(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb,
          T beta, T* c, int ldc);

// The portable fallback, always compiled so tests can compare it with the BLAS path.
template <typename T>
void gemm_portable(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
                   int ldb, T beta, T* c, int ldc);

// Makes every later BLAS call run on its calling thread alone (OpenBLAS's own threads stay idle), for a
// caller that runs several GEMMs in parallel itself. The portable GEMM needs nothing: its OpenMP loop
// inside another parallel region runs on the calling thread.
void gemm_single_threaded();

// "openblas" or "portable".
const char* gemm_backend_name();

}  // namespace lenet::model
