// Every layer's backward, and the whole network's, against central finite differences in double
// precision, plus the float model (the one that trains) against the double one.
//
// Bounds: the layers here are linear in each input except ReLU's kink and the softmax, so the central
// difference with h = 1e-6 has truncation error O(h^2 * f''') < 1e-10 and rounding error about
// eps * |L| / h = 2e-16 * 10 / 1e-6 = 2e-9 relative to O(1) gradients. A bound of 1e-6 on the relative
// error ||analytic - fd|| / ||fd|| therefore only fails on a real mistake (a wrong index or factor gives
// O(1) errors). Random inputs land within h of a ReLU kink with probability ~1e-6 per element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "io/random.hpp"
#include "model/cpu_layers.hpp"
#include "model/cpu_lenet.hpp"
#include "model/gemm.hpp"
#include "model/lenet.hpp"
#include "model/softmax_row.hpp"

namespace {

using namespace lenet::model;
using Vec = std::vector<double>;

constexpr double kStep = 1e-6;
constexpr double kBound = 1e-6;

Vec random_vec(size_t n, std::mt19937& gen, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (double& x : v) x = d(gen);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double rel_error(const Vec& got, const Vec& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::sqrt(den);
}

// loss() with x moved by +kStep and by -kStep; x is restored.
std::pair<double, double> loss_up_down(double& x, const std::function<double()>& loss) {
  const double keep = x;
  x = keep + kStep;
  const double up = loss();
  x = keep - kStep;
  const double down = loss();
  x = keep;
  return {up, down};
}

// Central differences of loss() with respect to v[i] for each i in `which` (all when empty).
Vec numeric_grad(Vec& v, const std::function<double()>& loss, const std::vector<size_t>& which = {}) {
  std::vector<size_t> idx = which;
  if (idx.empty())
    for (size_t i = 0; i < v.size(); ++i) idx.push_back(i);
  Vec g;
  for (size_t i : idx) {
    const auto [up, down] = loss_up_down(v[i], loss);
    g.push_back((up - down) / (2 * kStep));
  }
  return g;
}

TEST(Gradients, Conv2d) {
  std::mt19937 gen(1);
  // 2 x 5 x 4 = 40 output positions per channel, and 1 x 5 x 5 = 25: the bias gradient's sums in eight
  // lanes, with and without a partial last group.
  for (const ConvShape& s : {ConvShape{2, 3, 7, 6, 4, 3}, ConvShape{1, 3, 7, 7, 4, 3}}) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " h=" + std::to_string(s.h) + " w=" + std::to_string(s.w));
    Vec x = random_vec(size_t(s.n) * s.c * s.h * s.w, gen), w = random_vec(size_t(s.oc) * s.c * s.k * s.k, gen),
        b = random_vec(size_t(s.oc), gen);
    const Vec r = random_vec(size_t(s.n) * s.oc * s.oh() * s.ow(), gen);  // L = sum(y * r), so dL/dy = r
    Vec col, tmp, dcol, y(r.size());
    auto loss = [&] {
      conv2d_forward(s, x.data(), w.data(), b.data(), y.data(), col, tmp);
      return dot(y, r);
    };
    loss();
    Vec dw(w.size()), db(b.size()), dx(x.size());
    conv2d_backward(s, w.data(), r.data(), col, dw.data(), db.data(), dx.data(), tmp, dcol);
    EXPECT_LT(rel_error(dx, numeric_grad(x, loss)), kBound);
    EXPECT_LT(rel_error(dw, numeric_grad(w, loss)), kBound);
    EXPECT_LT(rel_error(db, numeric_grad(b, loss)), kBound);
  }
}

TEST(Gradients, AvgPoolWithOddSideDropsLastRowAndColumn) {
  std::mt19937 gen(2);
  const int planes = 3, h = 9, w = 9;
  Vec x = random_vec(size_t(planes) * h * w, gen);
  const Vec r = random_vec(size_t(planes) * 4 * 4, gen);
  Vec y(r.size());
  auto loss = [&] {
    avgpool2_forward(planes, h, w, x.data(), y.data());
    return dot(y, r);
  };
  loss();
  EXPECT_DOUBLE_EQ(y[0], (x[0] + x[1] + x[9] + x[10]) / 4);
  Vec dx(x.size(), std::nan(""));  // every element must be written, the dropped ones with 0
  avgpool2_backward(planes, h, w, r.data(), dx.data());
  EXPECT_LT(rel_error(dx, numeric_grad(x, loss)), kBound);
  EXPECT_EQ(dx[8], 0.0);       // last column
  EXPECT_EQ(dx[8 * 9], 0.0);   // last row
}

// Pooling on a plane wider than it is tall: the output width comes from the width, the height from the
// height (LeNet's planes are square, so only this test tells them apart).
TEST(Gradients, AvgPoolOfAPlaneWiderThanItIsTall) {
  std::mt19937 gen(13);
  const int planes = 2, h = 5, w = 8, oh = 2, ow = 4;
  Vec x = random_vec(size_t(planes) * h * w, gen);
  const Vec r = random_vec(size_t(planes) * oh * ow, gen);
  Vec y(r.size());
  auto loss = [&] {
    avgpool2_forward(planes, h, w, x.data(), y.data());
    return dot(y, r);
  };
  loss();
  for (int p = 0; p < planes; ++p)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        const double* q = x.data() + (size_t(p) * h + 2 * i) * w + 2 * j;
        EXPECT_DOUBLE_EQ(y[(size_t(p) * oh + i) * ow + j], (q[0] + q[1] + q[w] + q[w + 1]) / 4) << p << i << j;
      }
  Vec dx(x.size(), std::nan(""));
  avgpool2_backward(planes, h, w, r.data(), dx.data());
  EXPECT_LT(rel_error(dx, numeric_grad(x, loss)), kBound);
  EXPECT_EQ(dx[size_t(4) * w], 0.0);  // the last row, dropped
  EXPECT_EQ(dx[size_t(h) * w + 4 * w + 7], 0.0);
}

TEST(Gradients, Relu) {
  std::mt19937 gen(3);
  Vec x = random_vec(50, gen);
  const Vec r = random_vec(50, gen);
  Vec y;
  auto loss = [&] {
    y = x;
    relu_forward<double>(static_cast<long long>(y.size()), y.data());
    return dot(y, r);
  };
  loss();
  Vec dx(x.size());
  relu_backward<double>(static_cast<long long>(y.size()), y.data(), r.data(), dx.data());
  EXPECT_LT(rel_error(dx, numeric_grad(x, loss)), kBound);
}

TEST(Gradients, Linear) {
  std::mt19937 gen(4);
  const int n = 5, in = 7, out = 4;
  Vec x = random_vec(size_t(n) * in, gen), w = random_vec(size_t(out) * in, gen), b = random_vec(size_t(out), gen);
  const Vec r = random_vec(size_t(n) * out, gen);
  Vec y(r.size());
  auto loss = [&] {
    linear_forward(n, in, out, x.data(), w.data(), b.data(), y.data());
    return dot(y, r);
  };
  loss();
  Vec dw(w.size()), db(b.size()), dx(x.size());
  linear_backward(n, in, out, x.data(), w.data(), r.data(), dw.data(), db.data(), dx.data());
  EXPECT_LT(rel_error(dx, numeric_grad(x, loss)), kBound);
  EXPECT_LT(rel_error(dw, numeric_grad(w, loss)), kBound);
  EXPECT_LT(rel_error(db, numeric_grad(b, loss)), kBound);
}

TEST(Gradients, SoftmaxCrossEntropySum) {
  std::mt19937 gen(5);
  const int n = 6;
  Vec z = random_vec(size_t(n) * kClasses, gen, -3, 3);
  const std::vector<int32_t> labels = {0, 3, 9, 3, 7, 1};
  Vec dz(z.size()), scratch(z.size());
  int64_t correct = -1;
  const double l = softmax_xent(n, kClasses, z.data(), labels.data(), dz.data(), &correct);
  double by_hand = 0;  // sum over rows of log(sum exp z) - z[label]
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for (int c = 0; c < kClasses; ++c) s += std::exp(z[i * kClasses + c]);
    by_hand += std::log(s) - z[i * kClasses + labels[i]];
  }
  EXPECT_NEAR(l, by_hand, 1e-12);
  auto loss = [&] { return softmax_xent(n, kClasses, z.data(), labels.data(), scratch.data(), nullptr); };
  EXPECT_LT(rel_error(dz, numeric_grad(z, loss)), kBound);
  int64_t expected = 0;
  for (int i = 0; i < n; ++i) {
    const double* row = &z[i * kClasses];
    expected += std::max_element(row, row + kClasses) - row == labels[i];
  }
  EXPECT_EQ(correct, expected);
}

// The loss and its gradient are taken relative to each row's largest logit, wherever it stands: logits
// 1000 apart overflow exp() in double (100 apart in float), yet the loss is finite and the gradient is
// softmax - onehot, each row summing to 0. Rows: the maximum at the label (class 1); the maximum at
// class 7 with label 0; label 9 on the one logit far below the rest.
template <typename T>
void expect_stable_softmax(T spread) {
  SCOPED_TRACE("spread " + std::to_string(double(spread)));
  const int n = 3;
  std::vector<T> z(size_t(n) * kClasses, T(0)), dz(z.size());
  z[1] = spread;
  z[kClasses + 7] = spread;
  z[2 * kClasses + 9] = -spread;
  const std::vector<int32_t> labels = {1, 0, 9};
  const double l = double(softmax_xent(n, kClasses, z.data(), labels.data(), dz.data(), nullptr));
  double by_hand = 0;  // sum over rows of max + log(sum exp(z - max)) - z[label], in double
  for (int i = 0; i < n; ++i) {
    const T* row = &z[size_t(i) * kClasses];
    const double m = double(*std::max_element(row, row + kClasses));
    double s = 0;
    for (int c = 0; c < kClasses; ++c) s += std::exp(double(row[c]) - m);
    by_hand += m + std::log(s) - double(row[labels[size_t(i)]]);
  }
  ASSERT_TRUE(std::isfinite(l));
  EXPECT_NEAR(l, by_hand, 1e-5 * by_hand);
  for (int i = 0; i < n; ++i) {
    double row_sum = 0;
    for (int c = 0; c < kClasses; ++c) {
      const double g = double(dz[size_t(i) * kClasses + c]);
      ASSERT_TRUE(std::isfinite(g)) << "row " << i << ", class " << c;
      row_sum += g;
    }
    EXPECT_NEAR(row_sum, 0.0, 1e-6) << "row " << i;
  }
  EXPECT_NEAR(double(dz[1]), 0.0, 1e-6);              // row 0: the label is the certain prediction
  EXPECT_NEAR(double(dz[kClasses]), -1.0, 1e-6);      // row 1: the label has probability ~0
  EXPECT_NEAR(double(dz[3 * kClasses - 1]), -1.0, 1e-6);  // row 2 likewise
}

TEST(Gradients, SoftmaxCrossEntropyIsStableForLogitsFarApart) {
  expect_stable_softmax<double>(1000.0);
  expect_stable_softmax<float>(100.0f);
}

// Parameters large enough that every ReLU sees both signs (the N(0, 0.01^2) start would make the
// gradients of the early layers tiny but not wrong).
Vec test_parameters(std::mt19937& gen) {
  Vec p(kNumParameters);
  std::normal_distribution<double> d(0.0, 0.2);
  for (double& v : p) v = d(gen);
  return p;
}

// Through the whole network a perturbation moves thousands of ReLU inputs, so now and then one crosses
// zero inside [-h, h] and the central difference mixes two slopes (seen: 1 of 320 samples off by 1e-4
// relative). Such samples are recognised by their one-sided differences: where the loss is smooth they
// differ by h * |f''|, measured below 3e-8 relative here, while that kink made them differ by 1.3e-4.
// Samples over 1e-6 are left out; at most 5% may be (and 10 of a tensor's 40), and each tensor's other
// samples must meet the usual bound on their own.
TEST(Gradients, WholeNetworkSampledPerTensor) {
  std::mt19937 gen(6);
  Vec params = test_parameters(gen);
  const int rows = 3;
  const Vec x = random_vec(size_t(rows) * kInPixels, gen, 0, 1);
  const std::vector<int32_t> labels = {2, 7, 0};
  CpuLenet<double> net;
  Vec grads(kNumParameters);
  const double l0 = net.forward_backward(params.data(), x.data(), labels.data(), rows, grads.data()).loss_sum;
  auto loss = [&] { return net.forward(params.data(), x.data(), labels.data(), rows).loss_sum; };
  size_t samples = 0, kinks = 0;
  std::uniform_int_distribution<size_t> pick(0, size_t{1} << 30);
  for (const TensorSpec& t : tensor_specs()) {
    Vec analytic, numeric;
    for (int i = 0; i < 40; ++i, ++samples) {
      const size_t k = t.offset + pick(gen) % t.size;
      const auto [up, down] = loss_up_down(params[k], loss);
      const double forward_slope = (up - l0) / kStep, backward_slope = (l0 - down) / kStep;
      if (std::fabs(forward_slope - backward_slope) > 1e-6 * (1 + std::fabs(forward_slope))) {
        ++kinks;
        continue;
      }
      analytic.push_back(grads[k]);
      numeric.push_back((up - down) / (2 * kStep));
    }
    EXPECT_GE(analytic.size(), 30u) << t.name << ": too many samples straddle a ReLU kink to judge";
    EXPECT_LT(rel_error(analytic, numeric), kBound) << t.name;
  }
  EXPECT_LE(kinks, samples / 20) << "too many samples straddle a ReLU kink to judge";
}

TEST(Gradients, FloatModelMatchesDoubleModel) {
  std::mt19937 gen(7);
  const Vec params = test_parameters(gen);
  const int rows = 16;
  const Vec x = random_vec(size_t(rows) * kInPixels, gen, 0, 1);
  std::vector<int32_t> labels(rows);
  for (int i = 0; i < rows; ++i) labels[size_t(i)] = i % kClasses;
  Vec g64(kNumParameters);
  CpuLenet<double> net64;
  const double l64 = net64.forward_backward(params.data(), x.data(), labels.data(), rows, g64.data()).loss_sum;
  const std::vector<float> pf(params.begin(), params.end()), xf(x.begin(), x.end());
  std::vector<float> g32(kNumParameters);
  CpuLenet<float> net32;
  const double l32 = net32.forward_backward(pf.data(), xf.data(), labels.data(), rows, g32.data()).loss_sum;
  // float32 has 24-bit mantissas; sums of at most ~20,000 terms keep the relative error near
  // 1e-6 * sqrt(terms) < 1e-4.
  EXPECT_LT(std::fabs(l32 - l64) / std::fabs(l64), 1e-4);
  EXPECT_LT(rel_error(Vec(g32.begin(), g32.end()), g64), 1e-4);
}

// No rows: a zero gradient, and no logits, activations or loss gradient left from an earlier call.
TEST(Gradients, ZeroRowsGiveZeroGradient) {
  std::vector<float> params = init_parameters<float>(1), grads(kNumParameters, 1.0f);
  const std::vector<float> x(2 * kInPixels, 0.5f);
  const std::vector<int32_t> labels = {3, 7};
  CpuLenet<float> net;
  for (const bool backward : {false, true}) {
    net.forward(params.data(), x.data(), labels.data(), 2);
    ASSERT_EQ(net.logits().size(), 2u * kClasses);
    const StepStats st = backward ? net.forward_backward(params.data(), nullptr, nullptr, 0, grads.data())
                                  : net.forward(params.data(), nullptr, nullptr, 0);
    EXPECT_EQ(st.loss_sum, 0.0) << backward;
    EXPECT_EQ(st.correct, 0) << backward;
    for (const std::vector<float>* v : {&net.logits(), &net.dlogits(), &net.a1(), &net.p1(), &net.a2(), &net.p2(),
                                        &net.hidden()})
      EXPECT_TRUE(v->empty()) << backward;
  }
  for (float g : grads) ASSERT_EQ(g, 0.0f);
}

// Biases far below zero before each ReLU make every ReLU input negative, so every ReLU output, the last
// element of the last row included, is exactly zero, and so are the pooled maps after them; the logits are
// then fc2's bias. An element a ReLU skips keeps its negative value, which the finite differences above
// can miss: the backward pass takes it as zero anyway, and in the loss it is one unit among thousands.
TEST(Gradients, EveryReluOutputOfNegativeInputsIsZero) {
  std::mt19937 gen(12);
  Vec params = test_parameters(gen);
  const LenetView<double> p = view(params.data());
  std::fill_n(p.conv1_b, kC1, -100.0);
  std::fill_n(p.conv2_b, kC2, -100.0);
  std::fill_n(p.fc1_b, kHidden, -100.0);
  const int rows = 3;
  const Vec x = random_vec(size_t(rows) * kInPixels, gen, 0, 1);
  const std::vector<int32_t> labels = {1, 4, 9};
  CpuLenet<double> net;
  net.forward(params.data(), x.data(), labels.data(), rows);
  const std::pair<const char*, const Vec*> maps[] = {
      {"conv1", &net.a1()}, {"pool1", &net.p1()}, {"conv2", &net.a2()}, {"pool2", &net.p2()}, {"fc1", &net.hidden()}};
  for (const auto& [name, map] : maps) {
    ASSERT_FALSE(map->empty()) << name;
    EXPECT_EQ(std::count(map->begin(), map->end(), 0.0), std::ptrdiff_t(map->size())) << name;
    EXPECT_EQ(map->back(), 0.0) << name;
  }
  ASSERT_EQ(net.logits().size(), size_t(rows) * kClasses);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < kClasses; ++c) EXPECT_EQ(net.logits()[size_t(r) * kClasses + c], p.fc2_b[c]) << r << ", " << c;
}

TEST(Gemm, BlasAndPortableAgreeForEveryTransposition) {
  std::mt19937 gen(8);
  // The portable GEMM's blocks are 64 rows, 256 columns and 256 deep, its tiles 4 rows by 4 (double) or
  // 8 (float) columns: the third shape spans two blocks of rows and columns and three of depth, with
  // partial tiles in both directions; the fourth has k = 0 (C only scaled by beta); the last three have
  // one row or one column of C (a linear layer on a one-row chunk). Beta 0 must ignore a NaN already in
  // C, as BLAS does. gemm<T> is OpenBLAS where the build found it, for float and double. Bounds: double
  // sums of at most 1100 products of O(1) terms, relative error far below 1e-13; the float GEMMs', about
  // sqrt(k) * 6e-8, below 1e-5.
  for (const auto& [m, n, k] : {std::tuple<int, int, int>{13, 17, 11}, {3, 300, 1100}, {70, 301, 600}, {4, 5, 0},
                                {1, 9, 7}, {6, 1, 5}, {1, 1, 3}})
    for (const double beta : {2.0, 0.0})
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
          const Vec a = random_vec(size_t(m) * k, gen), b = random_vec(size_t(k) * n, gen);
          Vec c1 = beta == 0.0 ? Vec(size_t(m) * n, std::nan("")) : random_vec(size_t(m) * n, gen), c2 = c1, ref = c1;
          const int lda = ta ? m : k, ldb = tb ? k : n;
          gemm<double>(ta, tb, m, n, k, 0.5, a.data(), lda, b.data(), ldb, beta, c1.data(), n);
          gemm_portable<double>(ta, tb, m, n, k, 0.5, a.data(), lda, b.data(), ldb, beta, c2.data(), n);
          std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), c3(c1.size());
          for (size_t i = 0; i < c3.size(); ++i) c3[i] = float(ref[i]);
          gemm_portable<float>(ta, tb, m, n, k, 0.5f, af.data(), lda, bf.data(), ldb, float(beta), c3.data(), n);
          std::vector<float> c4(c3.size());
          for (size_t i = 0; i < c4.size(); ++i) c4[i] = float(ref[i]);
          gemm<float>(ta, tb, m, n, k, 0.5f, af.data(), lda, bf.data(), ldb, float(beta), c4.data(), n);
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) {
              double s = 0;
              for (int p = 0; p < k; ++p) s += (ta ? a[size_t(p) * m + i] : a[size_t(i) * k + p]) *
                                               (tb ? b[size_t(j) * k + p] : b[size_t(p) * n + j]);
              double& r = ref[size_t(i) * n + j];
              r = 0.5 * s + (beta == 0.0 ? 0.0 : beta * r);
            }
          SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " beta=" +
                       std::to_string(beta) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
          // C = 0 exactly, with no relative error to take (a C++17 lambda cannot capture the binding k).
          const bool c_is_zero = k == 0 && beta == 0.0;
          const auto expect_close = [&](const Vec& got, double bound) {
            if (c_is_zero)
              EXPECT_EQ(std::count(got.begin(), got.end(), 0.0), std::ptrdiff_t(got.size()));
            else
              EXPECT_LT(rel_error(got, ref), bound);
          };
          expect_close(c1, 1e-13);
          expect_close(c2, 1e-13);
          expect_close(Vec(c3.begin(), c3.end()), 1e-5);
          expect_close(Vec(c4.begin(), c4.end()), 1e-5);
        }
}

// Leading dimensions wider than the operands (a row of a larger matrix): only the m x n window of C
// changes, and the result is the same bits as with packed operands.
TEST(Gemm, LeadingDimensionsWiderThanTheOperands) {
  std::mt19937 gen(9);
  const int m = 37, n = 45, k = 29, pad = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
      const Vec a = random_vec(size_t(a_rows) * a_cols, gen), b = random_vec(size_t(b_rows) * b_cols, gen);
      Vec a_wide(size_t(a_rows) * (a_cols + pad), 7.0), b_wide(size_t(b_rows) * (b_cols + pad), 7.0);
      for (int i = 0; i < a_rows; ++i) std::copy_n(&a[size_t(i) * a_cols], a_cols, &a_wide[size_t(i) * (a_cols + pad)]);
      for (int i = 0; i < b_rows; ++i) std::copy_n(&b[size_t(i) * b_cols], b_cols, &b_wide[size_t(i) * (b_cols + pad)]);
      const Vec c0 = random_vec(size_t(m) * n, gen);
      Vec packed = c0, wide(size_t(m) * (n + pad), -5.0);
      for (int i = 0; i < m; ++i) std::copy_n(&c0[size_t(i) * n], n, &wide[size_t(i) * (n + pad)]);
      gemm_portable<double>(ta, tb, m, n, k, 0.5, a.data(), a_cols, b.data(), b_cols, 2.0, packed.data(), n);
      gemm_portable<double>(ta, tb, m, n, k, 0.5, a_wide.data(), a_cols + pad, b_wide.data(), b_cols + pad, 2.0,
                            wide.data(), n + pad);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n + pad; ++j)
          ASSERT_EQ(wide[size_t(i) * (n + pad) + j], j < n ? packed[size_t(i) * n + j] : -5.0)
              << "ta=" << ta << " tb=" << tb << " C[" << i << "][" << j << "]";
    }
}

// OpenBLAS's generic kernels, which it takes on a CPU it does not know, give way to the best of its x86
// kernels that the CPU runs; kernels it chose for a CPU it knows are kept.
TEST(Gemm, GenericOpenBlasKernelsGiveWayToThoseTheCpuRuns) {
  EXPECT_STREQ(better_gemm_kernels("Prescott", true, true), "SkylakeX");
  EXPECT_STREQ(better_gemm_kernels("Prescott", false, true), "Haswell");
  EXPECT_EQ(better_gemm_kernels("Prescott", false, false), nullptr);
  for (const char* known : {"Haswell", "SkylakeX", "Zen", "Sandybridge", "Cooperlake", ""})
    EXPECT_EQ(better_gemm_kernels(known, true, true), nullptr) << known;
}

TEST(Model, LayoutMatchesTheArchitectureTable) {
  const auto& s = tensor_specs();
  EXPECT_EQ(s[kConv1W].size, 180u);
  EXPECT_EQ(s[kConv2W].size, 25000u);
  EXPECT_EQ(s[kFc1W].size, 102400u);
  EXPECT_EQ(s[kFc2B].offset + s[kFc2B].size, kNumParameters);
  EXPECT_EQ(kFlat, 800);
  const std::vector<float> p = init_parameters<float>(3);
  double sum = 0, sq = 0;
  size_t n = 0;
  for (const TensorSpec& t : s)
    for (size_t i = 0; i < t.size; ++i) {
      const double v = p[t.offset + i];
      if (!t.is_weight) {
        ASSERT_EQ(v, 0.0) << t.name;
        continue;
      }
      sum += v, sq += v * v, ++n;
    }
  // 128,808 draws of N(0, 0.01^2): the sample std is within 1% of 0.01 with overwhelming probability.
  EXPECT_NEAR(std::sqrt(sq / n - (sum / n) * (sum / n)), 0.01, 1e-4);
  EXPECT_EQ(init_parameters<float>(3), p);
  EXPECT_NE(init_parameters<float>(4), p);
}

// The seed's contract (README, "Seeds"): the weights are stream 0 of Rng(seed, .), drawn tensor by
// tensor in layout order, biases draw nothing. Streams 1 + e are the epochs' shuffles, so a change
// here would silently change every seed's run.
TEST(Model, WeightsAreStreamZeroDrawnInLayoutOrder) {
  const std::vector<float> p = init_parameters<float>(3);
  lenet::Rng rng(3, 0);
  for (const TensorSpec& t : tensor_specs())
    for (size_t i = 0; t.is_weight && i < t.size; ++i)
      ASSERT_EQ(p[t.offset + i], static_cast<float>(0.01 * rng.normal())) << t.name << "[" << i << "]";
}

// torch.argmax's rule: the first of equal maxima. The CPU and GPU accuracy counts both use it.
TEST(Model, FloatAndDoubleModelsStartFromTheSameValues) {
  const std::vector<float> f = init_parameters<float>(3);
  const std::vector<double> d = init_parameters<double>(3);
  ASSERT_EQ(d.size(), f.size());
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(d[i], double(f[i])) << "parameter " << i;
}

TEST(Model, SgdUpdateMovesEveryParameter) {
  std::vector<float> w = {1, 1, 1};
  sgd_update(w.data(), std::vector<float>{1, 2, 3}.data(), w.size(), 0.5f);
  EXPECT_EQ(w, (std::vector<float>{0.5f, 0.0f, -0.5f}));
  std::vector<double> wd = {1, 1, 1};
  sgd_update(wd.data(), std::vector<double>{1, 2, 3}.data(), wd.size(), 0.5);
  EXPECT_EQ(wd, (std::vector<double>{0.5, 0.0, -0.5}));
}

TEST(Model, ArgmaxTakesTheFirstOfEqualMaxima) {
  const float tie[] = {1.0f, 3.0f, 3.0f, 0.0f}, flat[] = {0.5f, 0.5f, 0.5f};
  EXPECT_EQ(argmax_row(tie, 4), 1);
  EXPECT_EQ(argmax_row(flat, 3), 0);
}

}  // namespace
