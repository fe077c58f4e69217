#include "model/gemm.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

#ifdef LENET_HAVE_CBLAS
#include <cblas.h>
// OpenBLAS's, declared here: the cblas.h found may be another BLAS's (Debian's alternatives), while the
// library linked is OpenBLAS by name.
extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);
#endif

namespace lenet::model {

namespace {

// The portable GEMM packs op(A) and op(B) into slivers of kMR rows and kNR columns, depth-major, and
// computes each kMR x kNR tile of C in registers (the shape GCC 12 keeps there: 6 x 8, 4 x 16 and 6 x 16
// ran 5 to 14 times slower), block by block of kMC rows, kNC columns and kKC depth, which fit the caches.
template <typename T>
struct Blocking {
  static constexpr int kMR = 4;
  static constexpr int kNR = 32 / static_cast<int>(sizeof(T));  // 8 floats, 4 doubles
  static constexpr int kMC = 64, kNC = 256, kKC = 256;
};

// The products of one kMR x kNR tile, each summed in depth order from zero. A function of its own with
// restrict pointers and a full store: that is what lets GCC keep the tile in vector registers.
template <typename T, int MR, int NR>
inline void micro_tile(int kc, const T* __restrict ap, const T* __restrict bp, T* __restrict out) {
  T acc[MR][NR] = {};
  for (int p = 0; p < kc; ++p) {
    const T* bv = bp + p * NR;
    const T* av = ap + p * MR;
    for (int r = 0; r < MR; ++r)
      for (int q = 0; q < NR; ++q) acc[r][q] += av[r] * bv[q];
  }
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < NR; ++q) out[r * NR + q] = acc[r][q];
}

// alpha * (packed A block) * (packed B block), added to C: mc x nc elements, depth kc.
template <typename T>
inline __attribute__((always_inline)) void block_product(int mc, int nc, int kc, T alpha, const T* ap, const T* bp,
                                                         T* c, int ldc) {
  constexpr int MR = Blocking<T>::kMR, NR = Blocking<T>::kNR;
  T tile[MR * NR];
  for (int j = 0; j < nc; j += NR) {
    const T* bs = bp + static_cast<size_t>(j) * kc;
    for (int i = 0; i < mc; i += MR) {
      micro_tile<T, MR, NR>(kc, ap + static_cast<size_t>(i) * kc, bs, tile);
      for (int r = 0; r < std::min(MR, mc - i); ++r) {
        T* cr = c + static_cast<size_t>(i + r) * ldc + j;
        for (int q = 0; q < std::min(NR, nc - j); ++q) cr[q] += alpha * tile[r * NR + q];
      }
    }
  }
}

// On x86-64 Linux with glibc (GCC or Clang; the choice is an ifunc, which glibc's loader resolves)
// compiled twice, for AVX2 (twice as wide) and for the baseline, and chosen at load time by the CPU.
// AVX2 without FMA rounds every product and sum as the baseline does: the same bits either way.
// Not under ThreadSanitizer: the loader runs the instrumented resolver before TSan has started (a crash).
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LENET_THREAD_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(LENET_THREAD_SANITIZER)
#define LENET_GEMM_CLONES
#elif defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && defined(__GLIBC__)
#define LENET_GEMM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LENET_GEMM_CLONES
#endif
LENET_GEMM_CLONES void packed_product(int mc, int nc, int kc, float alpha, const float* ap, const float* bp, float* c,
                                      int ldc) {
  block_product(mc, nc, kc, alpha, ap, bp, c, ldc);
}
LENET_GEMM_CLONES void packed_product(int mc, int nc, int kc, double alpha, const double* ap, const double* bp,
                                      double* c, int ldc) {
  block_product(mc, nc, kc, alpha, ap, bp, c, ldc);
}

// Packs `rows` x `kc` elements (element (r, p) at src[r * row_stride + p * depth_stride]) into slivers
// of W rows, dst[sliver][p][lane], zero past `rows`. Row by row whatever the strides: a sliver's
// source lines stay in cache, and this order measured faster than reading along the unit stride.
template <typename T, int W>
void pack(const T* src, size_t row_stride, size_t depth_stride, int rows, int kc, T* dst) {
  for (int r = 0; r < (rows + W - 1) / W * W; ++r) {
    T* out = dst + static_cast<size_t>(r / W) * kc * W + r % W;
    if (r >= rows) {
      for (int p = 0; p < kc; ++p) out[p * W] = T(0);
      continue;
    }
    const T* in = src + r * row_stride;
    if (depth_stride == 1) {  // a loop of its own: contiguous loads
      for (int p = 0; p < kc; ++p) out[p * W] = in[p];
    } else {
      for (int p = 0; p < kc; ++p) out[p * W] = in[p * depth_stride];
    }
  }
}

}  // namespace

// Parallel over blocks of C when OpenMP is there (inside another parallel region, as in the CPU
// backend, it runs on the calling thread): each element of C is computed by one thread in a fixed
// order, so the result does not depend on the thread count.
template <typename T>
void gemm_portable(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
                   int ldb, T beta, T* c, int ldc) {
  using B = Blocking<T>;
  constexpr int MR = B::kMR, NR = B::kNR, MC = B::kMC, NC = B::kNC, KC = B::kKC;
  if (m <= 0 || n <= 0) return;
  const int col_blocks = (n + NC - 1) / NC;
  const long long blocks = static_cast<long long>((m + MC - 1) / MC) * col_blocks;
  const long long work = static_cast<long long>(m) * n * k;
  // Strides of op(A)'s rows and depth, and of op(B)'s columns and depth.
  const size_t a_rows = trans_a ? 1 : lda, a_depth = trans_a ? lda : 1;
  const size_t b_cols = trans_b ? ldb : 1, b_depth = trans_b ? 1 : ldb;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (work > (1 << 18))
#endif
  for (long long t = 0; t < blocks; ++t) {
    // Packing buffers, zero-padded to whole slivers; one pair per thread, kept between calls.
    thread_local std::vector<T> ap(static_cast<size_t>(MC) * KC), bp(static_cast<size_t>(KC) * NC);
    const int i0 = static_cast<int>(t / col_blocks) * MC, j0 = static_cast<int>(t % col_blocks) * NC;
    const int mc = std::min(MC, m - i0), nc = std::min(NC, n - j0);
    for (int i = i0; i < i0 + mc; ++i) {
      T* ci = c + static_cast<size_t>(i) * ldc;
      for (int j = j0; j < j0 + nc; ++j) ci[j] = beta == T(0) ? T(0) : beta * ci[j];  // beta 0 ignores NaN in C
    }
    for (int p0 = 0; p0 < k; p0 += KC) {
      const int kc = std::min(KC, k - p0);
      pack<T, MR>(a + i0 * a_rows + p0 * a_depth, a_rows, a_depth, mc, kc, ap.data());
      pack<T, NR>(b + j0 * b_cols + p0 * b_depth, b_cols, b_depth, nc, kc, bp.data());
      packed_product(mc, nc, kc, alpha, ap.data(), bp.data(), c + static_cast<size_t>(i0) * ldc + j0, ldc);
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
void gemm_single_threaded() { openblas_set_num_threads(1); }
const char* gemm_backend_name() { return "openblas"; }
const char* gemm_kernels() { return openblas_get_corename(); }
const char* better_gemm_kernels_here() {
#if defined(__x86_64__) || defined(__i386__)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  return better_gemm_kernels(gemm_kernels(), avx512, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
#else
  return nullptr;
#endif
}
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
const char* gemm_kernels() { return ""; }
const char* better_gemm_kernels_here() { return nullptr; }
#endif

std::string gemm_description() {
  const std::string kernels = gemm_kernels();
  return std::string("CPU GEMM ") + gemm_backend_name() + (kernels.empty() ? "" : ", " + kernels + " kernels");
}

const char* better_gemm_kernels(std::string_view chosen, bool avx512, bool avx2_fma) {
  if (chosen != "Prescott") return nullptr;
  return avx512 ? "SkylakeX" : avx2_fma ? "Haswell" : nullptr;
}

template void gemm_portable<float>(bool, bool, int, int, int, float, const float*, int, const float*, int, float,
                                   float*, int);
template void gemm_portable<double>(bool, bool, int, int, int, double, const double*, int, const double*, int,
                                    double, double*, int);

}  // namespace lenet::model
