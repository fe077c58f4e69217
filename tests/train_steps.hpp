// Shared by the tests that compare backends: the first minibatches of epoch 0 of a seeded shuffle, the
// Euclidean distance between two parameter vectors and between their tensors, and their bit patterns.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/backend.hpp"
#include "io/dataset.hpp"
#include "io/sampler.hpp"
#include "model/lenet.hpp"

namespace lenet::testing {

// Trains `max_steps` minibatches of epoch 0 (all of them by default) with lr 0.2.
inline void train_epoch0(engine::Backend& b, const io::Split& data, int batch, uint64_t seed,
                         size_t max_steps = std::numeric_limits<size_t>::max()) {
  const io::EpochSampler sampler(data.size(), size_t(batch), seed, true);
  const std::vector<uint32_t> order = sampler.epoch_order(0);
  for (size_t k = 0; k < sampler.num_batches() && k < max_steps; ++k) {
    const io::BatchRange r = sampler.batch(k);
    b.train_step(data, order.data() + r.first, int(r.rows), 0.2f);
  }
}

// Infinite for vectors of different sizes: a backend that returned too few parameters is not close.
inline double distance(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

inline std::vector<float> slice(const std::vector<float>& v, size_t offset, size_t count) {
  return std::vector<float>(v.begin() + long(offset), v.begin() + long(offset + count));
}

// The largest over the eight tensors of |got - ref| / |ref - start| on that tensor alone, and the
// tensor's name: an error in a tensor that moves little would vanish in the whole vector's distance.
struct TensorError {
  double relative = 0;
  const char* name = "";
};
inline TensorError worst_tensor_error(const std::vector<float>& got, const std::vector<float>& ref,
                                      const std::vector<float>& start) {
  if (got.size() != model::kNumParameters || ref.size() != got.size() || start.size() != got.size())
    return {std::numeric_limits<double>::infinity(), "(a vector of the wrong size)"};
  TensorError worst;
  for (const model::TensorSpec& t : model::tensor_specs()) {
    const auto part = [&t](const std::vector<float>& v) { return slice(v, t.offset, t.size); };
    const double relative = distance(part(got), part(ref)) / distance(part(ref), part(start));
    if (std::isnan(relative)) return {relative, t.name};  // a tensor that did not move: nothing to compare
    if (relative > worst.relative) worst = {relative, t.name};
  }
  return worst;
}

// What "bitwise identical" compares: with EXPECT_EQ, -0 differs from +0 and a NaN equals itself.
inline std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

}  // namespace lenet::testing
