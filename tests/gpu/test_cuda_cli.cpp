// lenet-train on a GPU as a user runs it: device placement and its errors, short runs whose final line
// and metrics name the CUDA devices and mode, and a run resumed from its checkpoint.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "gpu_test.hpp"
#include "train_steps.hpp"

namespace {

using lenet::testing::Cli;
using lenet::testing::Result;

TEST_F(Cli, MoreGpusThanVisibleIsAUsageErrorSuggestingReplicas) {
  LENET_REQUIRE_GPU();
  const Result r = run("--backend cuda --num-gpus 1000");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("visible"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--replicas"), std::string::npos) << r.err;
}

TEST_F(Cli, NaiveRunOnSharedGpuNamesItsDevices) {
  LENET_REQUIRE_GPU();
  const std::string metrics = (dir_ / "m.jsonl").string();
  const Result r = run("--backend cuda --mode naive --num-gpus 1 --replicas 2 --epochs 2 --train-limit 1000 "
                       "--test-limit 300 --metrics '" + metrics + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("sec/epoch on [cuda:0, cuda:0]"), std::string::npos) << r.out;
  std::ifstream in(metrics);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["backend"], "cuda");
    EXPECT_EQ(j["mode"], "naive");
    EXPECT_EQ(j["devices"], nlohmann::json::array({"cuda:0", "cuda:0"}));
    ++n;
  }
  EXPECT_EQ(n, 2);
}

TEST_F(Cli, GraphModeIsTheDefaultAndReportsInstantiations) {
  LENET_REQUIRE_GPU();
  const std::string metrics = (dir_ / "m.jsonl").string();
  const Result r = run("--backend cuda --num-gpus 1 --epochs 2 --train-limit 1000 --test-limit 300 --metrics '" +
                       metrics + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("sec/epoch on [cuda:0]"), std::string::npos) << r.out;
  std::ifstream in(metrics);
  std::string line;
  double first = -1;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["mode"], "graph");
    ASSERT_TRUE(j.contains("graph_instantiations")) << line;
    if (first < 0) first = j["graph_instantiations"].get<double>();
    EXPECT_EQ(j["graph_instantiations"].get<double>(), first) << "instantiated again during training";
  }
  EXPECT_EQ(first, 2) << "one graph per staging slot, at start-up";
}

// Run for one epoch and resumed to two through the command line, a run on a GPU writes the checkpoint
// bytes of an uninterrupted two-epoch run, in either mode. Three replicas: the modes sum in other orders.
// The resumed run is given no --backend or --mode: it keeps the checkpoint's mode (its metrics name it;
// naive is not the default). Given another mode, it trains as asked and says that the bits will differ.
TEST_F(Cli, ResumeOnAGpuEqualsUninterruptedInTheCheckpointsMode) {
  LENET_REQUIRE_GPU();
  // Not quiet: where the bits differ, what the three runs printed (the cuDNN algorithms each chose among
  // it) comes with the failure.
  const std::string common = "--num-gpus 1 --replicas 3 --batch-size 96 --train-limit 1000 --test-limit 300 ";
  for (const std::string mode : {"naive", "graph"}) {
    const std::string whole = (dir_ / (mode + "-whole.safetensors")).string();
    const std::string part = (dir_ / (mode + "-part.safetensors")).string();
    const std::string metrics = (dir_ / (mode + ".jsonl")).string();
    const Result w = run("--backend cuda --mode " + mode + " " + common + "--epochs 2 --save '" + whole + "'");
    ASSERT_EQ(w.status, 0) << mode << ": " << w.err;
    const Result p = run("--backend cuda --mode " + mode + " " + common + "--epochs 1 --save '" + part + "'");
    ASSERT_EQ(p.status, 0) << mode << ": " << p.err;
    const Result r = run("--num-gpus 1 --epochs 2 --resume '" + part + "' --metrics '" + metrics + "'");
    ASSERT_EQ(r.status, 0) << r.err;
    // Its algorithms and its epoch's line, and no notice (of another mode, say).
    std::istringstream err(r.err);
    for (std::string l; std::getline(err, l);)
      EXPECT_TRUE(l.rfind("lenet-train: replica ", 0) == 0 || l.rfind("epoch 2/2: ", 0) == 0) << mode << ": " << l;
    std::ifstream in(metrics);
    std::string line;
    ASSERT_TRUE(std::getline(in, line)) << mode;
    EXPECT_EQ(nlohmann::json::parse(line)["mode"], mode);
    EXPECT_EQ(lenet::testing::checkpoint_difference(part, whole), "")
        << mode << ": resumed checkpoint differs; the uninterrupted run printed\n"
        << w.out << w.err << "the interrupted one\n"
        << p.out << p.err << "the resumed one\n"
        << r.out << r.err;
  }
  const Result other =
      run("--quiet --num-gpus 1 --mode graph --epochs 3 --resume '" + (dir_ / "naive-part.safetensors").string() + "'");
  EXPECT_EQ(other.status, 0) << other.err;
  EXPECT_NE(other.err.find("the interrupted run trained on CUDA in naive mode and this one trains on CUDA in graph mode"),
            std::string::npos)
      << other.err;
}

}  // namespace
