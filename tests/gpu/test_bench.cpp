// lenet-bench on a GPU: one short configuration of each mode, and every column of its table filled with
// a finite number (CUPTI's counts included), the allreduce sweep, the projection and each mode's per-step
// timeline present. A build without CUPTI must leave exactly CUPTI's columns empty, say why, and write
// no timeline.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "gpu_test.hpp"
#include "profiling/bench_model.hpp"
#include "profiling/cupti_trace.hpp"

namespace {

class BenchTool : public lenet::testing::Cli {};

TEST_F(BenchTool, ShortRunFillsEveryColumn) {
  LENET_REQUIRE_GPU();
  const std::string json = (dir_ / "b.json").string();
  const std::string cmd = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_BENCH_EXE "' --modes naive,graph "
                          "--replicas 2 --num-gpus 1 --train-limit 2048 --test-limit 512 --epochs 1 "
                          "--allreduce-replicas 2 --json '" + json + "' --markdown '" + (dir_ / "b.md").string() +
                          "' >'" + (dir_ / "out").string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string output = lenet::testing::slurp(dir_ / "out");
  ASSERT_EQ(status, 0) << output;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["rows"].size(), 2u);
  const bool cupti = lenet::profiling::CuptiTrace::available();
  for (const auto& row : j["rows"]) {
    for (const char* key : {"seconds_per_epoch", "examples_per_second", "host_enqueue_ms_per_step", "test_acc"}) {
      ASSERT_TRUE(row.contains(key) && row[key].is_number()) << row["name"] << ": " << key << " missing";
      EXPECT_TRUE(std::isfinite(row[key].get<double>())) << row["name"] << ": " << key;
    }
    for (const char* key : {"kernel_ms_per_step", "idle_ms_per_step", "kernel_launches_per_step",
                            "graph_launches_per_step", "allreduce_ms_per_step"}) {
      ASSERT_TRUE(row.contains(key)) << row["name"] << ": " << key << " missing";
      if (cupti) {
        ASSERT_TRUE(row[key].is_number()) << row["name"] << ": " << key << " empty\n" << output;
        EXPECT_TRUE(std::isfinite(row[key].get<double>())) << row["name"] << ": " << key;
      } else {
        EXPECT_TRUE(row[key].is_null()) << row["name"] << ": " << key << " filled by a build without CUPTI";
      }
    }
  }
  if (cupti) {
    EXPECT_GT(j["rows"][1]["graph_launches_per_step"].get<double>(), 0.5) << "graph mode replays a graph per step";
    EXPECT_LT(j["rows"][1]["kernel_launches_per_step"].get<double>(),
              j["rows"][0]["kernel_launches_per_step"].get<double>())
        << "graph mode launches fewer kernels from the host";
    EXPECT_EQ(output.find("CUPTI: "), std::string::npos) << "records lost or left out\n" << output;
  } else {
    EXPECT_NE(output.find("this build found no CUPTI"), std::string::npos) << output;
  }
  EXPECT_GT(j["allreduce"].size(), 0u);
  EXPECT_EQ(j["projection"].size(), 8u);
  for (const auto& p : j["projection"])
    EXPECT_NE(output.find(p["link"].get<std::string>() + ", latency "), std::string::npos)
        << "the projection's text gives each link's figures and their source\n" << output;
  EXPECT_GT(j["floor"]["seconds_at_peak_fp32"].get<double>(), 0.0);
  // Per-step timelines of both modes, from CUPTI; the graph mode's is traced second, where CUPTI 13.0's
  // correlation ids of graph launches are wrong (bench_model.hpp).
  for (const std::string mode : {"naive", "graph"}) {
    const std::filesystem::path path = dir_ / ("timeline-" + mode + "-r2.json");
    if (!cupti) {
      EXPECT_FALSE(std::filesystem::exists(path)) << mode << ": a timeline without CUPTI";
      continue;
    }
    std::ifstream timeline(path);
    ASSERT_TRUE(timeline) << mode << ": no timeline\n" << output;
    const nlohmann::json t = nlohmann::json::parse(timeline);
    ASSERT_EQ(t["steps"].size(), 8u) << mode << ": 2048 examples in steps of 256";
    for (const auto& step : t["steps"])
      EXPECT_GT(step["busy_ms"].get<double>(), 0.0) << mode << " step " << step["step"];
  }
}

}  // namespace
