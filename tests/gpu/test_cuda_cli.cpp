// lenet-train on a GPU as a user runs it: device placement and its errors, and a short naive-mode run
// whose final line and metrics name the CUDA devices.
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "gpu_test.hpp"

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
  EXPECT_GT(first, 0);
}

}  // namespace
