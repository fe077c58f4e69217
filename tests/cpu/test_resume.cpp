// Interrupted-then-resumed training equals uninterrupted training bit for bit (the shuffle of epoch e
// depends only on the seed and e, and a checkpoint holds everything else), whether the run stopped
// mid-epoch or at an epoch's end; and a diverging run is stopped with the epoch named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "engine/checkpoint.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/trainer.hpp"
#include "io/dataset.hpp"
#include "model/lenet.hpp"
#include "model/step_tracker.hpp"

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
  engine::train(b, data(), o, log, false);
  const std::vector<nlohmann::json> written = read_records(o.metrics_path);
  if (records != nullptr) *records = written;
  return b.parameters(0);
}

// Stops after `stop_after` steps with a checkpoint in a file, then resumes from that file. Both runs
// write their metrics to one file, whose records go to `records` when given.
std::vector<float> interrupted_and_resumed(uint64_t stop_after, std::vector<nlohmann::json>* records = nullptr) {
  const fs::path file = temporary(".safetensors");
  const fs::path metrics = temporary(".jsonl");
  std::ostringstream log;
  {
    engine::CpuBackend b(2, model::init_parameters<float>(options().seed));
    engine::TrainOptions o = options();
    o.metrics_path = metrics.string();
    uint64_t steps = 0;
    o.stop_requested = [&] { return ++steps == stop_after ? 2 : 0; };
    o.checkpoint = [&](int epoch, uint64_t step, const engine::EpochSoFar& so_far) {
      engine::save_checkpoint(file.string(), b.parameters(0),
                              {epoch, o.epochs, o.seed, step, o.lr, o.batch_size, 2, data().train.size(), so_far});
    };
    EXPECT_THROW(engine::train(b, data(), o, log, false), engine::TrainingStopped);
  }
  const engine::Checkpoint c = engine::load_checkpoint(file.string());
  fs::remove(file);
  const engine::TrainingState st = c.state.value();  // throws, failing the test, if the state is missing
  EXPECT_EQ(st.step, stop_after);
  EXPECT_EQ(st.epoch, int(stop_after / 16));
  engine::CpuBackend b(2, c.parameters);
  engine::TrainOptions o = options();
  o.start_step = st.step;
  o.start_so_far = st.epoch_so_far;
  o.metrics_path = metrics.string();
  const engine::TrainResult r = engine::train(b, data(), o, log, false);
  EXPECT_EQ(r.epochs.size(), size_t(o.epochs - int(stop_after / 16)));
  const std::vector<nlohmann::json> written = read_records(metrics);
  if (records != nullptr) *records = written;
  return b.parameters(0);
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
  }
}

TEST(Resume, MidEpochEqualsUninterruptedIncludingTheInterruptedEpochsRecord) {
  std::vector<nlohmann::json> resumed, whole;
  EXPECT_EQ(interrupted_and_resumed(5, &resumed), uninterrupted(&whole));
  expect_same_records(resumed, whole);
}

TEST(Resume, AtEpochEndEqualsUninterruptedAndKeepsTheEpochsRecord) {
  std::vector<nlohmann::json> resumed, whole;
  EXPECT_EQ(interrupted_and_resumed(16, &resumed), uninterrupted(&whole));
  // A stop after an epoch's last step still evaluates and records that epoch.
  expect_same_records(resumed, whole);
}

TEST(Resume, TheInterruptedEpochsMetricsCountTheStepsBeforeTheStop) {
  // Guards the test above: a resumed epoch that forgot the checkpoint's epoch_so_far would report the
  // loss and accuracy of its last 11 steps only.
  std::vector<nlohmann::json> whole;
  uninterrupted(&whole);
  engine::CpuBackend b(2, model::init_parameters<float>(options().seed));
  engine::TrainOptions o = options();
  o.start_step = 5;
  o.metrics_path = temporary(".jsonl").string();
  std::ostringstream log;
  engine::train(b, data(), o, log, false);
  const std::vector<nlohmann::json> forgetful = read_records(o.metrics_path);
  ASSERT_EQ(forgetful.size(), 2u);
  EXPECT_NE(forgetful[0]["train_acc"], whole[0]["train_acc"]);
}

TEST(Resume, StopNeverCheckpointsNonFiniteParameters) {
  engine::CpuBackend b(1, model::init_parameters<float>(1));
  engine::TrainOptions o = options();
  o.lr = 1e6;
  uint64_t steps = 0;
  int saved = 0;
  o.stop_requested = [&] { return ++steps == 12 ? 2 : 0; };
  o.checkpoint = [&](int, uint64_t, const engine::EpochSoFar&) { ++saved; };
  std::ostringstream log;
  EXPECT_THROW(engine::train(b, data(), o, log, false), engine::TrainingDiverged);
  EXPECT_EQ(saved, 0);
}

TEST(Resume, ResumedRunDiffersFromAFreshOne) {
  // Guards the two tests above: resuming must not simply restart from the initial parameters.
  engine::CpuBackend b(2, model::init_parameters<float>(options().seed));
  engine::TrainOptions o = options();
  o.start_step = 5;
  std::ostringstream log;
  engine::train(b, data(), o, log, false);
  EXPECT_NE(b.parameters(0), uninterrupted());
}

TEST(Diverging, NonFiniteLossStopsWithTheEpochNamed) {
  engine::CpuBackend b(1, model::init_parameters<float>(1));
  engine::TrainOptions o = options();
  o.lr = 1e6;
  int saved = 0;
  o.checkpoint = [&](int, uint64_t, const engine::EpochSoFar&) { ++saved; };
  std::ostringstream log;
  try {
    engine::train(b, data(), o, log, false);
    FAIL() << "training with lr 1e6 did not diverge";
  } catch (const engine::TrainingDiverged& e) {
    // 1000 examples in minibatches of 64: lr 1e6 overflows the loss within the first epoch's 16 steps.
    EXPECT_NE(std::string(e.what()).find("non-finite training loss in epoch 1, at step "), std::string::npos) << e.what();
  }
  EXPECT_EQ(saved, 0) << "a diverged epoch must not overwrite the last good checkpoint";
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
}

}  // namespace
