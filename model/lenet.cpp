#include "model/lenet.hpp"

#include "io/random.hpp"

namespace lenet::model {

const std::array<TensorSpec, kNumTensors>& tensor_specs() {
  static const std::array<TensorSpec, kNumTensors> specs = [] {
    std::array<TensorSpec, kNumTensors> s = {{
        {"conv1.weight", {kC1, 1, kK1, kK1}, 4, 0, 0, true},
        {"conv1.bias", {kC1, 0, 0, 0}, 1, 0, 0, false},
        {"conv2.weight", {kC2, kC1, kK2, kK2}, 4, 0, 0, true},
        {"conv2.bias", {kC2, 0, 0, 0}, 1, 0, 0, false},
        {"fc1.weight", {kHidden, kFlat, 0, 0}, 2, 0, 0, true},
        {"fc1.bias", {kHidden, 0, 0, 0}, 1, 0, 0, false},
        {"fc2.weight", {kClasses, kHidden, 0, 0}, 2, 0, 0, true},
        {"fc2.bias", {kClasses, 0, 0, 0}, 1, 0, 0, false},
    }};
    size_t offset = 0;
    for (auto& t : s) {
      t.size = 1;
      for (int d = 0; d < t.rank; ++d) t.size *= static_cast<size_t>(t.shape[d]);
      t.offset = offset;
      offset += t.size;
    }
    return s;
  }();
  return specs;
}

template <typename T>
std::vector<T> init_parameters(uint64_t seed) {
  std::vector<T> w(kNumParameters, T(0));
  Rng rng(seed, 0);
  for (const auto& t : tensor_specs()) {
    if (!t.is_weight) continue;
    // Drawn in double and rounded once, so float and double models start from the same values.
    for (size_t i = 0; i < t.size; ++i) w[t.offset + i] = static_cast<T>(static_cast<float>(0.01 * rng.normal()));
  }
  return w;
}

template <typename T>
void sgd_update(T* w, const T* g, size_t n, T lr_over_batch) {
  for (size_t i = 0; i < n; ++i) w[i] -= lr_over_batch * g[i];
}

double forward_flops_per_example() {
  const double conv1 = 2.0 * kC1 * kK1 * kK1 * kS1 * kS1;
  const double conv2 = 2.0 * kC2 * kC1 * kK2 * kK2 * kS2 * kS2;
  const double fc = 2.0 * kFlat * kHidden + 2.0 * kHidden * kClasses;
  return conv1 + conv2 + fc;
}

double train_flops_per_example() {
  // Backward computes the weight gradient of every layer and the input gradient of every layer but
  // conv1 (the input needs none): each as many multiply-adds as the layer's forward.
  const double conv1 = 2.0 * kC1 * kK1 * kK1 * kS1 * kS1;
  return 3.0 * forward_flops_per_example() - conv1;
}

template std::vector<float> init_parameters<float>(uint64_t);
template std::vector<double> init_parameters<double>(uint64_t);
template void sgd_update<float>(float*, const float*, size_t, float);
template void sgd_update<double>(double*, const double*, size_t, double);

}  // namespace lenet::model
