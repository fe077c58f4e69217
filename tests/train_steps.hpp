// Shared by the tests that compare backends: the first minibatches of epoch 0 of a seeded shuffle, and
// the Euclidean distance between two parameter vectors.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/backend.hpp"
#include "io/dataset.hpp"
#include "io/sampler.hpp"

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

inline double distance(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

}  // namespace lenet::testing
