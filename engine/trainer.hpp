// The training loop of the source text: epochs of shuffled minibatches, each epoch's training pass
// timed (evaluation excluded), test accuracy after every epoch, one metrics record per epoch.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.hpp"
#include "engine/checkpoint.hpp"
#include "io/dataset.hpp"

namespace lenet::engine {

struct TrainOptions {
  int epochs = 10;
  int batch_size = 256;
  double lr = 0.2;
  uint64_t seed = 1;
  bool quiet = false;          // no progress display
  std::string metrics_path;    // JSON Lines, one object per epoch; empty: none
  // Where a resumed run starts: steps already done, counted over all epochs (epoch = start_step /
  // minibatches per epoch). The shuffle of epoch e depends only on (seed, e), so the steps after it
  // are exactly those of an uninterrupted run.
  uint64_t start_step = 0;
  // When start_step is in the middle of an epoch: that epoch's training before the stop (from the
  // checkpoint), so its metrics cover the whole epoch. Left zero there, the epoch's loss and accuracy
  // are understated (its rows before the stop count, their loss and hits do not).
  EpochSoFar start_so_far;
  // Polled after every step; a non-zero answer (a signal number) stops the run after that step (after
  // an epoch's last step, once the epoch is evaluated, recorded and checkpointed).
  std::function<int()> stop_requested;
  // Called with the state to save after every completed epoch (so_far zero) and when the run is
  // stopped in the middle of one.
  std::function<void(int completed_epochs, uint64_t steps_done, const EpochSoFar& so_far)> checkpoint;
};

// The run was stopped by options.stop_requested after a step (and checkpointed, when asked).
class TrainingStopped : public std::runtime_error {
 public:
  // `where`: "in epoch 2 after step 7 of 79 (step 86 of the run)", "after epoch 2".
  TrainingStopped(int signal, const std::string& where)
      : std::runtime_error("stopped by signal " + std::to_string(signal) + " " + where), signal(signal) {}
  int signal;
};

// A non-finite loss or parameter: training cannot go on. The epoch is not checkpointed.
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EpochMetrics {
  int epoch = 0;  // 1-based
  double train_loss = 0;  // mean over the epoch's examples
  double train_acc = 0;
  double test_acc = 0;
  double epoch_seconds = 0;  // training pass only
  double examples_per_second = 0;
};

struct TrainResult {
  std::vector<EpochMetrics> epochs;
  double mean_epoch_seconds = 0;
};

// Runs epochs up to options.epochs (from options.start_step). Progress goes to `progress` (a live line
// on a terminal, plain lines otherwise) unless options.quiet; `progress_is_terminal`: `progress` writes
// the terminal that stderr is, whose width the live line keeps within. Throws TrainingStopped and
// TrainingDiverged as described above.
TrainResult train(Backend& backend, const io::FashionMnist& data, const TrainOptions& options, std::ostream& progress,
                  bool progress_is_terminal);

// The metrics record of one epoch, with exactly the field names other tools rely on.
nlohmann::json epoch_record(const EpochMetrics& m, const Backend& backend, const TrainOptions& options);

// "test acc: 0.83, 12.4 sec/epoch on [cpu]": the source text's final line, seconds to 3 significant digits;
// negative seconds (evaluation only) print "no training" instead.
std::string final_line(double test_acc, double seconds_per_epoch, const std::vector<std::string>& devices);

// x to 3 significant digits (12.4, 3.04, 0.0123, 1230 for 1234), with an exponent only from 999,500 on
// (1e+06); 0, inf and nan as themselves.
std::string three_significant(double x);

}  // namespace lenet::engine
