// One-off measurement: the portable GEMM before (commit 2f12c52's loop nest, included verbatim from
// git show) and after (the library's packed, register-tiled one) and OpenBLAS, single-threaded, on the
// GEMM shapes of one 16-row chunk of the CPU backend.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include <cblas.h>
#include "model/gemm.hpp"
namespace old_impl {
#include "old_impl.inc"
}
struct Shape { const char* name; bool ta, tb; int m, n, k; };
int main() {
  const Shape shapes[] = {{"conv2 forward (NN)", false, false, 50, 1296, 500}, {"conv2 weight grad (NT)", false, true, 50, 500, 1296},
                          {"conv2 input grad (TN)", true, false, 500, 1296, 50}, {"conv1 forward (NN)", false, false, 20, 10816, 9},
                          {"conv1 weight grad (NT)", false, true, 20, 9, 10816}, {"fc1 forward (NT)", false, true, 16, 128, 800},
                          {"fc1 weight grad (TN)", true, false, 128, 800, 16}, {"fc1 input grad (NN)", false, false, 16, 800, 128}};
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::printf("| GEMM (m x n x k) | old portable GFLOP/s | new portable GFLOP/s | OpenBLAS GFLOP/s | new / old | OpenBLAS / new |\n|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    std::vector<float> a(size_t(s.m) * s.k), b(size_t(s.k) * s.n), c(size_t(s.m) * s.n);
    for (auto& x : a) x = u(g);
    for (auto& x : b) x = u(g);
    double best[3] = {1e9, 1e9, 1e9};
    for (int rep = 0; rep < 15; ++rep)
      for (int v = 0; v < 3; ++v) {
        const auto t0 = std::chrono::steady_clock::now();
        if (v == 0) old_impl::gemm_portable<float>(s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n);
        if (v == 1) lenet::model::gemm_portable<float>(s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n);
        if (v == 2) cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n);
        best[v] = std::min(best[v], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    const double f = 2.0 * s.m * s.n * s.k / 1e9;
    std::printf("| %s %d x %d x %d | %.1f | %.1f | %.1f | %.2f | %.2f |\n", s.name, s.m, s.n, s.k, f / best[0], f / best[1], f / best[2],
                best[0] / best[1], best[1] / best[2]);
  }
}
