// Row-major GEMM for the CPU backend: C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, where op
// transposes when asked. OpenBLAS when the build found it, else a portable GEMM.
#pragma once

#include <string>
#include <string_view>

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

// OpenBLAS's name for the kernels it chose for this CPU ("Haswell", "SkylakeX", ...); empty for the
// portable GEMM.
const char* gemm_kernels();

// "CPU GEMM openblas, SkylakeX kernels", or "CPU GEMM portable": what a CPU time was measured with.
std::string gemm_description();

// The OpenBLAS kernels to ask for (OPENBLAS_CORETYPE) instead of those named `chosen`, or nullptr to keep
// them. OpenBLAS takes its generic "Prescott" kernels (SSE3) on an x86 CPU it does not know, such as
// Debian 12's OpenBLAS 0.3.21 on Intel Xeons newer than it: 3.2x to 4.6x slower there than its "SkylakeX"
// kernels (profiling/results/2026-12-01-cpu-2core-openblas-kernels/). Those need AVX-512 F, CD, BW, DQ and VL;
// "Haswell" needs AVX2 and FMA.
const char* better_gemm_kernels(std::string_view chosen, bool avx512, bool avx2_fma);

// better_gemm_kernels for the OpenBLAS linked and this CPU (nullptr with the portable GEMM).
const char* better_gemm_kernels_here();

}  // namespace lenet::model
