// Which examples form each minibatch of an epoch. The order of epoch e depends only on (seed, e), so a
// resumed run shuffles exactly like an uninterrupted one, on any platform.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lenet::io {

struct BatchRange {
  size_t first = 0;  // position in the epoch's order
  size_t rows = 0;   // batch_size, or what is left for the last batch
};

// ceil(n / b) minibatches of b rows for n examples, the last one partial (no overflow for any n).
inline uint64_t num_batches(uint64_t n, uint64_t b) { return n == 0 ? 0 : (n - 1) / b + 1; }

class EpochSampler {
 public:
  // shuffle = false keeps the stored order (the test set).
  EpochSampler(size_t num_examples, size_t batch_size, uint64_t seed, bool shuffle);

  size_t num_examples() const { return n_; }
  size_t batch_size() const { return batch_; }
  // The last, partial minibatch is kept.
  size_t num_batches() const { return static_cast<size_t>(io::num_batches(n_, batch_)); }
  BatchRange batch(size_t b) const;
  // A permutation of 0..n-1 (Fisher-Yates with an unbiased portable generator), or the identity.
  std::vector<uint32_t> epoch_order(uint64_t epoch) const;

 private:
  size_t n_;
  size_t batch_;
  uint64_t seed_;
  bool shuffle_;
};

}  // namespace lenet::io
