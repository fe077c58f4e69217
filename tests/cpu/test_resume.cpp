// Interrupted-then-resumed training equals uninterrupted training bit for bit (the shuffle of epoch e
// depends only on the seed and e, and a checkpoint holds everything else), whether the run stopped
// mid-epoch or at an epoch's end; a diverging run is stopped with the epoch named; and the trainer's
// progress lines and metrics records say what the backend's steps did.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <pty.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "engine/checkpoint.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/trainer.hpp"
#include "io/dataset.hpp"
#include "model/lenet.hpp"
#include "model/step_tracker.hpp"
#include "train_steps.hpp"

namespace {

using namespace lenet;
namespace fs = std::filesystem;

const io::FashionMnist& data() {
  static const io::FashionMnist d = io::load_fashion_mnist(LENET_TEST_DATA_DIR, 1000, 200);
  return d;
}

engine::TrainOptions options() {
  engine::TrainOptions o;
  o.epochs = 2;
  o.batch_size = 64;  // 16 steps per epoch, the last of 40 rows
  o.seed = 8;
  o.quiet = true;
  return o;
}

std::vector<nlohmann::json> read_records(const fs::path& metrics) {
  std::vector<nlohmann::json> records;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) records.push_back(nlohmann::json::parse(line));
  fs::remove(metrics);
  return records;
}

fs::path temporary(const std::string& suffix) {
  return fs::temp_directory_path() / ("lenet-resume-" + std::to_string(::getpid()) + suffix);
}

// The final parameters; the metrics records go to `records` when given.
std::vector<float> uninterrupted(std::vector<nlohmann::json>* records = nullptr) {
  engine::CpuBackend b(2, model::init_parameters<float>(options().seed));
  engine::TrainOptions o = options();
  o.metrics_path = temporary(".jsonl").string();
  std::ostringstream log;
  const engine::TrainResult result = engine::train(b, data(), o, log, false);
  const std::vector<nlohmann::json> written = read_records(o.metrics_path);
  if (records != nullptr) *records = written;
  // The final line's seconds are the mean of the epochs' (not their sum), and the last record's test
  // accuracy is the final parameters' over the test set (not over the training set's size).
  EXPECT_EQ(result.epochs.size(), 2u);
  EXPECT_NEAR(result.mean_epoch_seconds, (written.at(0)["epoch_seconds"].get<double>() +
                                          written.at(1)["epoch_seconds"].get<double>()) / 2,
              1e-12 * result.mean_epoch_seconds);
  EXPECT_EQ(written.back()["test_acc"].get<double>(),
            double(b.count_correct(data().test, o.batch_size)) / double(data().test.size()));
  return b.parameters(0);
}

// A run stopped after stops[0] of its steps and checkpointed to a file, resumed from that file and
// stopped after stops[1] of its own steps, and so on; the last resumed run goes to the end. Every run
// writes to one metrics file; the records go to `records`, each stop's epoch_so_far to `saved`. With
// `forget_so_far`, the resumed runs ignore the checkpoint's epoch_so_far (a guard for the tests).
struct Interrupted {
  std::vector<float> parameters;
  std::vector<nlohmann::json> records;
  std::vector<engine::EpochSoFar> saved;
};

Interrupted interrupted_and_resumed(const std::vector<uint64_t>& stops, bool forget_so_far = false) {
  const fs::path file = temporary(".safetensors"), metrics = temporary(".jsonl");
  std::ostringstream log;
  Interrupted out;
  out.parameters = model::init_parameters<float>(options().seed);
  engine::TrainingState st;  // step 0, nothing carried over
  uint64_t stopped_at = 0;
  for (size_t run = 0; run <= stops.size(); ++run) {
    engine::CpuBackend b(2, out.parameters);
    engine::TrainOptions o = options();
    o.metrics_path = metrics.string();
    o.start_step = st.step;
    if (!forget_so_far) o.start_so_far = st.epoch_so_far;
    if (run == stops.size()) {
      engine::train(b, data(), o, log, false);
      out.parameters = b.parameters(0);
      break;
    }
    uint64_t steps = 0;
    o.stop_requested = [&steps, stop = stops[run]] { return ++steps == stop ? 2 : 0; };
    o.checkpoint = [&](int epoch, uint64_t step, const engine::EpochSoFar& so_far) {
      engine::save_checkpoint(file.string(), b.parameters(0),
                              {epoch, o.epochs, o.seed, step, o.lr, o.batch_size, 2, data().train.size(), so_far});
    };
    EXPECT_THROW(engine::train(b, data(), o, log, false), engine::TrainingStopped);
    const engine::Checkpoint c = engine::load_checkpoint(file.string());
    st = c.state.value();  // throws, failing the test, if the state is missing
    stopped_at += stops[run];
    EXPECT_EQ(st.step, stopped_at);
    EXPECT_EQ(st.epoch, int(stopped_at / 16));
    out.parameters = c.parameters;
    out.saved.push_back(st.epoch_so_far);
  }
  fs::remove(file);
  out.records = read_records(metrics);
  return out;
}

// The resumed run's records say what the uninterrupted run's say, except the time taken: the epoch
// that was interrupted reports its loss and accuracy over all its steps, before and after the stop.
void expect_same_records(const std::vector<nlohmann::json>& resumed, const std::vector<nlohmann::json>& whole) {
  ASSERT_EQ(resumed.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    SCOPED_TRACE("record " + std::to_string(i));
    EXPECT_EQ(resumed[i]["epoch"], whole[i]["epoch"]);
    EXPECT_EQ(resumed[i]["train_acc"], whole[i]["train_acc"]);
    EXPECT_EQ(resumed[i]["test_acc"], whole[i]["test_acc"]);
    // The loss sum is added up in another order (before the stop, then after it): double rounding only.
    const double a = resumed[i]["train_loss"], b = whole[i]["train_loss"];
    EXPECT_LE(std::fabs(a - b), 1e-12 * b) << a << " vs " << b;
    EXPECT_GT(resumed[i]["epoch_seconds"].get<double>(), 0.0);
    // Examples per second over the whole epoch, in both runs: all 1000 examples in its seconds.
    for (const auto* r : {&resumed[i], &whole[i]})
      EXPECT_NEAR((*r)["examples_per_second"].get<double>() * (*r)["epoch_seconds"].get<double>(),
                  double(data().train.size()), 1e-9 * double(data().train.size()));
  }
}

// Interrupted at `stops` and resumed, the parameters and records equal the uninterrupted run's.
Interrupted expect_same_as_uninterrupted(const std::vector<uint64_t>& stops) {
  std::vector<nlohmann::json> whole;
  const std::vector<float> want = uninterrupted(&whole);
  Interrupted got = interrupted_and_resumed(stops);
  EXPECT_EQ(lenet::testing::bit_difference(got.parameters, want), "");
  expect_same_records(got.records, whole);
  return got;
}

TEST(Resume, MidEpochEqualsUninterruptedIncludingTheInterruptedEpochsRecord) { expect_same_as_uninterrupted({5}); }

TEST(Resume, AtEpochEndEqualsUninterruptedAndKeepsTheEpochsRecord) {
  // A stop after an epoch's last step still evaluates and records that epoch, and carries nothing over.
  EXPECT_EQ(expect_same_as_uninterrupted({16}).saved.at(0).correct, 0u);
}

TEST(Resume, StoppedTwiceInOneEpochStillRecordsTheWholeEpoch) {
  const Interrupted got = expect_same_as_uninterrupted({5, 4});  // steps 1-5, 6-9, then 10-32
  // The second checkpoint carries the first one's part of the epoch on: 9 steps' counts and seconds.
  ASSERT_EQ(got.saved.size(), 2u);
  EXPECT_GT(got.saved[1].correct, got.saved[0].correct);
  EXPECT_GT(got.saved[1].loss_sum, got.saved[0].loss_sum);
  EXPECT_GT(got.saved[1].seconds, got.saved[0].seconds);
  EXPECT_GT(got.records[0]["epoch_seconds"].get<double>(), got.saved[1].seconds);
}

TEST(Resume, ForgettingTheCheckpointsEpochSoFarChangesTheRecord) {
  // Guards the tests above: the same resumed parameters, but the interrupted epoch's loss and hits
  // before the stop left out, must give another record.
  std::vector<nlohmann::json> whole;
  const std::vector<float> want = uninterrupted(&whole);
  const Interrupted got = interrupted_and_resumed({5}, true);
  EXPECT_EQ(lenet::testing::bit_difference(got.parameters, want), "");
  ASSERT_EQ(got.records.size(), 2u);
  EXPECT_NE(got.records[0]["train_acc"], whole[0]["train_acc"]);
  EXPECT_NE(got.records[0]["train_loss"], whole[0]["train_loss"]);
}

// The trainer asks whether to stop once after each step but an epoch's last, and once after each epoch
// but the last; the stop it throws carries the signal that answer gave (a second look could see another).
TEST(Resume, AStopIsAskedForOnceAndCarriesItsSignal) {
  for (const uint64_t stop_at : {uint64_t{5}, uint64_t{16}}) {  // 16 steps an epoch: call 16 follows epoch 1
    engine::CpuBackend b(1, model::init_parameters<float>(1));
    engine::TrainOptions o = options();
    uint64_t asked = 0;
    o.stop_requested = [&] { return ++asked == stop_at ? 15 : 0; };
    std::ostringstream log;
    try {
      engine::train(b, data(), o, log, false);
      ADD_FAILURE() << "no stop at call " << stop_at;
    } catch (const engine::TrainingStopped& e) {
      EXPECT_EQ(e.signal, 15) << e.what();
      EXPECT_EQ(asked, stop_at);
      EXPECT_EQ(std::string(e.what()), stop_at == 5 ? "stopped by signal 15 in epoch 1 after step 5 of 16 (step 5 of the run)"
                                                    : "stopped by signal 15 after epoch 1");
    }
  }
}

TEST(Resume, ResumedRunDiffersFromAFreshOne) {
  // Guards the resume tests above: resuming must not simply restart from the initial parameters.
  engine::CpuBackend b(2, model::init_parameters<float>(options().seed));
  engine::TrainOptions o = options();
  o.start_step = 5;
  std::ostringstream log;
  engine::train(b, data(), o, log, false);
  EXPECT_NE(b.parameters(0), uninterrupted());
}

TEST(Trainer, SecondsShowThreeSignificantDigits) {
  EXPECT_EQ(engine::three_significant(0.0123456), "0.0123");
  EXPECT_EQ(engine::three_significant(9.996), "10.0");
  EXPECT_EQ(engine::three_significant(123.45), "123");
  EXPECT_EQ(engine::three_significant(98765.4), "98800");
  EXPECT_EQ(engine::three_significant(999499.0), "999000");
  EXPECT_EQ(engine::three_significant(999500.0), "1e+06");
  EXPECT_EQ(engine::three_significant(1e300), "1e+300");
}

TEST(Trainer, EmptyTrainingSetIsRefusedNotDividedBy) {
  engine::CpuBackend b(1, model::init_parameters<float>(1));
  io::FashionMnist empty;
  empty.test = data().test;
  std::ostringstream log;
  EXPECT_THROW(engine::train(b, empty, options(), log, false), std::invalid_argument);
}

TEST(Diverging, NonFiniteLossStopsWithTheEpochNamed) {
  engine::CpuBackend b(1, model::init_parameters<float>(1));
  engine::TrainOptions o = options();
  o.lr = 1e6;
  int saved = 0, steps_done = 0;
  o.checkpoint = [&](int, uint64_t, const engine::EpochSoFar&) { ++saved; };
  o.stop_requested = [&] { return ++steps_done, 0; };  // asked after each step but an epoch's last
  std::ostringstream log;
  try {
    engine::train(b, data(), o, log, false);
    FAIL() << "training with lr 1e6 did not diverge";
  } catch (const engine::TrainingDiverged& e) {
    // 1000 examples in minibatches of 64: lr 1e6 overflows the loss within the first epoch's 16 steps.
    // The CPU backend sees each step's loss on the host, so the run stops at the step that diverged
    // rather than training out the epoch.
    EXPECT_NE(std::string(e.what()).find("non-finite training loss in epoch 1, at step " + std::to_string(steps_done + 1) +
                                         " of 16 "),
              std::string::npos)
        << e.what() << " (steps done before it: " << steps_done << ")";
  }
  EXPECT_EQ(saved, 0) << "a diverged epoch must not overwrite the last good checkpoint";
}

// A backend that trains nothing and goes bad at one chosen step of the run (counted from 0): its loss
// becomes NaN there, or only its parameters do (an update that overflows after a finite loss).
class ScriptedBackend : public engine::Backend {
 public:
  ScriptedBackend(uint64_t bad_step, bool loss_goes_bad) : bad_step_(bad_step), loss_goes_bad_(loss_goes_bad) {}
  std::string name() const override { return "scripted"; }
  std::string mode() const override { return "scripted"; }
  std::vector<std::string> devices() const override { return {"none"}; }
  void train_step(const io::Split&, const uint32_t*, int, float) override {
    if (steps_ == bad_step_ && loss_goes_bad_) first_bad_since_take_ = int64_t(steps_ - take_start_);
    if (steps_ == bad_step_ && !loss_goes_bad_) params_bad_ = true;
    ++steps_;
  }
  engine::TrainStats take_train_stats() override {
    engine::TrainStats st;
    st.loss_sum = first_bad_since_take_ >= 0 ? std::nan("") : 1.0;
    st.first_nonfinite_step = std::exchange(first_bad_since_take_, -1);
    take_start_ = steps_;
    return st;
  }
  int64_t count_correct(const io::Split&, int) override { return 0; }
  std::vector<float> parameters(int) const override {
    return std::vector<float>(model::kNumParameters, params_bad_ ? INFINITY : 0.0f);
  }

 private:
  uint64_t bad_step_, steps_ = 0, take_start_ = 0;
  bool loss_goes_bad_, params_bad_ = false;
  int64_t first_bad_since_take_ = -1;
};

// A stop asked for after the parameters went bad (at step 4, without a non-finite loss, so nothing
// before the stop notices) ends the run as diverged, without the checkpoint a stop writes.
TEST(Resume, StopNeverCheckpointsNonFiniteParameters) {
  ScriptedBackend b(3, /*loss_goes_bad=*/false);
  engine::TrainOptions o = options();
  int asked = 0, saved = 0;
  o.stop_requested = [&] { return ++asked == 6 ? 2 : 0; };  // after step 6 of 16
  o.checkpoint = [&](int, uint64_t, const engine::EpochSoFar&) { ++saved; };
  std::ostringstream log;
  EXPECT_THROW(engine::train(b, data(), o, log, false), engine::TrainingDiverged);
  EXPECT_EQ(asked, 6);
  EXPECT_EQ(saved, 0);
}

// What the trainer says of a run that goes bad at run step `bad_step` (1000 examples in minibatches
// of 64: 16 steps an epoch, unless `batch_size` says otherwise), and how many checkpoints it wrote before.
std::pair<std::string, int> diverge_at(uint64_t bad_step, bool loss_goes_bad, int batch_size = 64) {
  ScriptedBackend b(bad_step, loss_goes_bad);
  engine::TrainOptions o = options();
  o.batch_size = batch_size;
  int saved = 0;
  o.checkpoint = [&](int, uint64_t, const engine::EpochSoFar&) { ++saved; };
  std::ostringstream log;
  try {
    engine::train(b, data(), o, log, false);
  } catch (const engine::TrainingDiverged& e) {
    return {e.what(), saved};
  }
  return {"did not diverge", saved};
}

TEST(Diverging, TheMessageNamesTheStepWhoseLossWasNotFinite) {
  // Run step 22 (from 0) is the 7th step of epoch 2 and the 23rd of the run.
  const auto [message, saved] = diverge_at(22, true);
  EXPECT_EQ(message, "non-finite training loss in epoch 2, at step 7 of 16 (step 23 of the run); try a smaller --lr");
  EXPECT_EQ(saved, 1);
}

TEST(Diverging, ParametersThatOverflowAfterAFiniteLossStopTheRunToo) {
  // The loss of a step is computed before its update: the last step's update can overflow unseen.
  const auto [message, saved] = diverge_at(15, false);
  EXPECT_EQ(message, "non-finite parameters in epoch 1, between steps 1 and 16 of 16; try a smaller --lr");
  EXPECT_EQ(saved, 0) << "the overflowed parameters must not be checkpointed";
  // An epoch of one step: that step.
  EXPECT_EQ(diverge_at(1, false, 1000).first,
            "non-finite parameters in epoch 2, at step 1 of 1 (step 2 of the run); try a smaller --lr");
}

// A resumed run that diverges says so: its lr came from the checkpoint, so only a new run can change it.
TEST(Diverging, AResumedRunIsToldToStartAgain) {
  ScriptedBackend b(6, /*loss_goes_bad=*/true);  // its 7th step
  engine::TrainOptions o = options();
  o.start_step = 16;  // epoch 2 from its start
  std::ostringstream log;
  try {
    engine::train(b, data(), o, log, false);
    ADD_FAILURE() << "did not diverge";
  } catch (const engine::TrainingDiverged& e) {
    EXPECT_EQ(std::string(e.what()), "non-finite training loss in epoch 2, at step 7 of 16 (step 23 of the run); "
                                     "start again with a smaller --lr (a resumed run keeps its own)");
  }
}

// A fresh run (start_step 0) replaces what a metrics file held; only a resumed run appends to it.
TEST(Resume, AFreshRunReplacesAnOldMetricsFile) {
  engine::CpuBackend b(1, model::init_parameters<float>(1));
  engine::TrainOptions o = options();
  o.epochs = 1;
  o.metrics_path = temporary("-old.jsonl").string();
  std::ofstream(o.metrics_path) << "an older run's record\n";
  std::ostringstream log;
  engine::train(b, data(), o, log, false);
  const std::vector<nlohmann::json> records = read_records(o.metrics_path);  // the old line is not JSON
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].at("epoch"), 1);
}

// The epoch's checkpoint comes before its metrics record: a save that fails leaves no record claiming an
// epoch that a resumed run would train again.
TEST(Resume, AFailedEpochCheckpointLeavesNoRecordOfTheEpoch) {
  engine::CpuBackend b(1, model::init_parameters<float>(1));
  engine::TrainOptions o = options();
  o.metrics_path = temporary("-ckpt.jsonl").string();
  o.checkpoint = [](int, uint64_t, const engine::EpochSoFar&) { throw engine::CheckpointError("disk full"); };
  std::ostringstream log;
  EXPECT_THROW(engine::train(b, data(), o, log, false), engine::CheckpointError);
  EXPECT_TRUE(read_records(o.metrics_path).empty());
}

// No stop is asked for after the last epoch: a signal during its evaluation leaves a finished run finished.
TEST(Resume, NoStopIsAskedForAfterTheLastEpoch) {
  engine::CpuBackend b(1, model::init_parameters<float>(1));
  engine::TrainOptions o = options();
  uint64_t asked = 0;
  o.stop_requested = [&] { return ++asked > 31 ? 15 : 0; };  // 15 + 1 + 15 asks in 2 epochs of 16 steps
  std::ostringstream log;
  EXPECT_NO_THROW(engine::train(b, data(), o, log, false));
  EXPECT_EQ(asked, 31u);
}

// A backend that trains nothing: each step keeps the rows it is given in `steps`, adds `loss_per_row` per row
// to the loss sum, gets half its rows right and takes `step_time` (so that the examples/s a live line shows
// has a known number of digits); a quarter of a split counts as right. Its counters are what a record adds
// to the documented fields.
class FixedBackend : public engine::Backend {
 public:
  explicit FixedBackend(double loss_per_row, std::chrono::milliseconds step_time = {})
      : loss_per_row_(loss_per_row), step_time_(step_time) {}
  std::string name() const override { return "fixed"; }
  std::string mode() const override { return "fixed"; }
  std::vector<std::string> devices() const override { return {"none"}; }
  void train_step(const io::Split&, const uint32_t* idx, int rows, float) override {
    steps.emplace_back(idx, idx + rows);
    if (step_time_.count() > 0) std::this_thread::sleep_for(step_time_);
    stats_.loss_sum += loss_per_row_ * rows;
    stats_.correct += rows / 2;
  }
  engine::TrainStats take_train_stats() override { return std::exchange(stats_, engine::TrainStats{}); }
  int64_t count_correct(const io::Split& split, int) override { return int64_t(split.size() / 4); }
  std::vector<float> parameters(int) const override { return std::vector<float>(model::kNumParameters, 0.0f); }
  std::vector<std::pair<std::string, double>> counters() const override { return counters_; }

  std::vector<std::pair<std::string, double>> counters_;
  std::vector<std::vector<uint32_t>> steps;

 private:
  double loss_per_row_;
  std::chrono::milliseconds step_time_;
  engine::TrainStats stats_;
};

// While it lives, stderr (whose terminal width a live line keeps within) is the file descriptor `fd`.
class StderrAs {
 public:
  explicit StderrAs(int fd) : saved_(::dup(STDERR_FILENO)) { ::dup2(fd, STDERR_FILENO); }
  ~StderrAs() {
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
  }
  StderrAs(const StderrAs&) = delete;
  StderrAs& operator=(const StderrAs&) = delete;

 private:
  int saved_;
};

// What train() shows on a terminal (`terminal`) or in plain lines, with stderr /dev/null (no width to keep
// within) while it runs; TrainingStopped ends it early.
std::string progress_of(engine::Backend& b, const engine::TrainOptions& o, bool terminal) {
  std::ostringstream log;
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  {
    const StderrAs quiet_stderr(null);
    try {
      engine::train(b, data(), o, log, terminal);
    } catch (const engine::TrainingStopped&) {
    }
  }
  ::close(null);
  return log.str();
}

// Each epoch's steps take the minibatches of its shuffle in turn, together every training example once;
// a run resumed mid-epoch is given the rows the uninterrupted run was given from that step on.
TEST(Trainer, EachEpochsStepsTrainOnEveryExampleOnce) {
  FixedBackend whole(0.0);
  std::ostringstream log;
  engine::train(whole, data(), options(), log, false);
  ASSERT_EQ(whole.steps.size(), 32u);  // 2 epochs of 16 steps
  for (size_t e = 0; e < 2; ++e) {
    SCOPED_TRACE("epoch " + std::to_string(e + 1));
    std::vector<uint32_t> rows;
    for (size_t s = 16 * e; s < 16 * (e + 1); ++s) {
      EXPECT_EQ(whole.steps[s].size(), s % 16 == 15 ? 40u : 64u) << "step " << s;
      rows.insert(rows.end(), whole.steps[s].begin(), whole.steps[s].end());
    }
    std::sort(rows.begin(), rows.end());
    std::vector<uint32_t> every(data().train.size());
    std::iota(every.begin(), every.end(), 0u);
    EXPECT_EQ(rows, every);
  }
  FixedBackend resumed(0.0);
  engine::TrainOptions o = options();
  o.start_step = 5;
  engine::train(resumed, data(), o, log, false);
  EXPECT_EQ(resumed.steps, std::vector<std::vector<uint32_t>>(whole.steps.begin() + 5, whole.steps.end()));
}

// Each epoch's line says what its metrics record says: the loss to 4 decimals, the train and the test
// accuracy (here 0.5 and 0.25) to 3, the seconds to 3 significant digits, the examples per second whole.
TEST(Trainer, EpochLineSaysWhatTheRecordSays) {
  FixedBackend b(2.302585);
  engine::TrainOptions o = options();
  o.quiet = false;
  o.metrics_path = temporary("-lines.jsonl").string();
  const std::string shown = progress_of(b, o, false);
  const std::vector<nlohmann::json> records = read_records(o.metrics_path);
  ASSERT_EQ(records.size(), 2u);
  std::string want;
  for (const nlohmann::json& r : records) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "epoch %d/2: train loss %.4f, train acc %.3f, test acc %.3f, %s s (%.0f examples/s)\n",
                  r["epoch"].get<int>(), r["train_loss"].get<double>(), r["train_acc"].get<double>(),
                  r["test_acc"].get<double>(), engine::three_significant(r["epoch_seconds"].get<double>()).c_str(),
                  r["examples_per_second"].get<double>());
    want += line;
  }
  EXPECT_EQ(shown, want);
  EXPECT_NE(shown.find("train loss 2.3026, train acc 0.500, test acc 0.250, "), std::string::npos) << shown;
}

// A mean loss of a million is shown in scientific notation, one just below it with 4 decimals.
TEST(Trainer, EpochLineShowsALossFromAMillionOnInScientificNotation) {
  for (const auto& [loss, shown] : {std::pair<double, std::string>{999999.5, "999999.5000"}, {1e6, "1.0000e+06"}}) {
    FixedBackend b(loss);  // 1000 rows of it: an exact sum and mean
    engine::TrainOptions o = options();
    o.epochs = 1;
    o.quiet = false;
    const std::string said = progress_of(b, o, false);
    EXPECT_EQ(said.rfind("epoch 1/1: train loss " + shown + ", ", 0), 0u) << said;
  }
}

// On a terminal the live line is drawn at an epoch's first step (nothing drawn yet) and always at its
// last, whatever the 4-a-second limit held back between (steps here take microseconds); the bar has 30
// columns filled in proportion, and the epoch's line clears the live line first, leaving none open.
TEST(Trainer, LiveLineShowsTheEpochsLastStepAndMakesWayForTheEpochsLine) {
  FixedBackend b(2.0);
  engine::TrainOptions o = options();
  o.quiet = false;
  const std::string said = progress_of(b, o, true);
  const std::string clear = "\r\x1b[2K";
  EXPECT_NE(said.find(clear + "epoch 1/2 [#" + std::string(29, '.') + "] 1/16 steps, "), std::string::npos) << said;
  for (const std::string epoch : {"1", "2"}) {
    const std::string last = clear + "epoch " + epoch + "/2 [" + std::string(30, '#') + "] 16/16 steps, ";
    EXPECT_NE(said.find(last), std::string::npos) << said;
    EXPECT_NE(said.find(" examples/s" + clear + "epoch " + epoch + "/2: train loss "), std::string::npos) << said;
  }
  ASSERT_FALSE(said.empty());
  EXPECT_EQ(said.back(), '\n') << said;
}

// A stop (or an error) leaving the loop while a live line is open clears it, so that the message said next
// starts on an empty row.
TEST(Trainer, AStopClearsTheLiveLine) {
  FixedBackend b(2.0);
  engine::TrainOptions o = options();
  o.quiet = false;
  int asked = 0;
  o.stop_requested = [&] { return ++asked == 5 ? 15 : 0; };
  const std::string said = progress_of(b, o, true);
  ASSERT_EQ(asked, 5) << said;
  ASSERT_NE(said.find("] 1/16 steps, "), std::string::npos) << "no live line was drawn: " << said;
  EXPECT_EQ(said.substr(said.rfind('\r')), "\r\x1b[2K") << said;
}

// A live line exactly as wide as the terminal is cut to one column less too: a full row would leave the
// cursor at its end, where the next draw's clear would not reach a row it wrapped to. One step of 1000
// rows that takes 0.3 s draws "epoch 1/1 [" + 30 '#' + "] 1/1 steps, NNNN examples/s", 69 columns (the
// rate has 4 digits for any step of 0.1 to 1 s), on a terminal of 69.
TEST(Trainer, LiveLineAsWideAsTheTerminalIsCut) {
  struct winsize size {};
  size.ws_row = 24;
  size.ws_col = 69;
  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, &size), 0) << std::strerror(errno);
  FixedBackend b(2.0, std::chrono::milliseconds(300));
  engine::TrainOptions o = options();
  o.epochs = 1;
  o.batch_size = 1000;
  o.quiet = false;
  std::ostringstream log;
  {
    const StderrAs terminal(slave);
    engine::train(b, data(), o, log, true);
  }
  ::close(slave);
  ::close(master);
  const std::string said = log.str(), start = "\r\x1b[2Kepoch 1/1 [" + std::string(30, '#') + "] 1/1 steps, ";
  ASSERT_EQ(said.rfind(start, 0), 0u) << said;
  const std::string line = said.substr(5, said.find('\r', 5) - 5);
  EXPECT_EQ(line.size(), 68u) << line;
  EXPECT_EQ(line.substr(line.size() - 10), " examples/") << line;
}

// The documented fields, then the backend's counters (a CUDA graph backend's instantiations).
TEST(Trainer, RecordHoldsTheBackendsCounters) {
  FixedBackend b(2.0);
  b.counters_ = {{"graph_instantiations", 3}};
  engine::EpochMetrics m;
  m.epoch = 1;
  const nlohmann::json r = engine::epoch_record(m, b, options());
  EXPECT_EQ(r.at("graph_instantiations"), 3.0);
  EXPECT_EQ(r.at("backend"), "fixed");
  EXPECT_EQ(r.size(), 15u) << r.dump();
}

// Seconds of 0 and non-finite ones are shown as themselves, not worked through a logarithm; only negative
// seconds per epoch (an evaluation) make the final line say "no training".
TEST(Trainer, ZeroAndNonFiniteSecondsAreShownAsThemselves) {
  EXPECT_EQ(engine::three_significant(0.0), "0");
  EXPECT_EQ(engine::three_significant(INFINITY), "inf");
  EXPECT_EQ(engine::three_significant(NAN), "nan");
  EXPECT_EQ(engine::final_line(0.5, 0.0, {"cpu"}), "test acc: 0.50, 0 sec/epoch on [cpu]");
  EXPECT_EQ(engine::final_line(0.5, -1.0, {"cpu", "cpu"}), "test acc: 0.50, no training on [cpu, cpu]");
}

// A metrics file that cannot be opened (its folder is missing) is named with the system's reason.
TEST(Trainer, MetricsFileThatCannotBeOpenedIsNamedWithTheReason) {
  FixedBackend b(2.0);
  engine::TrainOptions o = options();
  o.metrics_path = (temporary("-missing") / "m.jsonl").string();
  std::ostringstream log;
  try {
    engine::train(b, data(), o, log, false);
    ADD_FAILURE() << "trained without its metrics file";
  } catch (const io::DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              o.metrics_path + ": cannot open the --metrics file for writing (No such file or directory)");
  }
}

// The rule the CPU backend and the GPU loss kernel share (model/step_tracker.hpp).
TEST(Diverging, StepTrackerKeepsTheFirstNonFiniteStep) {
  model::StepTracker t;
  EXPECT_EQ(model::first_bad_step(t), -1);
  for (double loss : {2.3, 0.0, HUGE_VAL, 1.0, std::nan(""), 5.0}) model::track_step(t, loss);
  EXPECT_EQ(t.steps, 6);
  EXPECT_EQ(model::first_bad_step(t), 2);
  model::StepTracker u;
  model::track_step(u, std::nan(""));
  EXPECT_EQ(model::first_bad_step(u), 0);
  EXPECT_EQ(model::earlier_bad_step(-1, -1), -1);
  EXPECT_EQ(model::earlier_bad_step(-1, 4), 4);
  EXPECT_EQ(model::earlier_bad_step(4, -1), 4);
  EXPECT_EQ(model::earlier_bad_step(7, 2), 2);
  EXPECT_EQ(model::earlier_bad_step(2, 7), 2);  // the order replicas are folded in does not matter
}

// Step 0 is a step: a replica whose very first step diverged is not one that never did.
TEST(Diverging, EarlierBadStepCountsStepZero) {
  EXPECT_EQ(model::earlier_bad_step(0, -1), 0);
  EXPECT_EQ(model::earlier_bad_step(-1, 0), 0);
  EXPECT_EQ(model::earlier_bad_step(0, 3), 0);
  EXPECT_EQ(model::earlier_bad_step(3, 0), 0);
}

}  // namespace
