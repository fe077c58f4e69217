// lenet-train as a user runs it: usage errors exit 2 with one clear line, runtime errors exit 1, a run
// prints the source text's final line and writes a metrics file with exactly the documented fields.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "engine/cuda_probe.hpp"

namespace {

using lenet::testing::Cli;
using lenet::testing::Result;
namespace fs = std::filesystem;

TEST_F(Cli, UsageErrorsExit2WithOneLine) {
  expect_usage_error("--no-such-flag", "--no-such-flag");
  expect_usage_error("--batch-size 0", "--batch-size");
  expect_usage_error("--batch-size abc", "--batch-size");
  expect_usage_error("--lr 0", "--lr");
  expect_usage_error("--lr -0.1", "--lr");
  expect_usage_error("--lr nan", "--lr");
  expect_usage_error("--lr inf", "--lr");
  expect_usage_error("--replicas 0", "--replicas");
  expect_usage_error("--replicas 257", "--replicas");
  expect_usage_error("--batch-size 4 --replicas 5", "--replicas");
  expect_usage_error("--num-gpus 0", "--num-gpus");
  expect_usage_error("--epochs 0", "--epochs");
  expect_usage_error("--train-limit 0", "--train-limit");
  expect_usage_error("--backend tpu", "--backend");
  expect_usage_error("--mode fast", "--mode");
}

TEST_F(Cli, BackendCudaWithoutDeviceIsAUsageError) {
  const lenet::engine::CudaProbe probe = lenet::engine::probe_cuda();
  if (!probe.no_device()) GTEST_SKIP() << "a CUDA device answers: " << probe.describe();
  expect_usage_error("--backend cuda", "--backend cuda: no CUDA device answers");
}

TEST_F(Cli, HelpAndVersionExit0) {
  Result r = run("--help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--num-gpus", "--replicas", "--batch-size", "--lr", "--epochs", "--backend", "--mode",
                           "--seed", "--data-dir", "--train-limit", "--test-limit", "--metrics", "--quiet"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("lenet-train"), std::string::npos) << r.out;
}

TEST_F(Cli, MissingDataExits1AndSaysHowToGetIt) {
  const Result r = run("--backend cpu --data-dir '" + (dir_ / "nowhere").string() + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("apt-get install dataset-fashion-mnist"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("train-images-idx3-ubyte"), std::string::npos) << r.err;
}

TEST_F(Cli, LimitLargerThanTheDataSetExits1) {
  const Result r = run("--backend cpu --train-limit 60001");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--train-limit"), std::string::npos) << r.err;
}

TEST_F(Cli, UnwritableMetricsFileExits1NamingIt) {
  const std::string path = (dir_ / "no-such-dir" / "m.jsonl").string();
  const Result r = run("--backend cpu --epochs 1 --train-limit 64 --test-limit 64 --metrics '" + path + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
}

TEST_F(Cli, RunPrintsFinalLineAndWritesMetrics) {
  const fs::path metrics = dir_ / "m.jsonl";
  const Result r = run("--backend cpu --num-gpus 2 --epochs 2 --batch-size 64 --train-limit 300 --test-limit 100 "
                       "--seed 17 --metrics '" + metrics.string() + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  // The source text's line: accuracy to 2 decimals, seconds to 3 significant digits, the devices.
  const std::regex final_line(R"(test acc: [01]\.\d\d, [0-9.]+ sec/epoch on \[cpu, cpu\]\n)");
  EXPECT_TRUE(std::regex_match(r.out, final_line)) << r.out;
  EXPECT_NE(r.err.find("epoch 2/2"), std::string::npos) << r.err;

  std::ifstream in(metrics);
  std::string line;
  int n = 0;
  const std::set<std::string> fields = {"epoch", "epochs", "train_loss", "train_acc", "test_acc", "epoch_seconds",
                                        "examples_per_second", "backend", "mode", "replicas", "devices",
                                        "batch_size", "lr", "seed"};
  while (std::getline(in, line)) {
    ++n;
    const nlohmann::json j = nlohmann::json::parse(line);
    std::set<std::string> keys;
    for (const auto& item : j.items()) keys.insert(item.key());
    EXPECT_EQ(keys, fields);
    EXPECT_EQ(j["epoch"], n);
    EXPECT_EQ(j["epochs"], 2);
    EXPECT_EQ(j["backend"], "cpu");
    EXPECT_EQ(j["replicas"], 2);
    EXPECT_EQ(j["devices"], nlohmann::json::array({"cpu", "cpu"}));
    EXPECT_EQ(j["batch_size"], 64);
    EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 0.2);
    EXPECT_EQ(j["seed"], 17);
    EXPECT_GT(j["epoch_seconds"].get<double>(), 0.0);
    EXPECT_GE(j["test_acc"].get<double>(), 0.0);
    EXPECT_LE(j["test_acc"].get<double>(), 1.0);
    EXPECT_NEAR(j["train_loss"].get<double>(), 2.30, 0.1);  // still on the ln 10 plateau after 10 small steps
  }
  EXPECT_EQ(n, 2);
}

TEST_F(Cli, QuietSilencesProgress) {
  const Result r = run("--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("epoch 1/1"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("sec/epoch on [cpu]"), std::string::npos) << r.out;
}

}  // namespace
