// What the trainer needs from a backend: R replicas that start from the same parameters, a synchronous
// data-parallel SGD step on a minibatch, and the test accuracy.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "io/dataset.hpp"
#include "model/cpu_lenet.hpp"

namespace lenet::engine {

// A bad flag or flag combination: the CLI prints it on one line and exits with status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Loss sum and correct count of the rows trained, and among those steps the index of the first whose
// loss was not finite, else -1 (tracked where each step's loss is summed: on a GPU, on the device).
struct TrainStats : model::StepStats {
  int64_t first_nonfinite_step = -1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu" or "cuda"
  virtual std::string mode() const = 0;  // "cpu", "naive" or "graph"
  // One entry per replica, e.g. {"cpu", "cpu"} or {"cuda:0", "cuda:0"}.
  virtual std::vector<std::string> devices() const = 0;
  // One step on the minibatch data[idx[0..rows)): split over the replicas, gradients summed across them,
  // every replica updated with w -= lr * g / rows.
  virtual void train_step(const io::Split& data, const uint32_t* idx, int rows, float lr) = 0;
  // What the steps since the last call add up to, and the counts set back to zero (read once per
  // epoch, so a GPU backend need not synchronise per step for them).
  virtual TrainStats take_train_stats() = 0;
  // Whether a step since then had a non-finite loss, where the host knows without waiting (the CPU
  // backend); a GPU mode says false and its divergence shows at the epoch's end.
  virtual bool diverged_without_waiting() const { return false; }
  // Returns when all enqueued work has finished (the end of an epoch's timed training pass).
  virtual void synchronize() {}
  // Correct predictions over the whole split. batch_size is the training minibatch; a backend may
  // evaluate in other batches, since the count does not depend on them.
  virtual int64_t count_correct(const io::Split& data, int batch_size) = 0;
  // Replica r's parameters, in the flat layout of model/lenet.hpp.
  virtual std::vector<float> parameters(int replica) const = 0;
  // Mode-specific numbers added to every metrics record (e.g. graph instantiations).
  virtual std::vector<std::pair<std::string, double>> counters() const { return {}; }
};

}  // namespace lenet::engine
