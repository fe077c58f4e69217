// The policy by which a GPU replica chooses its cuDNN convolution algorithms (model/conv_algos.hpp), run
// against a scripted device: which of cuDNN's candidates are tried, in which order, at which row counts,
// when one is passed over, and what the error says when none is left. model/cuda_lenet.cpp only maps
// cuDNN's structs and calls onto these.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/conv_algos.hpp"

namespace {

using lenet::model::choose_conv_algo;
using lenet::model::ConvAlgoChoice;
using lenet::model::ConvAlgoPerf;
using lenet::model::ConvAlgoTrials;
using lenet::model::fp32_deterministic;
using lenet::model::trial_rows;

TEST(ConvAlgoCandidates, DeterministicSuccessesWithFmaMathFirstThenDefaultMathNeverTensorOps) {
  const std::vector<ConvAlgoPerf> perf = {
      {7, true, true, ConvAlgoPerf::kTensorOp},  // tensor cores: TF32 rounding
      {1, true, true, ConvAlgoPerf::kDefault},
      {4, true, false, ConvAlgoPerf::kFma},  // not deterministic
      {0, true, true, ConvAlgoPerf::kFma},
      {5, false, true, ConvAlgoPerf::kFma},  // its status was not success
      {2, true, true, ConvAlgoPerf::kFma},
      {0, true, true, ConvAlgoPerf::kDefault},  // listed again with another math type
      {6, true, true, ConvAlgoPerf::kDefault},
  };
  EXPECT_EQ(fp32_deterministic(perf), (std::vector<int>{0, 2, 1, 6}));
  EXPECT_TRUE(fp32_deterministic({}).empty());
  EXPECT_TRUE(fp32_deterministic({{3, true, true, ConvAlgoPerf::kTensorOp}}).empty());
}

TEST(ConvAlgoCandidates, TrialRowsArePositiveAscendingOnceEachWithTheCapacity) {
  EXPECT_EQ(trial_rows({64, 0, 16, 64, 3}, 128), (std::vector<int>{3, 16, 64, 128}));
  EXPECT_EQ(trial_rows({}, 5), (std::vector<int>{5}));
  EXPECT_EQ(trial_rows({5, 5}, 5), (std::vector<int>{5}));
  try {
    trial_rows({4, 9}, 8);
    FAIL() << "a row count above the capacity was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "CudaLenet: row count 9 above the capacity 8");
  }
}

// A device whose answers are scripted per algorithm and row count; it logs every call in order.
struct ScriptedDevice {
  std::map<int, std::map<int, size_t>> need;               // algo -> rows -> workspace bytes (absent: query fails)
  std::set<std::pair<int, int>> failing_runs;              // (algo, rows) whose trial run fails
  std::set<size_t> unallocatable;                          // workspace sizes that cannot be reserved
  std::vector<std::string> log;
  size_t reserved = 0;

  ConvAlgoTrials trials() {
    ConvAlgoTrials t;
    t.workspace = [this](int algo, int rows, size_t* bytes) -> std::string {
      log.push_back("query " + std::to_string(algo) + "@" + std::to_string(rows));
      const auto a = need.find(algo);
      if (a == need.end() || a->second.count(rows) == 0) return "CUDNN_STATUS_NOT_SUPPORTED";
      *bytes = a->second.at(rows);
      return "";
    };
    t.reserve = [this](size_t bytes) {
      log.push_back("reserve " + std::to_string(bytes));
      if (unallocatable.count(bytes)) return false;
      reserved = bytes;
      return true;
    };
    t.run = [this](int algo, int rows, size_t bytes) -> std::string {
      log.push_back("run " + std::to_string(algo) + "@" + std::to_string(rows));
      EXPECT_EQ(bytes, reserved) << "a trial must run in the workspace reserved for it";
      return failing_runs.count({algo, rows}) ? "CUDNN_STATUS_EXECUTION_FAILED" : "";
    };
    t.settle = [this] { log.push_back("settle"); };
    return t;
  }
};

TEST(ConvAlgoChoice, TheFirstCandidateThatPassesEveryTrialAtEveryRowCountWins) {
  ScriptedDevice d;
  d.need[3] = {{8, 100}, {32, 400}, {64, 300}};
  d.need[1] = {{8, 0}, {32, 0}, {64, 0}};
  const ConvAlgoChoice c = choose_conv_algo({3, 1}, {8, 32, 64}, 1000, d.trials());
  EXPECT_EQ(c.algo, 3);
  EXPECT_EQ(c.workspace, 400u) << "the largest need over the row counts, not the last one's";
  EXPECT_EQ(c.passed_over, "");
  EXPECT_EQ(d.log, (std::vector<std::string>{"query 3@8", "query 3@32", "query 3@64", "reserve 400", "run 3@8",
                                             "run 3@32", "run 3@64", "settle"}))
      << "the second candidate is never tried";
}

TEST(ConvAlgoChoice, EachWayToFailPassesOverOneCandidateAndIsNamed) {
  ScriptedDevice d;
  d.need[0] = {{8, 10}};                 // no answer at 64 rows
  d.need[1] = {{8, 10}, {64, 5000}};     // above the cap at 64 rows
  d.need[2] = {{8, 700}, {64, 900}};     // its workspace cannot be reserved
  d.unallocatable = {900};
  d.need[4] = {{8, 20}, {64, 30}};       // fails its trial at 64 rows
  d.failing_runs = {{4, 64}};
  d.need[5] = {{8, 0}, {64, 0}};         // runs everywhere without a workspace
  const ConvAlgoChoice c = choose_conv_algo({0, 1, 2, 4, 5}, {8, 64}, 1000, d.trials());
  EXPECT_EQ(c.algo, 5);
  EXPECT_EQ(c.workspace, 0u);
  EXPECT_EQ(c.passed_over,
            "0: workspace query at 64 rows: CUDNN_STATUS_NOT_SUPPORTED; "
            "1: workspace of 5000 bytes at 64 rows; "
            "2: its workspace of 900 bytes could not be allocated; "
            "4: trial run at 64 rows: CUDNN_STATUS_EXECUTION_FAILED");
  EXPECT_EQ(d.log, (std::vector<std::string>{
                       "query 0@8", "query 0@64", "settle",                        // nothing reserved, nothing run
                       "query 1@8", "query 1@64", "settle",                        //
                       "query 2@8", "query 2@64", "reserve 900", "settle",         // nothing run
                       "query 4@8", "query 4@64", "reserve 30", "run 4@8", "run 4@64", "settle",
                       "query 5@8", "query 5@64", "reserve 0", "run 5@8", "run 5@64", "settle"}));
}

TEST(ConvAlgoChoice, AFailedQueryOrTrialStopsThatCandidatesLaterRowCounts) {
  ScriptedDevice d;
  d.need[0] = {{16, 1}, {32, 1}, {48, 1}};
  d.failing_runs = {{0, 16}};
  d.need[1] = {{32, 1}, {48, 1}};  // no answer at 16 rows
  const ConvAlgoChoice c = choose_conv_algo({0, 1}, {16, 32, 48}, 1000, d.trials());
  EXPECT_EQ(c.algo, -1);
  EXPECT_EQ(d.log, (std::vector<std::string>{"query 0@16", "query 0@32", "query 0@48", "reserve 1", "run 0@16",
                                             "settle", "query 1@16", "settle"}));
}

// Each way to fail names the row count it failed at, here the first of two, not the last one tried.
TEST(ConvAlgoChoice, AFailureNamesTheRowCountItHappenedAt) {
  ScriptedDevice d;
  d.need[0] = {{16, 1}, {48, 1}};
  d.failing_runs = {{0, 16}};
  d.need[1] = {{48, 1}};              // no answer at 16 rows
  d.need[2] = {{16, 2000}, {48, 1}};  // above the cap at 16 rows
  EXPECT_EQ(choose_conv_algo({0, 1, 2}, {16, 48}, 1000, d.trials()).passed_over,
            "0: trial run at 16 rows: CUDNN_STATUS_EXECUTION_FAILED; "
            "1: workspace query at 16 rows: CUDNN_STATUS_NOT_SUPPORTED; "
            "2: workspace of 2000 bytes at 16 rows");
}

TEST(ConvAlgoChoice, NoCandidateLeftSaysWhyEachWasPassedOverOrThatNoneWasListed) {
  ScriptedDevice d;
  d.need[2] = {{8, 2000}};
  const ConvAlgoChoice c = choose_conv_algo({2}, {8}, 1999, d.trials());
  EXPECT_EQ(c.algo, -1);
  EXPECT_EQ(c.passed_over, "2: workspace of 2000 bytes at 8 rows");

  ScriptedDevice empty;
  const ConvAlgoChoice none = choose_conv_algo({}, {8}, 1000, empty.trials());
  EXPECT_EQ(none.algo, -1);
  EXPECT_EQ(none.passed_over, "its heuristic listed no deterministic non-tensor-op candidate");
  EXPECT_TRUE(empty.log.empty());
}

TEST(ConvAlgoChoice, AWorkspaceExactlyAtTheCapIsAccepted) {
  ScriptedDevice d;
  d.need[9] = {{4, 1000}};
  EXPECT_EQ(choose_conv_algo({9}, {4}, 1000, d.trials()).algo, 9);
}

}  // namespace
