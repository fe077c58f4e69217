// The cuBLAS argument lists of the fully connected layers (model/fc_blas.hpp), run through a column-major
// reference BLAS written from the BLAS definition (not model/gemm.cpp), against linear_forward and
// linear_backward of the CPU backend. Where this passes, the GPU can only differ by what cuBLAS itself
// does with valid arguments and by run_blas in model/cuda_lenet.cpp, which hands each field to the
// cublasSgemm or cublasSgemv argument of the same name.
//
// Bound: the reference multiplies float inputs exactly in double (24 + 24 bits fit in 53), sums at most
// 800 products in double (relative error ~ 800 * 1.1e-16 times the cancellation ratio, < 1e-11 for these
// random inputs) and rounds each output once to float: at most 2^-24 = 6e-8 relative per element, so at
// most 6e-8 in ||out - ref|| / ||ref||. The CPU layers run in double on the same float-valued inputs, off
// by the same < 1e-11. 1e-6 is therefore never reached by rounding; a swapped transpose, shape or leading
// dimension mixes unrelated random numbers and gives errors of order 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/cpu_layers.hpp"
#include "model/fc_blas.hpp"
#include "model/lenet.hpp"

namespace {

using lenet::model::BlasCall;

constexpr double kBound = 1e-6;
constexpr float kUnread = std::numeric_limits<float>::quiet_NaN();  // in outputs and padding: must not be read

// The buffers a call may touch, so an argument list that reaches past one fails instead of reading
// or writing outside it.
using Buffers = std::vector<const std::vector<float>*>;

// Elements from p to the end of the buffer holding it; 0 when no buffer holds it.
size_t room(const Buffers& buffers, const float* p) {
  const std::less<const float*> before{};
  for (const std::vector<float>* b : buffers) {
    const float* begin = b->data();
    const float* end = begin + b->size();
    if (!before(p, begin) && before(p, end)) return static_cast<size_t>(end - p);
  }
  return 0;
}

// Elements spanned by a column-major rows x cols matrix with leading dimension ld, or a vector.
size_t matrix_span(int rows, int cols, int ld) { return rows == 0 || cols == 0 ? 0 : size_t(ld) * (cols - 1) + rows; }
size_t vector_span(int len, int inc) { return len == 0 ? 0 : size_t(std::abs(inc)) * (len - 1) + 1; }

// The argument checks of the reference BLAS (xerbla); cuBLAS answers CUBLAS_STATUS_INVALID_VALUE to the
// same. Empty when the call is valid.
std::string invalid_argument(const BlasCall& c) {
  if (c.m < 0 || c.n < 0 || c.k < 0) return "a negative dimension";
  if (c.kind == BlasCall::kGemv) {
    if (c.lda < std::max(1, c.m)) return "lda < max(1, m)";
    if (c.ldb == 0) return "incx = 0";
    if (c.ldc == 0) return "incy = 0";
    return "";
  }
  if (c.lda < std::max(1, c.trans_a ? c.k : c.m)) return "lda < max(1, rows of A as stored)";
  if (c.ldb < std::max(1, c.trans_b ? c.n : c.k)) return "ldb < max(1, rows of B as stored)";
  if (c.ldc < std::max(1, c.m)) return "ldc < max(1, m)";
  return "";
}

// Element i of a vector of length len with increment inc (a negative increment walks it backwards).
size_t at(int i, int len, int inc) { return inc > 0 ? size_t(i) * inc : size_t(len - 1 - i) * size_t(-inc); }

// Runs `c` as column-major BLAS defines it, with each sum in double and rounded once. beta = 0 means the
// output is not read (so NaN there stays out), and an empty GEMV leaves y alone, as in BLAS.
void run_reference(const BlasCall& c, const Buffers& buffers) {
  ASSERT_EQ(invalid_argument(c), "");
  auto finish = [&](double sum, float& out) {
    double r = double(c.alpha) * sum;
    if (c.beta != 0.0f) r += double(c.beta) * out;
    out = static_cast<float>(r);
  };
  if (c.kind == BlasCall::kGemv) {
    if (c.m == 0 || c.n == 0) return;
    const int len_x = c.trans_a ? c.m : c.n, len_y = c.trans_a ? c.n : c.m;
    ASSERT_LE(matrix_span(c.m, c.n, c.lda), room(buffers, c.a)) << "A";
    ASSERT_LE(vector_span(len_x, c.ldb), room(buffers, c.b)) << "x";
    ASSERT_LE(vector_span(len_y, c.ldc), room(buffers, c.c)) << "y";
    for (int i = 0; i < len_y; ++i) {
      double sum = 0;
      for (int l = 0; l < len_x; ++l) {
        const float a = c.trans_a ? c.a[l + size_t(i) * c.lda] : c.a[i + size_t(l) * c.lda];
        sum += double(a) * c.b[at(l, len_x, c.ldb)];
      }
      finish(sum, c.c[at(i, len_y, c.ldc)]);
    }
    return;
  }
  ASSERT_LE(c.trans_a ? matrix_span(c.k, c.m, c.lda) : matrix_span(c.m, c.k, c.lda), room(buffers, c.a)) << "A";
  ASSERT_LE(c.trans_b ? matrix_span(c.n, c.k, c.ldb) : matrix_span(c.k, c.n, c.ldb), room(buffers, c.b)) << "B";
  ASSERT_LE(matrix_span(c.m, c.n, c.ldc), room(buffers, c.c)) << "C";
  for (int j = 0; j < c.n; ++j) {
    for (int i = 0; i < c.m; ++i) {
      double sum = 0;
      for (int l = 0; l < c.k; ++l) {
        const float a = c.trans_a ? c.a[l + size_t(i) * c.lda] : c.a[i + size_t(l) * c.lda];
        const float b = c.trans_b ? c.b[j + size_t(l) * c.ldb] : c.b[l + size_t(j) * c.ldb];
        sum += double(a) * b;
      }
      finish(sum, c.c[i + size_t(j) * c.ldc]);
    }
  }
}

std::vector<float> random_floats(size_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double rel_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::sqrt(den);  // NaN, and so a failure, where an output was never written
}

// The reference itself against products worked by hand, for every transposition and with padded
// leading dimensions, so it cannot share a convention mistake with the plan it checks.
// A = [1 2 3; 4 5 6], B = [1 0; 0 1; 2 0], A * B = [7 2; 16 5].
TEST(ReferenceBlas, GemmMatchesHandWorkedProductForEveryTransposition) {
  const float u = kUnread;
  const std::vector<float> a = {1, 4, u, 2, 5, u, 3, 6, u};    // A, lda 3
  const std::vector<float> a_t = {1, 2, 3, 4, 5, 6};           // A^T, lda 3
  const std::vector<float> b = {1, 0, 2, 0, 1, 0};             // B, ldb 3
  const std::vector<float> b_t = {1, 0, u, 0, 1, u, 2, 0, u};  // B^T, ldb 3
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      std::vector<float> c(6, u);  // ldc 3
      const BlasCall call{BlasCall::kGemm, ta, tb, 2, 2, 3, 1.0f, 0.0f, ta ? a_t.data() : a.data(), 3,
                          tb ? b_t.data() : b.data(), 3, c.data(), 3};
      ASSERT_NO_FATAL_FAILURE(run_reference(call, {&a, &a_t, &b, &b_t, &c}));
      EXPECT_EQ(c[0], 7.0f);
      EXPECT_EQ(c[1], 16.0f);
      EXPECT_EQ(c[3], 2.0f);
      EXPECT_EQ(c[4], 5.0f);
      EXPECT_TRUE(std::isnan(c[2]) && std::isnan(c[5])) << "ldc padding written";
    }
  }
}

TEST(ReferenceBlas, GemvMatchesHandWorkedProductBothWays) {
  const float u = kUnread;
  const std::vector<float> a = {1, 4, u, 2, 5, u, 3, 6, u};  // A above, lda 3
  const std::vector<float> x = {1, u, 1, u, 1};              // increment 2
  std::vector<float> y(2, u);
  ASSERT_NO_FATAL_FAILURE(run_reference({BlasCall::kGemv, false, false, 2, 3, 0, 1.0f, 0.0f, a.data(), 3, x.data(), 2,
                                         y.data(), 1}, {&a, &x, &y}));
  EXPECT_EQ(y, (std::vector<float>{6, 15}));
  std::vector<float> yt(3, u);
  ASSERT_NO_FATAL_FAILURE(run_reference({BlasCall::kGemv, true, false, 2, 3, 0, 1.0f, 0.0f, a.data(), 3, x.data(), 2,
                                         yt.data(), 1}, {&a, &x, &yt}));
  EXPECT_EQ(yt, (std::vector<float>{5, 7, 9}));
}

TEST(ReferenceBlas, RejectsLeadingDimensionsBlasRejects) {
  BlasCall c{BlasCall::kGemm, true, false, 10, 3, 128, 1.0f, 0.0f, nullptr, 128, nullptr, 128, nullptr, 10};
  EXPECT_EQ(invalid_argument(c), "");
  c.lda = 10;  // A^T is 10 x 128, so A is stored 128 x 10
  EXPECT_NE(invalid_argument(c), "");
  c.lda = 128;
  c.ldc = 3;
  EXPECT_NE(invalid_argument(c), "");
}

struct FcLayer {
  const char* name;
  int in, out;
};

// Both LeNet fully connected layers at row counts that differ from every width (so no product is square
// and a transposed operand cannot fit by accident), from one row up to a full minibatch.
TEST(FcBlas, EveryCallMatchesTheCpuLayerForBothLayersAndSeveralRowCounts) {
  using namespace lenet::model;
  std::mt19937 gen(11);
  for (const FcLayer layer : {FcLayer{"fc1", kFlat, kHidden}, FcLayer{"fc2", kHidden, kClasses}}) {
    for (const int rows : {1, 3, 64, 256}) {
      SCOPED_TRACE(std::string(layer.name) + " with " + std::to_string(rows) + " rows");
      const int in = layer.in, out = layer.out;
      const std::vector<float> x = random_floats(size_t(rows) * in, gen), w = random_floats(size_t(out) * in, gen),
                               dy = random_floats(size_t(rows) * out, gen), ones(size_t(rows), 1.0f);
      // Exactly as large as the layer needs, NaN until written: a call that writes too little, reads its
      // output (beta != 0) or reaches past a buffer fails.
      std::vector<float> y(size_t(rows) * out, kUnread), dw(w.size(), kUnread), db(size_t(out), kUnread),
          dx(x.size(), kUnread);
      const Buffers buffers = {&x, &w, &dy, &ones, &y, &dw, &db, &dx};
      for (const BlasCall& c : {fc_forward(rows, in, out, x.data(), w.data(), y.data()),
                                fc_weight_grad(rows, in, out, x.data(), dy.data(), dw.data()),
                                fc_bias_grad(rows, out, dy.data(), ones.data(), db.data()),
                                fc_input_grad(rows, in, out, w.data(), dy.data(), dx.data())}) {
        ASSERT_NO_FATAL_FAILURE(run_reference(c, buffers));
      }

      const std::vector<double> xd = widen(x), wd = widen(w), dyd = widen(dy), zero_bias(size_t(out), 0.0);
      std::vector<double> y_ref(y.size()), dw_ref(dw.size()), db_ref(db.size()), dx_ref(dx.size());
      linear_forward(rows, in, out, xd.data(), wd.data(), zero_bias.data(), y_ref.data());
      linear_backward(rows, in, out, xd.data(), wd.data(), dyd.data(), dw_ref.data(), db_ref.data(), dx_ref.data());
      EXPECT_LT(rel_error(y, y_ref), kBound) << "forward";
      EXPECT_LT(rel_error(dw, dw_ref), kBound) << "dW";
      EXPECT_LT(rel_error(db, db_ref), kBound) << "db";
      EXPECT_LT(rel_error(dx, dx_ref), kBound) << "dx";
    }
  }
}

}  // namespace
