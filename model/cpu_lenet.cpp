#include "model/cpu_lenet.hpp"

#include <algorithm>

namespace lenet::model {
namespace {

constexpr ConvShape conv1_shape(int rows) { return {rows, 1, kInSide, kInSide, kC1, kK1}; }
constexpr ConvShape conv2_shape(int rows) { return {rows, kC1, kP1, kP1, kC2, kK2}; }

template <typename T>
LenetView<const T> const_view(const T* flat) {
  const LenetView<T> v = view(const_cast<T*>(flat));
  return {v.conv1_w, v.conv1_b, v.conv2_w, v.conv2_b, v.fc1_w, v.fc1_b, v.fc2_w, v.fc2_b};
}

}  // namespace

template <typename T>
void CpuLenet<T>::run_forward(const LenetView<const T>& p, const T* x, int rows) {
  const size_t n = static_cast<size_t>(rows);
  a1_.resize(n * kC1 * kS1 * kS1);
  p1_.resize(n * kC1 * kP1 * kP1);
  a2_.resize(n * kC2 * kS2 * kS2);
  p2_.resize(n * kFlat);
  h_.resize(n * kHidden);
  logits_.resize(n * kClasses);
  conv2d_forward(conv1_shape(rows), x, p.conv1_w, p.conv1_b, a1_.data(), col1_, tmp_);
  relu_forward<T>(static_cast<long long>(a1_.size()), a1_.data());
  avgpool2_forward(rows * kC1, kS1, kS1, a1_.data(), p1_.data());
  conv2d_forward(conv2_shape(rows), p1_.data(), p.conv2_w, p.conv2_b, a2_.data(), col2_, tmp_);
  relu_forward<T>(static_cast<long long>(a2_.size()), a2_.data());
  avgpool2_forward(rows * kC2, kS2, kS2, a2_.data(), p2_.data());  // NCHW pooled = flattened C, H, W
  linear_forward(rows, kFlat, kHidden, p2_.data(), p.fc1_w, p.fc1_b, h_.data());
  relu_forward<T>(static_cast<long long>(h_.size()), h_.data());
  linear_forward(rows, kHidden, kClasses, h_.data(), p.fc2_w, p.fc2_b, logits_.data());
}

template <typename T>
StepStats CpuLenet<T>::forward(const T* params, const T* x, const int32_t* labels, int rows, int valid_rows) {
  StepStats st;
  if (rows == 0) {  // no rows: nothing of an earlier call's left behind
    for (std::vector<T>* v : {&a1_, &p1_, &a2_, &p2_, &h_, &logits_, &dlogits_}) v->clear();
    return st;
  }
  run_forward(const_view(params), x, rows);
  dlogits_.resize(logits_.size());
  st.loss_sum = static_cast<double>(softmax_xent(rows, kClasses, logits_.data(), labels, dlogits_.data(), &st.correct, valid_rows));
  return st;
}

template <typename T>
StepStats CpuLenet<T>::forward_backward(const T* params, const T* x, const int32_t* labels, int rows, T* grads,
                                        int valid_rows) {
  if (rows == 0) {
    std::fill(grads, grads + kNumParameters, T(0));
    return forward(params, x, labels, 0, valid_rows);
  }
  const StepStats st = forward(params, x, labels, rows, valid_rows);
  const LenetView<const T> p = const_view(params);
  const LenetView<T> g = view(grads);
  const size_t n = static_cast<size_t>(rows);
  dh_.resize(n * kHidden);
  dp2_.resize(n * kFlat);
  da2_.resize(a2_.size());
  dp1_.resize(p1_.size());
  da1_.resize(a1_.size());

  linear_backward(rows, kHidden, kClasses, h_.data(), p.fc2_w, dlogits_.data(), g.fc2_w, g.fc2_b, dh_.data());
  relu_backward<T>(static_cast<long long>(dh_.size()), h_.data(), dh_.data(), dh_.data());
  linear_backward(rows, kFlat, kHidden, p2_.data(), p.fc1_w, dh_.data(), g.fc1_w, g.fc1_b, dp2_.data());
  avgpool2_backward(rows * kC2, kS2, kS2, dp2_.data(), da2_.data());
  relu_backward<T>(static_cast<long long>(da2_.size()), a2_.data(), da2_.data(), da2_.data());
  conv2d_backward(conv2_shape(rows), p.conv2_w, da2_.data(), col2_, g.conv2_w, g.conv2_b, dp1_.data(), tmp_, dcol_);
  avgpool2_backward(rows * kC1, kS1, kS1, dp1_.data(), da1_.data());
  relu_backward<T>(static_cast<long long>(da1_.size()), a1_.data(), da1_.data(), da1_.data());
  conv2d_backward(conv1_shape(rows), p.conv1_w, da1_.data(), col1_, g.conv1_w, g.conv1_b, static_cast<T*>(nullptr),
                  tmp_, dcol_);
  return st;
}

template class CpuLenet<float>;
template class CpuLenet<double>;

}  // namespace lenet::model
