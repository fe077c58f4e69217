#include "io/sampler.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "io/random.hpp"

namespace lenet::io {

// Stream numbers of the generator: 0 is parameter initialisation (model/), 1 + e the shuffle of epoch e.
constexpr uint64_t kFirstShuffleStream = 1;

EpochSampler::EpochSampler(size_t num_examples, size_t batch_size, uint64_t seed, bool shuffle)
    : n_(num_examples), batch_(batch_size), seed_(seed), shuffle_(shuffle) {
  if (batch_size == 0) throw std::invalid_argument("EpochSampler: batch size 0");
  if (num_examples > UINT32_MAX) throw std::invalid_argument("EpochSampler: more than 2^32 - 1 examples (the indices are 32-bit)");
}

BatchRange EpochSampler::batch(size_t b) const {
  if (b >= num_batches()) throw std::out_of_range("EpochSampler: batch " + std::to_string(b) + " of " +
                                                   std::to_string(num_batches()));
  const size_t first = b * batch_;
  return {first, std::min(batch_, n_ - first)};
}

std::vector<uint32_t> EpochSampler::epoch_order(uint64_t epoch) const {
  std::vector<uint32_t> order(n_);
  std::iota(order.begin(), order.end(), uint32_t{0});
  if (!shuffle_) return order;
  Rng rng(seed_, kFirstShuffleStream + epoch);
  for (size_t i = n_; i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.below(i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace lenet::io
