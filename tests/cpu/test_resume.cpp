// Interrupted-then-resumed training equals uninterrupted training bit for bit (the shuffle of epoch e
// depends only on the seed and e, and a checkpoint holds everything else), whether the run stopped
// mid-epoch or at an epoch's end; and a diverging run is stopped with the epoch named.
#include <gtest/gtest.h>

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

std::vector<float> uninterrupted() {
  engine::CpuBackend b(2, model::init_parameters<float>(options().seed));
  std::ostringstream log;
  engine::train(b, data(), options(), log, false);
  return b.parameters(0);
}

// Stops after `stop_after` steps with a checkpoint in a file, then resumes from that file. Both runs
// write their metrics to one file; `epochs_recorded` receives the epoch numbers found there.
std::vector<float> interrupted_and_resumed(uint64_t stop_after, std::vector<int>* epochs_recorded = nullptr) {
  const fs::path file = fs::temp_directory_path() / ("lenet-resume-" + std::to_string(::getpid()) + ".safetensors");
  const fs::path metrics = fs::temp_directory_path() / ("lenet-resume-" + std::to_string(::getpid()) + ".jsonl");
  std::ostringstream log;
  {
    engine::CpuBackend b(2, model::init_parameters<float>(options().seed));
    engine::TrainOptions o = options();
    o.metrics_path = metrics.string();
    uint64_t steps = 0;
    o.stop_requested = [&] { return ++steps == stop_after ? 2 : 0; };
    o.checkpoint = [&](int epoch, uint64_t step) {
      engine::save_checkpoint(file.string(), b.parameters(0), {epoch, o.epochs, o.seed, step, o.lr, o.batch_size, 2});
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
  o.metrics_path = metrics.string();
  const engine::TrainResult r = engine::train(b, data(), o, log, false);
  EXPECT_EQ(r.epochs.size(), size_t(o.epochs - int(stop_after / 16)));
  if (epochs_recorded != nullptr) {
    std::ifstream in(metrics);
    std::string line;
    while (std::getline(in, line)) epochs_recorded->push_back(nlohmann::json::parse(line)["epoch"].get<int>());
  }
  fs::remove(metrics);
  return b.parameters(0);
}

TEST(Resume, MidEpochEqualsUninterrupted) { EXPECT_EQ(interrupted_and_resumed(5), uninterrupted()); }

TEST(Resume, AtEpochEndEqualsUninterruptedAndKeepsTheEpochsRecord) {
  std::vector<int> epochs;
  EXPECT_EQ(interrupted_and_resumed(16, &epochs), uninterrupted());
  EXPECT_EQ(epochs, (std::vector<int>{1, 2})) << "a stop after an epoch's last step still evaluates and records it";
}

TEST(Resume, StopNeverCheckpointsNonFiniteParameters) {
  engine::CpuBackend b(1, model::init_parameters<float>(1));
  engine::TrainOptions o = options();
  o.lr = 1e6;
  uint64_t steps = 0;
  int saved = 0;
  o.stop_requested = [&] { return ++steps == 12 ? 2 : 0; };
  o.checkpoint = [&](int, uint64_t) { ++saved; };
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
  o.checkpoint = [&](int, uint64_t) { ++saved; };
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

}  // namespace
