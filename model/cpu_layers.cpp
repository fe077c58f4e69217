#include "model/cpu_layers.hpp"

#include <algorithm>
#include <cstddef>

#include "model/gemm.hpp"
#include "model/softmax_row.hpp"

namespace lenet::model {
namespace {

// col[(ci*k + ki)*k + kj][img*oh*ow + oy*ow + ox] = x[img, ci, oy + ki, ox + kj]
template <typename T>
void im2col(const ConvShape& s, const T* x, T* col) {
  const int oh = s.oh(), ow = s.ow();
  const size_t cols = static_cast<size_t>(s.col_cols());
  for (int ci = 0; ci < s.c; ++ci)
    for (int ki = 0; ki < s.k; ++ki)
      for (int kj = 0; kj < s.k; ++kj) {
        T* row = col + static_cast<size_t>((ci * s.k + ki) * s.k + kj) * cols;
        for (int img = 0; img < s.n; ++img) {
          const T* plane = x + (static_cast<size_t>(img) * s.c + ci) * s.h * s.w;
          for (int oy = 0; oy < oh; ++oy) {
            const T* src = plane + static_cast<size_t>(oy + ki) * s.w + kj;
            std::copy(src, src + ow, row + (static_cast<size_t>(img) * oh + oy) * ow);
          }
        }
      }
}

template <typename T>
void col2im(const ConvShape& s, const T* col, T* dx) {
  const int oh = s.oh(), ow = s.ow();
  const size_t cols = static_cast<size_t>(s.col_cols());
  std::fill(dx, dx + static_cast<size_t>(s.n) * s.c * s.h * s.w, T(0));
  for (int ci = 0; ci < s.c; ++ci)
    for (int ki = 0; ki < s.k; ++ki)
      for (int kj = 0; kj < s.k; ++kj) {
        const T* row = col + static_cast<size_t>((ci * s.k + ki) * s.k + kj) * cols;
        for (int img = 0; img < s.n; ++img) {
          T* plane = dx + (static_cast<size_t>(img) * s.c + ci) * s.h * s.w;
          for (int oy = 0; oy < oh; ++oy) {
            T* dst = plane + static_cast<size_t>(oy + ki) * s.w + kj;
            const T* src = row + (static_cast<size_t>(img) * oh + oy) * ow;
            for (int ox = 0; ox < ow; ++ox) dst[ox] += src[ox];
          }
        }
      }
}

// The sum of n values as 8 interleaved partial sums added pairwise at the end: a fixed order (the same
// bits every run) that the compiler can vectorize, where one running sum is a serial chain of additions.
template <typename T>
T lane_sum(const T* v, size_t n) {
  constexpr size_t kLanes = 8;
  T lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t k = 0; k < kLanes; ++k) lane[k] += v[i + k];
  for (size_t k = 0; i < n; ++i, ++k) lane[k] += v[i];
  for (size_t width = kLanes / 2; width > 0; width /= 2)
    for (size_t k = 0; k < width; ++k) lane[k] += lane[k + width];
  return lane[0];
}

}  // namespace

template <typename T>
void conv2d_forward(const ConvShape& s, const T* x, const T* w, const T* b, T* y, std::vector<T>& col,
                    std::vector<T>& tmp) {
  const size_t rows = static_cast<size_t>(s.col_rows()), cols = static_cast<size_t>(s.col_cols());
  const size_t ohw = static_cast<size_t>(s.oh()) * s.ow();
  col.resize(rows * cols);
  tmp.resize(static_cast<size_t>(s.oc) * cols);
  im2col(s, x, col.data());
  // tmp[oc, img*ohw + p] = w[oc, :] . col[:, img*ohw + p]
  gemm<T>(false, false, s.oc, static_cast<int>(cols), static_cast<int>(rows), T(1), w, static_cast<int>(rows),
          col.data(), static_cast<int>(cols), T(0), tmp.data(), static_cast<int>(cols));
  for (int img = 0; img < s.n; ++img)
    for (int oc = 0; oc < s.oc; ++oc) {
      const T* src = tmp.data() + static_cast<size_t>(oc) * cols + img * ohw;
      T* dst = y + (static_cast<size_t>(img) * s.oc + oc) * ohw;
      for (size_t p = 0; p < ohw; ++p) dst[p] = src[p] + b[oc];
    }
}

template <typename T>
void conv2d_backward(const ConvShape& s, const T* w, const T* dy, const std::vector<T>& col, T* dw, T* db, T* dx,
                     std::vector<T>& tmp, std::vector<T>& dcol) {
  const size_t rows = static_cast<size_t>(s.col_rows()), cols = static_cast<size_t>(s.col_cols());
  const size_t ohw = static_cast<size_t>(s.oh()) * s.ow();
  tmp.resize(static_cast<size_t>(s.oc) * cols);
  // dy as a matrix [oc, img*ohw + p], the layout of the forward's GEMM output.
  for (int img = 0; img < s.n; ++img)
    for (int oc = 0; oc < s.oc; ++oc) {
      const T* src = dy + (static_cast<size_t>(img) * s.oc + oc) * ohw;
      std::copy(src, src + ohw, tmp.data() + static_cast<size_t>(oc) * cols + img * ohw);
    }
  gemm<T>(false, true, s.oc, static_cast<int>(rows), static_cast<int>(cols), T(1), tmp.data(), static_cast<int>(cols),
          col.data(), static_cast<int>(cols), T(0), dw, static_cast<int>(rows));
  for (int oc = 0; oc < s.oc; ++oc) db[oc] = lane_sum(tmp.data() + static_cast<size_t>(oc) * cols, cols);
  if (dx == nullptr) return;
  dcol.resize(rows * cols);
  gemm<T>(true, false, static_cast<int>(rows), static_cast<int>(cols), s.oc, T(1), w, static_cast<int>(rows),
          tmp.data(), static_cast<int>(cols), T(0), dcol.data(), static_cast<int>(cols));
  col2im(s, dcol.data(), dx);
}

template <typename T>
void avgpool2_forward(int planes, int h, int w, const T* x, T* y) {
  const int oh = h / 2, ow = w / 2;
  for (int p = 0; p < planes; ++p) {
    const T* in = x + static_cast<size_t>(p) * h * w;
    T* out = y + static_cast<size_t>(p) * oh * ow;
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        const T* q = in + static_cast<size_t>(2 * i) * w + 2 * j;
        out[i * ow + j] = (q[0] + q[1] + q[w] + q[w + 1]) * T(0.25);
      }
  }
}

template <typename T>
void avgpool2_backward(int planes, int h, int w, const T* dy, T* dx) {
  const int oh = h / 2, ow = w / 2;
  std::fill(dx, dx + static_cast<size_t>(planes) * h * w, T(0));  // rows/columns the floor drops get 0
  for (int p = 0; p < planes; ++p) {
    const T* g = dy + static_cast<size_t>(p) * oh * ow;
    T* out = dx + static_cast<size_t>(p) * h * w;
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j) {
        const T v = g[i * ow + j] * T(0.25);
        T* q = out + static_cast<size_t>(2 * i) * w + 2 * j;
        q[0] = v; q[1] = v; q[w] = v; q[w + 1] = v;
      }
  }
}

template <typename T>
void relu_forward(long long count, T* x) {
  for (long long i = 0; i < count; ++i) x[i] = x[i] > T(0) ? x[i] : T(0);
}

template <typename T>
void relu_backward(long long count, const T* y, const T* dy, T* dx) {
  for (long long i = 0; i < count; ++i) {
    const T g = dy[i];  // loaded whatever the sign: a vector select, not a branch mispredicted half the time
    dx[i] = y[i] > T(0) ? g : T(0);
  }
}

template <typename T>
void linear_forward(int n, int in, int out, const T* x, const T* w, const T* b, T* y) {
  gemm<T>(false, true, n, out, in, T(1), x, in, w, in, T(0), y, out);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) y[static_cast<size_t>(i) * out + o] += b[o];
}

template <typename T>
void linear_backward(int n, int in, int out, const T* x, const T* w, const T* dy, T* dw, T* db, T* dx) {
  gemm<T>(true, false, out, in, n, T(1), dy, out, x, in, T(0), dw, in);
  for (int o = 0; o < out; ++o) {
    T sum = T(0);
    for (int i = 0; i < n; ++i) sum += dy[static_cast<size_t>(i) * out + o];
    db[o] = sum;
  }
  if (dx != nullptr) gemm<T>(false, false, n, in, out, T(1), dy, out, w, in, T(0), dx, in);
}

template <typename T>
T softmax_xent(int n, int classes, const T* logits, const int32_t* labels, T* dlogits, int64_t* correct,
               int valid) {
  T loss = T(0);
  int64_t hits = 0;
  if (valid < 0) valid = n;
  for (int i = 0; i < n; ++i) {
    const T* z = logits + static_cast<size_t>(i) * classes;
    T* dz = dlogits + static_cast<size_t>(i) * classes;
    if (i >= valid) {
      std::fill(dz, dz + classes, T(0));
      continue;
    }
    const int best = argmax_row(z, classes);
    loss += softmax_xent_row(z, labels[i], classes, best, dz);
    hits += best == labels[i];
  }
  if (correct != nullptr) *correct = hits;
  return loss;
}

#define LENET_INSTANTIATE_LAYERS(T)                                                                            \
  template void conv2d_forward<T>(const ConvShape&, const T*, const T*, const T*, T*, std::vector<T>&,         \
                                  std::vector<T>&);                                                            \
  template void conv2d_backward<T>(const ConvShape&, const T*, const T*, const std::vector<T>&, T*, T*, T*,    \
                                   std::vector<T>&, std::vector<T>&);                                          \
  template void avgpool2_forward<T>(int, int, int, const T*, T*);                                              \
  template void avgpool2_backward<T>(int, int, int, const T*, T*);                                             \
  template void relu_forward<T>(long long, T*);                                                                \
  template void relu_backward<T>(long long, const T*, const T*, T*);                                           \
  template void linear_forward<T>(int, int, int, const T*, const T*, const T*, T*);                            \
  template void linear_backward<T>(int, int, int, const T*, const T*, const T*, T*, T*, T*);                   \
  template T softmax_xent<T>(int, int, const T*, const int32_t*, T*, int64_t*, int);
LENET_INSTANTIATE_LAYERS(float)
LENET_INSTANTIATE_LAYERS(double)
#undef LENET_INSTANTIATE_LAYERS

}  // namespace lenet::model
