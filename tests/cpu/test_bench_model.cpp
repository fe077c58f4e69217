// lenet-bench's arithmetic and writers against hand-computed values, and the tool itself on the CPU
// backend (its GPU columns are checked by tests/gpu/test_bench.cpp where a GPU answers).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "byte_files.hpp"
#include "cli_runner.hpp"
#include "model/gemm.hpp"
#include "model/lenet.hpp"
#include "profiling/bench_model.hpp"

namespace {

using namespace lenet::profiling;

TEST(BenchModel, FlopsMatchAHandCountPerLayer) {
  const double conv1 = 2.0 * 20 * (1 * 3 * 3) * (26 * 26);   // 243,360
  const double conv2 = 2.0 * 50 * (20 * 5 * 5) * (9 * 9);    // 4,050,000
  const double fc1 = 2.0 * 800 * 128, fc2 = 2.0 * 128 * 10;  // 204,800 and 2,560
  EXPECT_EQ(lenet::model::forward_flops_per_example(), 4500720.0);
  EXPECT_EQ(conv1 + conv2 + fc1 + fc2, 4500720.0);
  // Backward: a weight gradient per layer and an input gradient per layer but conv1.
  EXPECT_EQ(lenet::model::train_flops_per_example(), 3 * 4500720.0 - conv1);
  EXPECT_NEAR(lenet::model::train_flops_per_example() * 60000 / 1e12, 0.80, 0.01);  // "about 0.8 TFLOP"
}

TEST(BenchModel, BandwidthFollowsNcclTests) {
  EXPECT_DOUBLE_EQ(algbw(1e9, 0.5), 2e9);
  EXPECT_DOUBLE_EQ(allreduce_busbw(10.0, 2), 10.0);
  EXPECT_DOUBLE_EQ(allreduce_busbw(10.0, 4), 15.0);
  EXPECT_DOUBLE_EQ(allreduce_busbw(10.0, 8), 17.5);
}

TEST(BenchModel, BusyAndIdleFromKernelIntervals) {
  // Device 0: [0,10] and [5,15] overlap, then a 5 ns gap, then [20,30]; device 1: one kernel.
  const BusyIdle r = busy_and_idle({{20, 30, 0}, {0, 10, 0}, {100, 110, 1}, {5, 15, 0}});
  EXPECT_NEAR(r.kernel_seconds, 40e-9, 1e-18);
  EXPECT_NEAR(r.busy_seconds, 35e-9, 1e-18);
  EXPECT_NEAR(r.idle_seconds, 5e-9, 1e-18);
  EXPECT_EQ(busy_and_idle({}).busy_seconds, 0.0);
  // A kernel that runs inside a longer one (another stream) ends the span no earlier.
  const BusyIdle nested = busy_and_idle({{0, 100, 0}, {10, 20, 0}});
  EXPECT_NEAR(nested.busy_seconds, 100e-9, 1e-18);
  EXPECT_EQ(nested.idle_seconds, 0.0);
  // A gap of 1 ns is idle, not merged into the run before it.
  const BusyIdle gap1 = busy_and_idle({{11, 20, 0}, {0, 10, 0}});
  EXPECT_NEAR(gap1.busy_seconds, 19e-9, 1e-18);
  EXPECT_NEAR(gap1.idle_seconds, 1e-9, 1e-18);
  // Two devices whose kernels interleave in time: each device's span and gaps are its own (device 0:
  // busy 20 of [0,40]; device 1: busy 25 of [5,45]), whatever the other device runs meanwhile.
  const BusyIdle two = busy_and_idle({{30, 40, 0}, {5, 20, 1}, {0, 10, 0}, {35, 45, 1}});
  EXPECT_NEAR(two.kernel_seconds, 45e-9, 1e-18);
  EXPECT_NEAR(two.busy_seconds, 45e-9, 1e-18);
  EXPECT_NEAR(two.idle_seconds, (20 + 15) * 1e-9, 1e-18);
}

TEST(BenchModel, UnionOfIntervalsOnAnyDevice) {
  // [0,10] on device 0 and [5,20] on device 1 overlap: 20 ns, not the 25 their durations add up to;
  // then [30,40] on device 2 after a gap. busy_and_idle, per device, would give 35 ns.
  EXPECT_NEAR(union_seconds({{5, 20, 1}, {30, 40, 2}, {0, 10, 0}}), 30e-9, 1e-18);
  EXPECT_EQ(union_seconds({}), 0.0);
}

TEST(BenchModel, KernelsAreJoinedToTheirLaunchCallByCorrelationId) {
  const std::vector<std::pair<uint32_t, LaunchedKernel>> kernels = {
      {4, {{10, 20, 0}, 0, 0, 0}},     // launched directly by call 4
      {5, {{30, 40, 1}, 0, 0, 0}},     // call 5 was not recorded
      {8, {{50, 60, 0}, 77, 3, 12}},   // graph 3's node 12: kept as is, whatever id it has
      {2, {{70, 80, 1}, 0, 0, 0}}};    // call 2
  const std::unordered_map<uint32_t, uint64_t> api_start = {{2, 65}, {4, 7}, {8, 45}};
  const JoinedLaunches j = join_launches(kernels, api_start);
  EXPECT_EQ(j.unplaced, 1u);
  ASSERT_EQ(j.launched.size(), 3u);
  EXPECT_EQ(j.launched[0].run.start, 10u);
  EXPECT_EQ(j.launched[0].launched, 7u);
  EXPECT_EQ(j.launched[1].launched, 77u) << "a graph kernel's launch time is not looked up";
  EXPECT_EQ(j.launched[1].graph, 3u);
  EXPECT_EQ(j.launched[1].graph_node, 12u);
  EXPECT_EQ(j.launched[2].run.device, 1u);
  EXPECT_EQ(j.launched[2].launched, 65u);
}

TEST(BenchModel, KernelsGoToTheStepThatLaunchedThem) {
  // Steps start on the host at 0, 100 and 200; kernels run later (a graph replay runs behind the host).
  const std::vector<LaunchedKernel> k = {
      {{150, 160, 0}, 10},   // launched in step 0, runs during the host's step 1
      {{170, 180, 0}, 20},   // step 0: 10 ns of idle between its two kernels
      {{260, 290, 0}, 120},  // step 1
      {{5, 6, 0}, -1ull},    // launched "after" every step start: the last step
      {{1, 2, 0}, 0}};       // at the very start of step 0
  const std::vector<BusyIdle> steps = per_step_busy_idle(k, {0, 100, 200});
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_NEAR(steps[0].busy_seconds, 21e-9, 1e-18);
  EXPECT_NEAR(steps[0].idle_seconds, (180 - 1 - 21) * 1e-9, 1e-18);
  EXPECT_NEAR(steps[1].busy_seconds, 30e-9, 1e-18);
  EXPECT_NEAR(steps[2].busy_seconds, 1e-9, 1e-18);
  EXPECT_EQ(per_step_busy_idle({{{1, 2, 0}, 5}}, {10}).at(0).busy_seconds, 0.0) << "launched before the first step";
}

TEST(BenchModel, GraphKernelsGoToTheReplaysInTheirOrder) {
  // Four steps alternate two graphs (7: nodes 1, 2; 9: nodes 3, 4). The graph kernels' launch times are
  // deliberately wrong (as CUPTI 13.0's correlation ids can make them): only node runs place them.
  auto graph_kernel = [](uint64_t start, uint64_t end, uint32_t graph, uint64_t node) {
    return LaunchedKernel{{start, end, 0}, 0, graph, node};
  };
  const std::vector<LaunchedKernel> k = {
      graph_kernel(1230, 1231, 7, 2), graph_kernel(1105, 1140, 9, 4), graph_kernel(1000, 1010, 7, 1),
      graph_kernel(1300, 1302, 9, 3), graph_kernel(1200, 1230, 7, 1), graph_kernel(1020, 1030, 7, 2),
      graph_kernel(1100, 1105, 9, 3), graph_kernel(1310, 1312, 9, 4),
      {{1150, 1160, 0}, 150}};  // launched directly, in step 1
  const std::vector<BusyIdle> steps = per_step_busy_idle(k, {0, 100, 200, 300});
  ASSERT_EQ(steps.size(), 4u);
  const double busy[] = {20, 40 + 10, 31, 4}, idle[] = {10, 10, 0, 8};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(steps[i].busy_seconds, busy[i] * 1e-9, 1e-18) << "step " << i;
    EXPECT_NEAR(steps[i].idle_seconds, idle[i] * 1e-9, 1e-18) << "step " << i;
  }
  // Four replays for three or five steps, and a node that missed a replay: no timeline rather than a
  // wrong one.
  EXPECT_THROW(per_step_busy_idle(k, {0, 100, 200}), std::runtime_error);
  EXPECT_THROW(per_step_busy_idle(k, {0, 100, 200, 300, 400}), std::runtime_error);
  std::vector<LaunchedKernel> missing = k;
  missing.erase(missing.begin());  // graph 7 node 2's second run
  EXPECT_THROW(per_step_busy_idle(missing, {0, 100, 200, 300}), std::runtime_error);
}

TEST(BenchModel, GraphReplaysRankByFirstStartAndNodesAgreeWithinTheirGraph) {
  auto graph_kernel = [](uint64_t start, uint64_t end, uint32_t graph, uint64_t node) {
    return LaunchedKernel{{start, end, 0}, 0, graph, node};
  };
  // Graph 9's replay (another stream) starts after graph 7's and ends before it: graph 7's is step 0.
  const std::vector<BusyIdle> nested =
      per_step_busy_idle({graph_kernel(50, 60, 9, 3), graph_kernel(0, 100, 7, 1)}, {0, 100});
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_NEAR(nested[0].busy_seconds, 100e-9, 1e-18);
  EXPECT_NEAR(nested[1].busy_seconds, 10e-9, 1e-18);
  // Graphs replayed unequally often (graph 7 three times, graph 9 once): every node of a graph ran as
  // often as the graph's others, which is all that is asked.
  const std::vector<BusyIdle> uneven = per_step_busy_idle(
      {graph_kernel(0, 1, 7, 1), graph_kernel(2, 3, 7, 2), graph_kernel(10, 11, 7, 1), graph_kernel(12, 13, 7, 2),
       graph_kernel(20, 21, 9, 3), graph_kernel(30, 31, 7, 1), graph_kernel(32, 33, 7, 2)},
      {0, 100, 200, 300});
  ASSERT_EQ(uneven.size(), 4u);
  const double busy[] = {2, 2, 1, 2};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(uneven[i].busy_seconds, busy[i] * 1e-9, 1e-18) << "step " << i;
  // A node that ran more often than its graph's first node (an extra run of node 2, not one missed).
  EXPECT_THROW(per_step_busy_idle({graph_kernel(0, 1, 7, 1), graph_kernel(2, 3, 7, 2), graph_kernel(12, 13, 7, 2)},
                                  {0, 100}),
               std::runtime_error);
}

TEST(BenchModel, PeakAndProjection) {
  EXPECT_EQ(fp32_lanes_per_sm(9, 0), 128);
  EXPECT_EQ(fp32_lanes_per_sm(6, 0), 64);   // P100
  EXPECT_EQ(fp32_lanes_per_sm(6, 1), 128);  // GP10x
  EXPECT_EQ(fp32_lanes_per_sm(8, 0), 64);   // A100
  EXPECT_EQ(fp32_lanes_per_sm(8, 6), 128);  // GA10x
  EXPECT_EQ(fp32_lanes_per_sm(8, 9), 128);  // Ada
  EXPECT_EQ(fp32_lanes_per_sm(7, 5), 64);   // Turing
  EXPECT_EQ(fp32_lanes_per_sm(6, 1), 128);  // consumer Pascal
  EXPECT_EQ(fp32_lanes_per_sm(3, 0), 0);
  EXPECT_EQ(fp32_lanes_per_sm(10, 0), 128);  // B200
  EXPECT_EQ(fp32_lanes_per_sm(12, 0), 128);  // RTX 50
  EXPECT_NEAR(peak_fp32_flops(132, 128, 1.98e9), 66.9e12, 0.1e12);  // H200 SXM: 67 TFLOP/s FP32
  EXPECT_EQ(ring_allreduce_seconds(1, 1e6, 1e-6, 1e9), 0.0);
  EXPECT_DOUBLE_EQ(ring_allreduce_seconds(4, 1e6, 1e-6, 1e9), 6e-6 + 1.5e-3);
  EXPECT_DOUBLE_EQ(projected_epoch_seconds(100, 1e-3, 2, 1e6, 1e-6, 1e9), 100 * (1e-3 + 2e-6 + 1e-3));
}

BenchRow sample_row(const std::string& name, double seconds) {
  BenchRow r;
  r.name = name;
  r.impl = "lenet-dp";
  r.mode = "graph";
  r.replicas = 2;
  r.devices = {"cuda:0", "cuda:0"};
  r.batch_size = 256;
  r.lr = 0.2;
  r.epochs = 3;
  r.train_examples = 60000;
  r.seconds_per_epoch = seconds;
  if (seconds > 0) r.examples_per_second = 60000 / seconds;
  r.kernel_ms_per_step = 0.5;
  r.test_acc = 0.83;
  r.test_acc_per_epoch = {0.1, 0.6, 0.83};
  return r;
}

// A row of the PyTorch peer's textbook variant on the CPU, with lenet-bench's default batch and lr.
BenchRow textbook_peer_row(int64_t train_examples) {
  BenchRow r;
  r.name = "pytorch-textbook R=1";
  r.impl = "pytorch-textbook";
  r.mode = "textbook";
  r.replicas = 1;
  r.devices = {"cpu"};
  r.batch_size = 256;
  r.lr = 0.2;
  r.epochs = 2;
  r.train_examples = train_examples;
  r.seconds_per_epoch = 22.0;
  return r;
}

TEST(BenchModel, JsonRoundTripAndMarkdown) {
  const BenchRow a = sample_row("naive R=1", 2.0);
  BenchRow b = sample_row("graph R=2", 0.5);
  b.epoch_seconds = {0.7, 0.49, 0.51};  // a warm-up epoch, then the timed ones
  b.seconds_per_epoch_spread = epoch_spread({0.49, 0.51});
  const BenchRow back = row_from_json(to_json(b));
  EXPECT_EQ(to_json(back), to_json(b));
  EXPECT_TRUE(to_json(b)["idle_ms_per_step"].is_null());
  // A list of rows, a number, null: not a row, and said so (not "without \"name\"").
  for (const nlohmann::json& not_a_row : {nlohmann::json::array({to_json(b)}), nlohmann::json(5), nlohmann::json()}) {
    try {
      row_from_json(not_a_row);
      ADD_FAILURE() << not_a_row.dump() << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), std::string("a JSON ") + not_a_row.type_name() + ", not an object");
    }
  }
  nlohmann::json missing = to_json(b);
  missing.erase("test_acc");
  EXPECT_THROW(row_from_json(missing), std::runtime_error);
  missing = to_json(b);  // a row from before the spread
  missing.erase("seconds_per_epoch_spread");
  EXPECT_FALSE(row_from_json(missing).seconds_per_epoch_spread.has_value());
  // Numbers out of their field's range are refused by name, not converted (1e10 replicas into an int).
  for (const auto& [key, value, says] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"replicas", 1e10, "\"replicas\" is 10000000000.0, not an integer from 1 to 64"},
           {"replicas", 65, "\"replicas\" is 65, not an integer from 1 to 64"},
           {"replicas", 1, "\"devices\" is [\"cuda:0\",\"cuda:0\"], not a list of one device per replica (1)"},
           {"devices", nlohmann::json::array(), "\"devices\" is [], not a list of one device per replica (2)"},
           {"devices", "cuda:0", "\"devices\" is \"cuda:0\", not a list of one device per replica (2)"},
           {"devices", {"cuda:0", 1}, "\"devices\" is 1, not a name on one line"},
           {"epochs", 2, "\"test_acc_per_epoch\" has 3 entries, not one per epoch (2)"},
           {"epoch_seconds", {1.0, 1.0}, "\"epoch_seconds\" has 2 entries, not one per epoch (3)"},
           {"name", 5, "\"name\" is 5, not a name on one line"},
           {"replicas", 1.5, "\"replicas\" is 1.5, not an integer"},
           {"batch_size", "256", "\"batch_size\" is \"256\", not an integer"},
           {"train_examples", 1e30, "\"train_examples\" is 1e+30, not an integer from 0 to 9007199254740992"},
           {"lr", 0, "\"lr\" is 0, not a number"},
           {"seconds_per_epoch", -1.0, "\"seconds_per_epoch\" is -1.0, not a number from 0"},
           {"test_acc", 7.5, "\"test_acc\" is 7.5, not a number from 0 to 1"},
           {"test_acc", 0.5, "\"test_acc\" is 0.5, not the last epoch's (0.83)"},
           {"epochs", 0, "\"epochs\" is 0, not an integer from 1 to"},
           {"test_acc_per_epoch", {0.5, -3}, "\"test_acc_per_epoch\" is -3, not a number from 0 to 1"},
           {"test_acc_per_epoch", 0.5, "\"test_acc_per_epoch\" is not a list"},
           {"epoch_seconds", {1.0, "x"}, "\"epoch_seconds\" is \"x\", not a number"},
           {"seconds_per_epoch_spread", -0.5, "\"seconds_per_epoch_spread\" is -0.5, not a number from 0"},
           {"name", "a\nb", "\"name\" is \"a\\nb\", not a name on one line"},
           {"name", "a\xc2\x9b" "b", "\"name\" is \"a\xc2\x9b" "b\", not a name on one line"},  // U+009B, CSI
           {"mode", "", "\"mode\" is \"\", not a name on one line"},
           {"seconds_per_epoch", 0, "\"seconds_per_epoch\" is 0, not a measurement"},
           {"examples_per_second", 0, "\"examples_per_second\" is 0, not a measurement"},
           {"examples_per_second", 99999,
            "\"examples_per_second\" is 99999, not \"train_examples\" over \"seconds_per_epoch\" ("},
           // 2 % off
           {"examples_per_second", 122400, "\"examples_per_second\" is 122400, not \"train_examples\" over"},
           {"batch_size", 0, "\"batch_size\" is 0, not an integer from 1 to"},
           {"test_acc_per_epoch", {1.5, 0.6, 0.83}, "\"test_acc_per_epoch\" is 1.5, not a number from 0 to 1"}}) {
    nlohmann::json bad = to_json(b);
    bad[key] = value;
    try {
      row_from_json(bad);
      ADD_FAILURE() << key << " = " << value.dump() << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
  // The ends of the fields' ranges are values, as is a rate within 1 %; a row from before
  // "train_examples" is not held to a rate it cannot be checked against.
  nlohmann::json edge = to_json(b);
  edge["replicas"] = 64;
  edge["devices"] = std::vector<std::string>(64, "cuda:0");
  edge["test_acc"] = 1.0;
  edge["test_acc_per_epoch"] = {0.1, 0.6, 1.0};
  edge["examples_per_second"] = 120000 * 1.005;
  EXPECT_EQ(row_from_json(edge).replicas, 64);
  nlohmann::json old = to_json(b);
  old.erase("train_examples");
  old["examples_per_second"] = 99999;
  EXPECT_EQ(row_from_json(old).train_examples, 0);
  const std::string md = markdown_table({a, b}, "naive R=1");
  EXPECT_NE(md.find("| naive R=1 | 2.000 | - |"), std::string::npos) << md;  // no spread: one epoch timed
  EXPECT_NE(md.find("| graph R=2 | 0.500 | 2.0% |"), std::string::npos) << md;  // 0.49 and 0.51: ±0.01 of 0.5
  EXPECT_NE(md.find("| 0.8300 | 0.250 |"), std::string::npos) << md;  // graph takes 0.25 of naive's time
  EXPECT_NE(md.find("| - |"), std::string::npos) << md;               // unmeasured columns
  // A '|' in a name stays inside its cell; a huge time keeps its magnitude (not cut to a buffer's 63 digits).
  BenchRow odd = sample_row("a|b", 1e300);
  const std::string md2 = markdown_table({odd, a}, "a|b");
  EXPECT_NE(md2.find("| a\\|b | 1.000e+300 |"), std::string::npos) << md2;
  EXPECT_NE(md2.find("time vs a\\|b |"), std::string::npos) << md2;
  // A reference that took no time (a peer file may say 0) gives no ratios, not infinities.
  const std::string md3 = markdown_table({sample_row("zero", 0.0), a}, "zero");
  EXPECT_EQ(md3.find("inf"), std::string::npos) << md3;
  EXPECT_NE(md3.find("| 0.8300 | - |"), std::string::npos) << md3;
  // The reference is found by name wherever it is; a row that took no time has no ratio; 1e12 takes the exponent.
  const std::string md4 = markdown_table({b, a, sample_row("zero", 0.0), sample_row("tera", 1e12)}, "naive R=1");
  EXPECT_NE(md4.find("| graph R=2 | 0.500 |"), std::string::npos) << md4;
  EXPECT_NE(md4.find("| 0.8300 | 0.250 |\n| naive R=1 |"), std::string::npos) << md4;
  EXPECT_NE(md4.find("| 0.8300 | 1.000 |\n| zero |"), std::string::npos) << md4;
  EXPECT_NE(md4.find("| 0.8300 | - |\n| tera | 1.000e+12 |"), std::string::npos) << md4;
}

TEST(BenchModel, EpochSpreadIsHalfTheRangeOverTheMean) {
  EXPECT_FALSE(epoch_spread({}).has_value());
  EXPECT_FALSE(epoch_spread({2.0}).has_value());
  EXPECT_DOUBLE_EQ(*epoch_spread({2.0, 2.0}), 0.0);
  EXPECT_DOUBLE_EQ(*epoch_spread({3.0, 1.0, 2.0}), 0.5);  // range 2, mean 2
  EXPECT_DOUBLE_EQ(*epoch_spread({1.0, 1.0, 4.0}), 0.75);  // range 3, mean 2
  EXPECT_FALSE(epoch_spread({0.0, 0.0}).has_value());  // no time: no spread, not 0/0
}

TEST(BenchModel, PeerRowsOfOtherSettingsAreFlagged) {
  BenchRow peer;
  peer.name = "peer";
  peer.batch_size = 256;
  peer.lr = 0.2;
  peer.train_examples = 60000;
  EXPECT_EQ(peer_mismatch(peer, 60000, 256, 0.2), "");
  EXPECT_EQ(peer_mismatch(peer, 500, 64, 0.1),
            "Note: peer ran on 60000 training examples (this run: 500), used batch 256 (this run: 64) and used lr 0.2 "
            "(this run: 0.1): its numbers do not compare with the others.\n");
  EXPECT_EQ(peer_mismatch(peer, 70000, 256, 0.2),  // a smaller training set than this run's, too
            "Note: peer ran on 60000 training examples (this run: 70000): its numbers do not compare with the "
            "others.\n");
  peer.train_examples = 0;  // a row from before the field existed
  EXPECT_EQ(peer_mismatch(peer, 60000, 256, 0.2),
            "Note: peer does not record its training-set size (this run: 60000): its numbers do not compare with the "
            "others.\n");
}

class BenchTool : public lenet::testing::Cli {};

TEST_F(BenchTool, CpuRowsWriteJsonAndMarkdown) {
  const std::string json = (dir_ / "b.json").string(), md = (dir_ / "b.md").string();
  // A result there before is replaced whole (a new file renamed over it), not written over in place: a
  // second name of the old file keeps the old result, and the new file keeps the old one's permissions.
  std::ofstream(json) << "old result\n";
  std::filesystem::create_hard_link(json, dir_ / "kept.json");
  std::filesystem::permissions(json, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const std::string cmd = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_BENCH_EXE "' --modes cpu --replicas 1,2 "
                          "--replicas 2 --train-limit 512 --test-limit 128 --epochs 1 --json '" + json + "' --markdown '" + md +
                          "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["rows"].size(), 2u);  // R = 2, named twice, measured once
  for (const auto& row : j["rows"]) {
    const BenchRow r = row_from_json(row);
    ASSERT_TRUE(r.seconds_per_epoch.has_value());
    EXPECT_GT(*r.seconds_per_epoch, 0.0);
    EXPECT_EQ(r.test_acc_per_epoch.size(), 2u);  // warm-up and timed epoch
    ASSERT_EQ(r.epoch_seconds.size(), 2u);       // the same epochs
    EXPECT_DOUBLE_EQ(r.epoch_seconds[1], *r.seconds_per_epoch);  // the timed one
    EXPECT_FALSE(r.seconds_per_epoch_spread.has_value());        // of one timed epoch
    EXPECT_EQ(r.train_examples, 512);
  }
  EXPECT_NEAR(j["floor"]["flops_per_epoch"].get<double>(), 512 * lenet::model::train_flops_per_example(), 1.0);
  // The GEMM the CPU rows were measured with (its kernels may be other than this process's: the bench
  // starts itself again with better ones where OpenBLAS took its generic kernels).
  EXPECT_EQ(j["cpu_gemm"].get<std::string>().rfind(std::string("CPU GEMM ") + lenet::model::gemm_backend_name(), 0), 0u)
      << j["cpu_gemm"];
  EXPECT_NE(lenet::testing::slurp(md).find("| cpu R=2 |"), std::string::npos);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "kept.json"), "old result\n");
  EXPECT_EQ(std::filesystem::status(json).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"b.json", "b.md", "kept.json"})) << "a temporary file left behind";
}

// A stop (SIGTERM: a shell's background job ignores SIGINT) once the second row has begun: the rows
// measured before it are shown and written, the rest named as left out, status 143. A second signal ends
// the run at once, with the status it gives.
// Signals ignored from the start (nohup) are ignored in the bench this process starts: it keeps them so.
std::string ignored_stop_signal() {
  for (const int signal : {SIGTERM, SIGHUP}) {
    struct sigaction inherited {};
    if (sigaction(signal, nullptr, &inherited) == 0 && inherited.sa_handler == SIG_IGN)
      return "signal " + std::to_string(signal) + " is ignored in this process, and so in the bench it starts";
  }
  return "";
}

// lenet-bench run with `args` in the background, its stderr into `err`, until its progress names `row`;
// then the shell runs `kill` (the bench's pid in $pid) and waits for it. Returns its exit status.
int bench_stopped_at(const std::string& row, const std::string& args, const std::string& err, const std::string& kill) {
  const std::string cmd = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_BENCH_EXE "' " + args + " 2>'" + err +
                          "' & pid=$!; while kill -0 $pid 2>/dev/null && ! grep -q '" + row + "' '" + err +
                          "' 2>/dev/null; do sleep 0.05; done; " + kill + "; wait $pid; exit $?";
  const int raw = std::system(cmd.c_str());
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

TEST_F(BenchTool, StopKeepsTheRowsMeasuredBeforeIt) {
  if (const std::string ignored = ignored_stop_signal(); !ignored.empty()) GTEST_SKIP() << ignored;
  const std::string json = (dir_ / "r.json").string(), err = (dir_ / "err").string(), out = (dir_ / "out").string();
  // The shell waits for the second row's name in a fresh err: the one a run before left would end the
  // wait at once, while the new run has not yet truncated it, and the signal would come before the bench
  // has its handlers (it then dies of it, with nothing written).
  auto run_stopped = [&](const std::string& kill, const std::string& sizes = "--train-limit 2048 --batch-size 1024") {
    std::filesystem::remove(err);
    const std::string args = "--modes cpu --replicas 1,2,3,4 " + sizes + " --test-limit 64 --epochs 2 --json '" + json +
                             "' >'" + out + "'";
    return bench_stopped_at("cpu R=2", args, err, kill);
  };
  ASSERT_EQ(run_stopped("kill -TERM $pid"), 143) << lenet::testing::slurp(err);
  const nlohmann::json j = nlohmann::json::parse(lenet::testing::slurp(json));
  const size_t measured = j["rows"].size();  // 1 unless a row ran through before the signal came
  ASSERT_GE(measured, 1u);
  ASSERT_LT(measured, 4u);
  const std::string next = "cpu R=" + std::to_string(measured + 1);
  const std::string note = "stopped by signal 15; left out: the rows from " + next + " on";
  EXPECT_EQ(j["stopped"], note);
  EXPECT_NE(lenet::testing::slurp(err).find("lenet-bench: " + note + "\n"), std::string::npos) << lenet::testing::slurp(err);
  const std::string table = lenet::testing::slurp(out);
  EXPECT_NE(table.find("| cpu R=1 |"), std::string::npos) << table;
  EXPECT_EQ(table.find("| " + next + " |"), std::string::npos) << table;
  EXPECT_NE(table.find(note + "."), std::string::npos) << table;
  // A hangup that comes again (a shell and a terminal both send one) counts once: the same stop. The
  // second comes once the first is taken, while the step of the first one runs (one step of 8192 rows
  // per epoch, half a second or more here): the bench is stopped at once, and a run that ended before
  // that is an exit 99 here, not a pass without a second hangup.
  std::filesystem::remove(json);
  EXPECT_EQ(run_stopped(lenet::testing::send_signal("HUP") +
                            "kill -STOP $pid; ! grep -q '^State:.*zombie' /proc/$pid/status || exit 99; kill -HUP $pid; "
                            "kill -CONT $pid",
                        "--train-limit 8192 --batch-size 8192"),
            129);
  EXPECT_TRUE(std::filesystem::exists(json));
  EXPECT_EQ(lenet::testing::slurp(err).find("at once"), std::string::npos) << lenet::testing::slurp(err);
  std::filesystem::remove(json);
  // Two kinds of signal, so that the second is not merged into the first while it is pending; it comes
  // while the first one's step is still running.
  const int status = run_stopped("kill -TERM $pid; kill -HUP $pid");
  EXPECT_TRUE(status == 129 || status == 143) << status;
  EXPECT_NE(lenet::testing::slurp(err).find("lenet-bench: stopped at once by a second signal\n"), std::string::npos)
      << lenet::testing::slurp(err);
  EXPECT_EQ(lenet::testing::slurp(err).find('\0'), std::string::npos) << "a NUL byte written after the line";
  // The status is the second signal's: the hangup comes once the termination request is taken, while the
  // bench is held (SIGSTOP) in the step that request is in (exit 99 as above where the run has ended).
  std::filesystem::remove(json);
  EXPECT_EQ(run_stopped(lenet::testing::send_signal("TERM") +
                            "kill -STOP $pid; ! grep -q '^State:.*zombie' /proc/$pid/status || exit 99; "
                            "kill -HUP $pid; kill -CONT $pid",
                        "--train-limit 8192 --batch-size 8192"),
            129)
      << lenet::testing::slurp(err);
  EXPECT_NE(lenet::testing::slurp(err).find("lenet-bench: stopped at once by a second signal\n"), std::string::npos)
      << lenet::testing::slurp(err);
}

// A stop during the first row cuts it short (a GPU row may take minutes) and, nothing being measured, writes
// nothing: no empty tables over an earlier result.
TEST_F(BenchTool, StopDuringTheFirstRowWritesNothing) {
  if (const std::string ignored = ignored_stop_signal(); !ignored.empty()) GTEST_SKIP() << ignored;
  const std::string json = (dir_ / "r.json").string(), err = (dir_ / "err").string();
  std::ofstream(json) << "old result\n";
  // 2048 steps in all: seconds, where the signal comes within a tenth of a second of the row's start.
  EXPECT_EQ(bench_stopped_at("cpu R=1",
                             "--modes cpu --replicas 1,2 --train-limit 8192 --batch-size 16 --test-limit 64 --epochs 3 "
                             "--json '" + json + "' >/dev/null",
                             err, "kill -TERM $pid"),
            143)
      << lenet::testing::slurp(err);
  EXPECT_EQ(lenet::testing::slurp(err),
            "lenet-bench: cpu R=1\nlenet-bench: stopped by signal 15 before a row was measured; nothing written\n");
  EXPECT_EQ(lenet::testing::slurp(json), "old result\n");
}

// The CPU rows train what lenet-train trains: the same start, epochs in the seed's orders, the same test
// accuracy after each epoch, bit for bit. On the CPU a step is all host time, so the timed epoch's steps
// at "host ms/step" take about its seconds, and no more. The Markdown goes to stdout once, its ratios
// against the first row.
TEST_F(BenchTool, CpuRowsTrainWhatLenetTrainTrains) {
  const std::string data = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' ";
  const std::string sizes = "--train-limit 2048 --test-limit 512 --batch-size 32 --seed 7 ";  // 64 steps an epoch
  // Not "out" and "err": run() writes lenet-train's there.
  const std::string json = (dir_ / "r.json").string(), out = (dir_ / "table.md").string();
  const std::string metrics = (dir_ / "m.jsonl").string();
  ASSERT_EQ(std::system((data + "'" LENET_BENCH_EXE "' --modes cpu --replicas 1,2 " + sizes + "--epochs 1 --json '" +
                         json + "' --markdown - >'" + out + "' 2>/dev/null").c_str()),
            0);
  const lenet::testing::Result trained_run =
      run("--backend cpu --quiet --replicas 2 " + sizes + "--epochs 2 --metrics '" + metrics + "'");
  ASSERT_EQ(trained_run.status, 0) << trained_run.err;
  const nlohmann::json j = nlohmann::json::parse(lenet::testing::slurp(json));
  ASSERT_EQ(j["rows"].size(), 2u);
  ASSERT_EQ(j["rows"][1]["name"], "cpu R=2");
  std::vector<double> trained;  // lenet-train's, per epoch: the bench's warm-up epoch and its timed one
  std::istringstream lines(lenet::testing::slurp(metrics));
  for (std::string line; std::getline(lines, line);) trained.push_back(nlohmann::json::parse(line)["test_acc"]);
  EXPECT_EQ(j["rows"][1]["test_acc_per_epoch"].get<std::vector<double>>(), trained);
  for (const auto& row : j["rows"]) {
    const double epoch = row["seconds_per_epoch"], host = row["host_enqueue_ms_per_step"].get<double>() * 64 / 1e3;
    EXPECT_LE(host, epoch * (1 + 1e-9)) << row["name"];
    EXPECT_GE(host, epoch / 2) << row["name"];
  }
  const std::string table = lenet::testing::slurp(out);
  EXPECT_EQ(table.rfind("# lenet-bench\n", 0), 0u) << table;
  EXPECT_EQ(table.find("# lenet-bench", 1), std::string::npos) << "stdout has the table twice: " << table;
  EXPECT_NE(table.find("| time vs cpu R=1 |\n"), std::string::npos) << table;
  const size_t first_row = table.find("\n| cpu R=1 | ");
  ASSERT_NE(first_row, std::string::npos) << table;
  EXPECT_EQ(table.substr(table.find('\n', first_row + 1) - 9, 9), "| 1.000 |") << table;
}

// A row's numbers follow from the epochs it recorded: seconds per epoch the mean of the timed epochs and
// their spread, both without the warm-up; examples per second of the training set; the host's time
// within the timed epochs; "epochs" every epoch trained and "test_acc" the last one's (here the warm-up
// epoch's is another). The row's lr is the run's exact value, not the float32 the steps take. The heading
// names the run's sizes and timed epochs, a CPU-only run has no CUPTI legend, and the floor is in TFLOP.
TEST_F(BenchTool, RowNumbersFollowFromItsEpochs) {
  const std::string json = (dir_ / "r.json").string(), md = (dir_ / "r.md").string();
  // cpu named twice (measured once); 32 steps an epoch.
  const std::string cmd = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_BENCH_EXE "' --modes cpu,cpu --replicas 1 "
                          "--train-limit 1024 --test-limit 128 --batch-size 32 --lr 0.45 --epochs 2 --json '" + json +
                          "' --markdown '" + md + "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const nlohmann::json j = nlohmann::json::parse(lenet::testing::slurp(json));
  ASSERT_EQ(j["rows"].size(), 1u) << j.dump();
  const BenchRow r = row_from_json(j["rows"][0]);
  EXPECT_EQ(r.lr, 0.45);
  EXPECT_EQ(r.epochs, 3);  // a warm-up and two timed epochs
  ASSERT_EQ(r.epoch_seconds.size(), 3u);
  ASSERT_EQ(r.test_acc_per_epoch.size(), 3u);
  ASSERT_TRUE(r.test_acc && r.seconds_per_epoch && r.seconds_per_epoch_spread && r.examples_per_second &&
              r.host_enqueue_ms_per_step);
  EXPECT_EQ(*r.test_acc, r.test_acc_per_epoch.back());
  const double timed = r.epoch_seconds[1] + r.epoch_seconds[2];
  EXPECT_DOUBLE_EQ(*r.seconds_per_epoch, timed / 2);
  EXPECT_DOUBLE_EQ(*r.seconds_per_epoch_spread, *epoch_spread({r.epoch_seconds[1], r.epoch_seconds[2]}));
  EXPECT_DOUBLE_EQ(*r.examples_per_second, 1024 / *r.seconds_per_epoch);
  EXPECT_LE(*r.host_enqueue_ms_per_step * 64 / 1e3, timed * (1 + 1e-9)) << "the 64 timed steps' host time";
  const std::string text = lenet::testing::slurp(md);
  EXPECT_EQ(text.rfind("# lenet-bench\n\n1024 training examples, batch 32, lr 0.45, seed 1; ", 0), 0u) << text;
  EXPECT_NE(text.find(", mean of 2 epoch(s) after a warm-up epoch,"), std::string::npos) << text;
  EXPECT_EQ(text.find("CUPTI"), std::string::npos) << text;
  std::ostringstream floor;
  floor << "\nArithmetic floor: " << lenet::model::train_flops_per_example() * 1024 / 1e12 << " TFLOP per epoch";
  EXPECT_NE(text.find(floor.str()), std::string::npos) << text;
}

// --json - (stdout): stdout holds the JSON alone, the table goes to stderr.
TEST_F(BenchTool, JsonIntoStdout) {
  const std::string cmd = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_BENCH_EXE "' --modes cpu --replicas 1 "
                          "--train-limit 256 --test-limit 64 --epochs 1 --json - >'" + (dir_ / "out").string() +
                          "' 2>'" + (dir_ / "err").string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string out = lenet::testing::slurp(dir_ / "out");
  EXPECT_EQ(nlohmann::json::parse(out)["rows"].size(), 1u) << out;
  EXPECT_NE(lenet::testing::slurp(dir_ / "err").find("| cpu R=1 |"), std::string::npos);
  // Whatever stdout writes (a terminal; here the device /dev/null): the table still goes to stderr.
  const std::string to_device = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_BENCH_EXE "' --modes cpu --replicas 1 "
                                "--train-limit 256 --test-limit 64 --epochs 1 --json - >/dev/null 2>'" +
                                (dir_ / "err").string() + "'";
  ASSERT_EQ(std::system(to_device.c_str()), 0);
  EXPECT_NE(lenet::testing::slurp(dir_ / "err").find("| cpu R=1 |"), std::string::npos) << lenet::testing::slurp(dir_ / "err");
  // A closed stdout is refused before benchmarking.
  const std::string closed = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_BENCH_EXE "' --modes cpu --replicas 1 "
                             "--train-limit 256 --test-limit 64 --epochs 1 --json - >&- 2>'" + (dir_ / "err").string() + "'";
  EXPECT_EQ(WEXITSTATUS(std::system(closed.c_str())), 1);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: error: /dev/stdout: closed, nothing can be written to it (--json)\n");
  // A stdout that cannot take the table.
  const std::string full = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_BENCH_EXE "' --modes cpu --replicas 1 "
                           "--train-limit 256 --test-limit 64 --epochs 1 >/dev/full 2>'" + (dir_ / "err").string() + "'";
  EXPECT_EQ(WEXITSTATUS(std::system(full.c_str())), 1);
  EXPECT_NE(lenet::testing::slurp(dir_ / "err").find("lenet-bench: error: stdout: write failed (No space left on device)"),
            std::string::npos) << lenet::testing::slurp(dir_ / "err");
  // Nor the text of --help or --version.
  for (const char* flag : {"--help", "--version"}) {
    const std::string text = "'" LENET_BENCH_EXE "' " + std::string(flag) + " >/dev/full 2>'" + (dir_ / "err").string() + "'";
    EXPECT_EQ(WEXITSTATUS(std::system(text.c_str())), 1) << flag;
    EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: error: stdout: write failed (No space left on device)\n") << flag;
  }
}

// Everything that could fail after the benchmark's minutes is checked first; a peer row from another
// training-set size is flagged under the table.
TEST_F(BenchTool, BadOutputsAndPeersFailBeforeBenchmarkingAndOtherDataIsFlagged) {
  // Each run ends within 120 s (else status 124): a wait for ever fails here, not at CTest's timeout.
  const std::string base = "timeout 120 env LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_BENCH_EXE "' "
                           "--modes cpu --replicas 1 "
                           "--train-limit 256 --test-limit 64 --epochs 1 --markdown '" + (dir_ / "b.md").string() + "' ";
  const std::string err = (dir_ / "err").string();
  auto run_bench = [&](const std::string& args) {
    const int raw = std::system((base + args + " >/dev/null 2>'" + err + "'").c_str());
    return WEXITSTATUS(raw);
  };
  std::ofstream(dir_ / "a-file") << "x";
  std::string text;
  for (const char* folder : {"missing", "a-file"}) {  // no folder there, or a file where the folder should be
    EXPECT_EQ(run_bench("--json '" + (dir_ / folder / "b.json").string() + "'"), 1) << folder;
    text = lenet::testing::slurp(dir_ / "err");
    EXPECT_NE(text.find("b.json: cannot write into the folder"), std::string::npos) << text;
    EXPECT_EQ(text.find("cpu R=1"), std::string::npos) << "benchmarked before failing: " << text;
  }
  std::ofstream(dir_ / "bad-peer.json") << "{\"name\": \"x\"}";
  EXPECT_EQ(run_bench("--json '" + (dir_ / "b.json").string() + "' --peers '" + (dir_ / "bad-peer.json").string() + "'"), 1);
  text = lenet::testing::slurp(dir_ / "err");
  EXPECT_NE(text.find("bad-peer.json: not a peer row"), std::string::npos) << text;
  EXPECT_EQ(text.find("cpu R=1"), std::string::npos) << "benchmarked before failing: " << text;
  std::ofstream(dir_ / "whole.json") << "{\"rows\": [], \"floor\": {}}";  // lenet-bench's own --json
  EXPECT_EQ(run_bench("--peers '" + (dir_ / "whole.json").string() + "'"), 1);
  text = lenet::testing::slurp(dir_ / "err");
  EXPECT_NE(text.find("whole.json: not a peer row (a whole lenet-bench result, not one row;"), std::string::npos) << text;
  // A named pipe that nobody reads would have made the final write wait for ever, and one that nobody
  // writes the reading of the peer rows.
  ASSERT_EQ(::mkfifo((dir_ / "pipe").c_str(), 0600), 0);
  for (const auto& [args, said] :
       {std::pair<std::string, std::string>{"--json '" + (dir_ / "pipe").string() + "'", "a named pipe that no process reads"},
        {"--peers '" + (dir_ / "pipe").string() + "'", "a FIFO that no process writes to"}}) {
    EXPECT_EQ(run_bench(args), 1) << args;
    text = lenet::testing::slurp(dir_ / "err");
    EXPECT_NE(text.find((dir_ / "pipe").string() + ": " + said), std::string::npos) << text;
    if (args.rfind("--json", 0) == 0) {
      EXPECT_NE(text.find(" (--json)\n"), std::string::npos) << text;
    }
    EXPECT_EQ(text.find("cpu R=1"), std::string::npos) << "benchmarked before failing: " << text;
  }
  // Control bytes in a name stay escaped on the one line: a newline, a terminal's escape sequence.
  EXPECT_EQ(run_bench("--json \"$(printf '" + dir_.string() + "/missing\\n\\033[2J/b.json')\""), 1);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"),
            "lenet-bench: error: " + dir_.string() + "/missing\\n\\x1b[2J/b.json: cannot write into the folder " +
                dir_.string() + "/missing\\n\\x1b[2J (No such file or directory) (--json)\n");
  // A folder that takes no new file, found before the run for root too (access() lets root through /proc).
  EXPECT_EQ(run_bench("--json /proc/lenet-bench.json"), 1);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err").rfind("lenet-bench: error: /proc/lenet-bench.json: cannot ", 0), 0u);
  // Written over, a data file would be lost (a small data set of our own, since the output names its file).
  std::filesystem::create_directory(dir_ / "data");
  lenet::testing::write_data_set((dir_ / "data").string(), 256, 64);
  const std::string labels = (dir_ / "data" / "train-labels-idx1-ubyte").string();
  const auto labels_size = std::filesystem::file_size(labels);
  EXPECT_EQ(run_bench("--data-dir '" + (dir_ / "data").string() + "' --json '" + labels + "'"), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --json " + labels + " names the data file " + labels + "\n");
  EXPECT_EQ(std::filesystem::file_size(labels), labels_size);
  EXPECT_EQ(run_bench("--num-gpus 2"), 2);  // `base` benchmarks the CPU only
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"),
            "lenet-bench: --num-gpus 2: only the GPU modes place replicas on GPUs, and --modes has none\n");
  EXPECT_EQ(run_bench("--json '" + (dir_ / "b.json").string() + "' --lr 0"), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --lr 0: must be a decimal number that rounds to a finite float32 above 0 (1.4e-45 to 3.4e38 once rounded)\n");
  EXPECT_EQ(run_bench("--lr 1e400"), 2);  // the value as typed, not as a double reads it ("inf")
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --lr 1e400: must be a decimal number that rounds to a finite float32 above 0 (1.4e-45 to 3.4e38 once rounded)\n");
  EXPECT_EQ(run_bench("--modes ''"), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --modes: empty value\n");
  EXPECT_EQ(run_bench("--json= --no-trace"), 2);  // CLI11 would write the JSON to a file named --no-trace
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --json: empty value\n");
  EXPECT_EQ(run_bench("--json --no-trace"), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --json: no value before the option --no-trace (a value that "
                                                 "is an option's name goes after =: --json=--no-trace)\n");
  EXPECT_EQ(run_bench("--json '" + (dir_ / "b.md").string() + "'"), 2);  // the --markdown file of `base`
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"),
            "lenet-bench: --json and --markdown name the same file " + (dir_ / "b.md").string() + "\n");
  // A peer's row is not written over, through another name either.
  EXPECT_EQ(run_bench("--peers '" + (dir_ / "." / "b.md").string() + "'"), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --markdown " + (dir_ / "b.md").string() +
                                                     " names the --peers file " + (dir_ / "." / "b.md").string() +
                                                     "\n");
  // Both to stdout, whatever it is: here /dev/null, a device. Two outputs may share a device otherwise.
  const std::string without_markdown = base.substr(0, base.find("--markdown"));
  const std::string both = without_markdown + "--json - --markdown - >/dev/null 2>'" + err + "'";
  EXPECT_EQ(WEXITSTATUS(std::system(both.c_str())), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --json and --markdown name the same file /dev/stdout\n");
  const std::string null_twice = without_markdown + "--json /dev/null --markdown /dev/null 2>'" + err + "'";
  EXPECT_EQ(WEXITSTATUS(std::system(null_twice.c_str())), 0) << lenet::testing::slurp(dir_ / "err");
  // One to stdout and one to stderr, two other files: not the same (a later usage error ends the run).
  const std::string split = without_markdown + "--json - --markdown /dev/stderr --no-allreduce --allreduce-replicas 4 "
                                               ">/dev/null 2>'" + err + "'";
  EXPECT_EQ(WEXITSTATUS(std::system(split.c_str())), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"),
            "lenet-bench: --allreduce-replicas: the allreduce sweep is skipped by --no-allreduce\n");
  // A diverged run is an error, not a row of meaningless times (one step per epoch: overflow in the second).
  // With no row measured, the error alone: the files are not written over with empty tables.
  std::ofstream(dir_ / "b.md") << "old result\n";
  EXPECT_EQ(run_bench("--lr 1e30"), 1);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"),
            "lenet-bench: cpu R=1\nlenet-bench: error: cpu R=1: the parameters became non-finite in epoch 2; try a "
            "smaller --lr\n");
  EXPECT_EQ(lenet::testing::slurp(dir_ / "b.md"), "old result\n");
  // The results written after the benchmark, which fails: status 1, named.
  EXPECT_EQ(run_bench("--json /dev/full"), 1);
  EXPECT_NE(lenet::testing::slurp(dir_ / "err").find("lenet-bench: error: /dev/full: write failed (No space left on "
                                                     "device) (--json)\n"),
            std::string::npos)
      << lenet::testing::slurp(dir_ / "err");
  EXPECT_EQ(run_bench("--json '" + (dir_ / "b.json").string() + "' --replicas 1,010"), 2);
  EXPECT_NE(lenet::testing::slurp(dir_ / "err").find("--replicas: 010 is not a decimal integer"), std::string::npos);
  EXPECT_EQ(run_bench("--epochs 1 --epochs=2"), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --epochs: given more than once (see --help)\n");
  EXPECT_EQ(run_bench("--no-allreduce --allreduce-replicas 4"), 2);  // contradictory, not one ignored
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"),
            "lenet-bench: --allreduce-replicas: the allreduce sweep is skipped by --no-allreduce\n");
  EXPECT_EQ(run_bench("--allreduce-replicas 4"), 2);  // `base` benchmarks the CPU only
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"),
            "lenet-bench: --allreduce-replicas: the allreduce sweep runs on GPUs, and --modes has no GPU mode\n");
  // An empty item of a list is refused, not dropped as CLI11 would.
  for (const std::string list : {"1,,2", ",1", "1,"}) {
    EXPECT_EQ(run_bench("--replicas 1 " + list), 2) << list;  // in a later word of the option's too
    EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --replicas: an empty item in the list " + list + "\n");
  }
  EXPECT_EQ(run_bench("--modes=cpu,,cpu"), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --modes: an empty item in the list cpu,,cpu\n");
  // The flag's own range, also beyond the type's (where CLI11 would only say "could not convert").
  EXPECT_EQ(run_bench("--replicas 1,-99999999999999999999"), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --replicas: -99999999999999999999 is out of range (1 to 64) (see --help)\n");
  EXPECT_EQ(run_bench("--replicas 65"), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --replicas: 65 is out of range (1 to 64) (see --help)\n");
  EXPECT_EQ(run_bench("--replicas 4 --batch-size 4"), 0) << lenet::testing::slurp(dir_ / "err");  // R = 4: a row each
  EXPECT_EQ(run_bench("--seed 010"), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --seed 010: must be an integer from 0 to 2^64-1 in "
                                                 "decimal digits without a leading zero\n");
  const std::string no_epochs = base.substr(0, base.find("--epochs")) + base.substr(base.find("--epochs 1 ") + 11);
  ASSERT_EQ(no_epochs.find("--epochs"), std::string::npos) << no_epochs;
  EXPECT_EQ(WEXITSTATUS(std::system((no_epochs + "--epochs 0 >/dev/null 2>'" + err + "'").c_str())), 2);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: --epochs: 0 is out of range (1 to 1000) (see --help)\n");

  BenchRow peer = textbook_peer_row(60000);
  std::ofstream(dir_ / "peer.json") << to_json(peer).dump();
  // The same file under two names is one row; the lr in the table's heading is the run's, unrounded.
  ASSERT_EQ(run_bench("--json '" + (dir_ / "b.json").string() + "' --seed +1 --lr 0.2000001 --peers '" +
                      (dir_ / "peer.json").string() + "' '" + (dir_ / "." / "peer.json").string() + "'"),
            0)
      << lenet::testing::slurp(dir_ / "err");
  text = lenet::testing::slurp(dir_ / "b.md");
  EXPECT_NE(text.find("Note: pytorch-textbook R=1 ran on 60000 training examples (this run: 256)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("batch 256, lr 0.2000001,"), std::string::npos) << text;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir_ / "b.json"))["rows"].size(), 2u);
  // Where stdout and stderr are one file (2>&1), the note is there once, under the table.
  const std::string one_file = base + "--peers '" + (dir_ / "peer.json").string() + "' >'" + (dir_ / "both").string() +
                               "' 2>&1";
  ASSERT_EQ(WEXITSTATUS(std::system(one_file.c_str())), 0) << lenet::testing::slurp(dir_ / "both");
  text = lenet::testing::slurp(dir_ / "both");
  const std::string note = "Note: pytorch-textbook R=1 ran on 60000 training examples";
  ASSERT_NE(text.find(note), std::string::npos) << text;
  EXPECT_EQ(text.find(note), text.rfind(note)) << text;
  // Two rows of one name could not be told apart: refused, naming the file.
  peer.name = "cpu R=1";
  std::ofstream(dir_ / "same-name.json") << to_json(peer).dump();
  EXPECT_EQ(run_bench("--peers '" + (dir_ / "same-name.json").string() + "'"), 1);
  text = lenet::testing::slurp(dir_ / "err");
  EXPECT_NE(text.find("same-name.json: its row is named \"cpu R=1\" as another row is"), std::string::npos) << text;
  // A field given twice is refused, not taken at its last value.
  std::string twice = to_json(peer).dump();
  twice.insert(1, "\"epochs\": 7, ");
  std::ofstream(dir_ / "twice.json") << twice;
  EXPECT_EQ(run_bench("--peers '" + (dir_ / "twice.json").string() + "'"), 1);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"), "lenet-bench: error: " + (dir_ / "twice.json").string() +
                                                     ": not a peer row (the field \"epochs\" is given twice)\n");
  // A row of exactly 1 MiB (spaces after the JSON) is read; one byte more is refused.
  for (const size_t size : {size_t{1} << 20, (size_t{1} << 20) + 1}) {
    peer.name = "big";
    std::ofstream(dir_ / "big.json") << to_json(peer).dump() << std::string(size - to_json(peer).dump().size(), ' ');
    ASSERT_EQ(std::filesystem::file_size(dir_ / "big.json"), size);
    EXPECT_EQ(run_bench("--peers '" + (dir_ / "big.json").string() + "'"), size == (size_t{1} << 20) ? 0 : 1)
        << lenet::testing::slurp(dir_ / "err");
  }
}

// Each option's range, a mode that is none of the three and every --replicas value against --batch-size
// are usage errors (status 2, the one line); --help is not.
TEST_F(BenchTool, UsageErrorsNameTheOptionAndItsRange) {
  const std::string out = (dir_ / "out").string(), err = (dir_ / "err").string();
  // A run that is not refused is a small one, in the test's folder (a file named like an option lands there).
  auto run_bench = [&](const std::string& args) {
    const std::string cmd = "cd '" + dir_.string() + "' && timeout 120 env LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '"
                            LENET_BENCH_EXE "' " + args + " >'" + out + "' 2>'" + err + "'";
    return WEXITSTATUS(std::system(cmd.c_str()));
  };
  const std::string small = "--modes cpu --train-limit 256 --test-limit 64 --epochs 1 ";
  for (const auto& [args, said] : std::vector<std::pair<std::string, std::string>>{
           {small + "--replicas 0", "--replicas: 0 is out of range (1 to 64) (see --help)"},
           {small + "--replicas 1 --batch-size 0", "--batch-size: 0 is out of range (1 to 1048576) (see --help)"},
           {small + "--replicas 1 --batch-size 1048577",
            "--batch-size: 1048577 is out of range (1 to 1048576) (see --help)"},
           {"--modes cpu --replicas 1 --train-limit 256 --test-limit 64 --epochs 1001",
            "--epochs: 1001 is out of range (1 to 1000) (see --help)"},
           {small + "--replicas 1 --num-gpus 0", "--num-gpus: 0 is out of range (1 to 64) (see --help)"},
           {"--modes cpu --replicas 1 --train-limit 256 --epochs 1 --test-limit 10001",
            "--test-limit: 10001 is out of range (1 to 10000) (see --help)"},
           {small + "--replicas 1 --allreduce-replicas 1",
            "--allreduce-replicas: 1 is out of range (2 to 64) (see --help)"},
           {small + "--replicas 1 --modes cpu,tpu", "--modes: tpu not in {naive,graph,cpu} (see --help)"},
           {small + "--replicas 1,8 --batch-size 4", "--replicas 8 is larger than --batch-size 4"},
           // A "--" after a list's values ends the list (CLI11 reads on), not the options.
           {small + "--replicas 1 -- --json --no-trace",
            "--json: no value before the option --no-trace (a value that is an option's name goes after =: "
            "--json=--no-trace)"}}) {
    EXPECT_EQ(run_bench(args), 2) << args;
    EXPECT_EQ(lenet::testing::slurp(err), "lenet-bench: " + said + "\n") << args;
    EXPECT_EQ(lenet::testing::slurp(out), "") << args;
  }
  EXPECT_EQ(run_bench("--help"), 0) << lenet::testing::slurp(err);
  EXPECT_NE(lenet::testing::slurp(out).find("Usage: lenet-bench [OPTIONS]"), std::string::npos)
      << lenet::testing::slurp(out);
  EXPECT_EQ(lenet::testing::slurp(err), "");
}

// A peer's row comes after the measured rows, which the ratio column stays relative to; one with this run's
// training set, batch and lr has no note. Neither output may name a peer's file, no two peers one name,
// nor --markdown a data file; with the table on stderr (--json -), a peer's note is there once.
TEST_F(BenchTool, PeerRowsFollowTheMeasuredRowsAndAreKept) {
  const std::string err = (dir_ / "err").string();
  auto run_bench = [&](const std::string& args, const std::string& data = LENET_TEST_DATA_DIR) {
    const std::string cmd = "timeout 120 env LENET_DATA_DIR='" + data + "' '" LENET_BENCH_EXE "' --modes cpu "
                            "--replicas 1 --train-limit 256 --test-limit 64 --epochs 1 " + args + " 2>'" + err + "'";
    return WEXITSTATUS(std::system(cmd.c_str()));
  };
  BenchRow peer = textbook_peer_row(256);  // this run's training set, batch and lr
  const std::string peer_json = to_json(peer).dump(), file = (dir_ / "peer.json").string();
  std::ofstream(file) << peer_json;
  const std::string json = (dir_ / "b.json").string(), md = (dir_ / "b.md").string();
  ASSERT_EQ(run_bench("--json '" + json + "' --markdown '" + md + "' --peers '" + file + "' >/dev/null"), 0)
      << lenet::testing::slurp(err);
  const nlohmann::json j = nlohmann::json::parse(lenet::testing::slurp(json));
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["name"], "cpu R=1");
  EXPECT_EQ(j["rows"][1]["name"], peer.name);
  std::string text = lenet::testing::slurp(md);
  EXPECT_NE(text.find("| time vs cpu R=1 |\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("Note:"), std::string::npos) << text;
  // --json over the peer's file: refused, the file kept.
  EXPECT_EQ(run_bench("--json '" + file + "' --peers '" + file + "' >/dev/null"), 2);
  EXPECT_EQ(lenet::testing::slurp(err), "lenet-bench: --json " + file + " names the --peers file " + file + "\n");
  EXPECT_EQ(lenet::testing::slurp(file), peer_json);
  // Two peers' rows of one name, from two files.
  const std::string again = (dir_ / "again.json").string();
  std::ofstream(again) << peer_json;
  EXPECT_EQ(run_bench("--peers '" + file + "' '" + again + "' >/dev/null"), 1);
  EXPECT_EQ(lenet::testing::slurp(err), "lenet-bench: error: " + again + ": its row is named \"" + peer.name +
                                            "\" as another row is\n");
  // --markdown over a data file (a small data set of our own, since the output names its file).
  std::filesystem::create_directory(dir_ / "data");
  lenet::testing::write_data_set((dir_ / "data").string(), 256, 64);
  const std::string images = (dir_ / "data" / "t10k-images-idx3-ubyte").string();
  const auto images_size = std::filesystem::file_size(images);
  EXPECT_EQ(run_bench("--markdown '" + images + "' >/dev/null", (dir_ / "data").string()), 2);
  EXPECT_EQ(lenet::testing::slurp(err), "lenet-bench: --markdown " + images + " names the data file " + images + "\n");
  EXPECT_EQ(std::filesystem::file_size(images), images_size);
  // The JSON on stdout, the table and its note on stderr: the note once.
  peer.train_examples = 60000;
  std::ofstream(file) << to_json(peer).dump();
  ASSERT_EQ(run_bench("--json - --peers '" + file + "' >'" + (dir_ / "out").string() + "'"), 0)
      << lenet::testing::slurp(err);
  EXPECT_EQ(nlohmann::json::parse(lenet::testing::slurp(dir_ / "out"))["rows"].size(), 2u);
  text = lenet::testing::slurp(err);
  const std::string note = "Note: pytorch-textbook R=1 ran on 60000 training examples (this run: 256)";
  ASSERT_NE(text.find(note), std::string::npos) << text;
  EXPECT_EQ(text.find(note), text.rfind(note)) << text;
}

// With no --modes, a build without CUDA benchmarks the CPU backend (a CUDA build, naive and graph mode).
TEST_F(BenchTool, BuildWithoutCudaBenchmarksTheCpuByDefault) {
  if (LENET_HAVE_CUDA) GTEST_SKIP() << "this build has CUDA";
  const std::string cmd = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_BENCH_EXE "' --replicas 1 --train-limit 256 "
                          "--test-limit 64 --epochs 1 --json /dev/stdout >'" + (dir_ / "out").string() + "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const nlohmann::json j = nlohmann::json::parse(lenet::testing::slurp(dir_ / "out"));
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["name"], "cpu R=1");
}

TEST_F(BenchTool, GpuModesWithoutDeviceIsAUsageError) {
  const std::string cmd = std::string(lenet::testing::kHideGpus) + "'" LENET_BENCH_EXE "' --modes graph >/dev/null 2>&1";
  const int raw = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(raw), 2);
  // Naive mode is a GPU mode too, also beside the CPU's (a run that is not refused is a small one).
  const std::string err = (dir_ / "err").string();
  for (const char* modes : {"naive", "cpu,naive"}) {
    const std::string run = std::string(lenet::testing::kHideGpus) + "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '"
                            LENET_BENCH_EXE "' --modes " + modes + " --replicas 1 --train-limit 256 --test-limit 64 "
                            "--epochs 1 >/dev/null 2>'" + err + "'";
    EXPECT_EQ(WEXITSTATUS(std::system(run.c_str())), 2) << modes;
    EXPECT_EQ(lenet::testing::slurp(err).rfind("lenet-bench: no CUDA device answers (", 0), 0u)
        << modes << ": " << lenet::testing::slurp(err);
  }
}

}  // namespace
