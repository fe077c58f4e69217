// The CUDA graph mode against the naive mode and the CPU backend on real Fashion-MNIST: ten full
// minibatches and the partial one of 96 from the same seed, R = 1, 2, 3 and 4 replicas on one GPU, and a
// replica with no rows; bitwise reproducibility; no instantiation after start-up; exact evaluation counts
// in both modes; replicas on two GPUs against the same replicas sharing one (skipped where only one GPU
// answers).
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>

#include "engine/cpu_backend.hpp"
#include "engine/cuda_graph_backend.hpp"
#include "engine/cuda_probe.hpp"
#include "engine/cuda_naive_backend.hpp"
#include "engine/ring.hpp"
#include "engine/trainer.hpp"
#include "gpu_test.hpp"
#include "train_steps.hpp"
#include "io/dataset.hpp"
#include "model/cpu_lenet.hpp"
#include "model/lenet.hpp"

namespace {

using namespace lenet;
using lenet::testing::distance;

constexpr size_t kExamples = 10 * 256 + 96;  // ten full minibatches, then the partial one
constexpr uint64_t kBatches = (kExamples + 255) / 256;

const io::FashionMnist& data() {
  static const io::FashionMnist d = io::load_fashion_mnist(LENET_TEST_DATA_DIR, kExamples, 2000);
  return d;
}

engine::CudaPlacement one_gpu(int replicas) {
  engine::CudaPlacement p;
  p.num_gpus = 1;
  p.replicas = replicas;
  p.train_batch_rows = engine::minibatch_sizes(kExamples, 256);
  p.eval_batch_rows = engine::minibatch_sizes(data().test.size(), 256);
  return p;
}

void run_epoch0(engine::Backend& b, uint64_t seed) { lenet::testing::train_epoch0(b, data().train, 256, seed); }

// Bound as in the naive mode's tests: only float32 summation order differs (the captured step also
// runs the partial minibatch at full size with masked rows, which adds exact zeros), so the parameters
// agree to far under 1e-4 of the distance they moved.
TEST(CudaGraph, ElevenStepsMatchNaiveAndCpu) {
  LENET_REQUIRE_GPU();
  const uint64_t seed = 4;
  const std::vector<float> start = model::init_parameters<float>(seed);
  engine::CpuBackend cpu(1, start);
  run_epoch0(cpu, seed);
  const std::vector<float> ref = cpu.parameters(0);
  const double moved = distance(ref, start);
  ASSERT_GT(moved, 1e-4);
  for (int r : {1, 2, 3, 4}) {
    engine::CudaGraphBackend graph(one_gpu(r), start);
    engine::CudaNaiveBackend naive(one_gpu(r), start);
    run_epoch0(graph, seed);
    run_epoch0(naive, seed);
    const std::vector<float> g = graph.parameters(0), n = naive.parameters(0);
    EXPECT_LT(distance(g, ref) / moved, 1e-4) << "graph vs CPU, R=" << r;
    EXPECT_LT(distance(g, n) / moved, 1e-4) << "graph vs naive, R=" << r;
    for (const auto& [name, got] : {std::pair<const char*, const std::vector<float>&>{"graph", g}, {"naive", n}}) {
      const lenet::testing::TensorError worst = lenet::testing::worst_tensor_error(got, ref, start);
      EXPECT_LT(worst.relative, lenet::testing::kTensorBound) << name << " vs CPU, R=" << r << ", " << worst.name;
    }
    for (int i = 1; i < r; ++i)
      EXPECT_EQ(lenet::testing::bit_difference(graph.parameters(i), g), "")
          << "replica " << i << " of " << r << " drifted";
    const model::StepStats gs = graph.take_train_stats(), ns = naive.take_train_stats();
    EXPECT_NEAR(gs.loss_sum, ns.loss_sum, 1e-4 * ns.loss_sum) << "R=" << r;
  }
}

// A replica with no rows in a minibatch (5 rows over 4 replicas: 2, 2, 1, 0) runs its captured step
// with every row masked and must add exact zeros to the ring, as in the naive mode's test.
TEST(CudaGraph, ReplicaWithNoRowsMatchesCpu) {
  LENET_REQUIRE_GPU();
  const uint64_t seed = 3;
  const std::vector<float> start = model::init_parameters<float>(seed);
  engine::CpuBackend cpu(1, start);
  lenet::testing::train_epoch0(cpu, data().train, 5, seed, 5);
  const std::vector<float> ref = cpu.parameters(0);
  const double moved = distance(ref, start);
  ASSERT_GT(moved, 1e-4);
  engine::CudaPlacement placement = one_gpu(4);
  placement.train_batch_rows = {5};
  engine::CudaGraphBackend graph(placement, start);
  lenet::testing::train_epoch0(graph, data().train, 5, seed, 5);
  const std::vector<float> got = graph.parameters(0);
  EXPECT_LT(distance(got, ref) / moved, 1e-4);
  const lenet::testing::TensorError worst = lenet::testing::worst_tensor_error(got, ref, start);
  EXPECT_LT(worst.relative, lenet::testing::kTensorBound) << worst.name;
  for (int i = 1; i < 4; ++i)
    EXPECT_EQ(lenet::testing::bit_difference(graph.parameters(i), got), "") << "replica " << i;
}

// The start-up's warm-up step (every row masked, zero learning rate) must not touch the parameters,
// even ones large enough that the forward pass overflows and the masked gradient is inf * 0 = NaN.
TEST(CudaGraph, StartUpLeavesEvenOverflowingParametersAsTheyAre) {
  LENET_REQUIRE_GPU();
  const std::vector<float> start(model::kNumParameters, 1e30f);
  engine::CudaGraphBackend graph(one_gpu(2), start);
  EXPECT_EQ(lenet::testing::bit_difference(graph.parameters(0), start), "");
  EXPECT_EQ(lenet::testing::bit_difference(graph.parameters(1), start), "");
}

TEST(CudaGraph, SameSeedGivesTheSameBits) {
  LENET_REQUIRE_GPU();
  const std::vector<float> start = model::init_parameters<float>(12);
  engine::CudaGraphBackend a(one_gpu(3), start);
  run_epoch0(a, 12);
  const std::vector<float> first = a.parameters(0);
  engine::CudaGraphBackend b(one_gpu(3), start);
  run_epoch0(b, 12);
  EXPECT_EQ(lenet::testing::bit_difference(b.parameters(0), first), "");
}

// One graph per staging slot at start-up, none after: training replays them.
TEST(CudaGraph, NoInstantiationDuringTraining) {
  LENET_REQUIRE_GPU();
  const long long before = cuda::GraphExec::instantiations();  // by the tests before this one
  engine::CudaGraphBackend backend(one_gpu(2), model::init_parameters<float>(1));
  const long long after_start = cuda::GraphExec::instantiations();
  EXPECT_EQ(after_start - before, engine::CudaGraphBackend::kSlots);
  engine::TrainOptions opt;
  opt.epochs = 3;
  std::ostringstream log;
  const engine::TrainResult r = engine::train(backend, data(), opt, log, false);
  EXPECT_EQ(cuda::GraphExec::instantiations(), after_start) << "a graph was instantiated during training";
  ASSERT_EQ(r.epochs.size(), 3u);
  const auto counters = backend.counters();
  ASSERT_EQ(counters.size(), 1u);
  EXPECT_EQ(counters[0].first, "graph_instantiations");
  EXPECT_EQ(counters[0].second, double(after_start));
}

// Labels every example of `split` with the class the CPU predicts from `params`, except near-ties (top
// two logits within 1e-3, where float32 rounding may pick either), which get the CPU's least likely
// class and so count as wrong everywhere. Returns how many count as right, and sets `a_right_one` to the
// index of one of them.
int64_t label_with_cpu_predictions(io::Split& split, const std::vector<float>& params, size_t* a_right_one) {
  model::CpuLenet<float> net;
  std::vector<float> x(model::kInPixels);
  std::vector<int32_t> y(1);
  int64_t right = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    split.slice(i, 1, x.data(), y.data());
    net.forward(params.data(), x.data(), y.data(), 1);
    const std::vector<float> logits(net.logits().begin(), net.logits().end());
    std::vector<float> top_two = logits;
    std::partial_sort(top_two.begin(), top_two.begin() + 2, top_two.end(), std::greater<float>());
    const bool near_tie = top_two[0] - top_two[1] < 1e-3f;
    split.labels[i] = uint8_t((near_tie ? std::min_element(logits.begin(), logits.end())
                                        : std::max_element(logits.begin(), logits.end())) - logits.begin());
    if (!near_tie && right++ == 0) *a_right_one = i;
  }
  return right;
}

// Every example is counted once, on whichever replica holds it, in both modes: labelled with the CPU's
// predictions, the count is exact, and one label changed takes exactly one away.
TEST(CudaGraph, EvaluationInBothModesCountsLikeTheCpu) {
  LENET_REQUIRE_GPU();
  // Parameters with well separated logits (about 0.4 apart); against the real labels they are right on
  // about 186 of the 2000.
  std::mt19937 gen(5);
  std::normal_distribution<float> w(0.f, 0.1f);
  std::vector<float> params(model::kNumParameters);
  for (float& v : params) v = w(gen);
  io::Split labelled = data().test;
  size_t changed = 0;
  const int64_t right = label_with_cpu_predictions(labelled, params, &changed);
  const int64_t all = int64_t(labelled.size());
  ASSERT_GT(right, all - 100) << "too many near-ties for the count to mean much";
  io::Split one_wrong = labelled;
  one_wrong.labels[changed] = uint8_t((one_wrong.labels[changed] + 1) % 10);
  engine::CpuBackend cpu(1, params);
  ASSERT_EQ(cpu.count_correct(labelled, 256), right);
  for (int r : {1, 3}) {
    engine::CudaGraphBackend graph(one_gpu(r), params);
    engine::CudaNaiveBackend naive(one_gpu(r), params);
    for (engine::Backend* b : {static_cast<engine::Backend*>(&graph), static_cast<engine::Backend*>(&naive)}) {
      const char* mode = b == &graph ? "graph" : "naive";
      EXPECT_EQ(b->count_correct(labelled, 256), right) << mode << ", R=" << r;
      EXPECT_EQ(b->count_correct(labelled, 256), right) << mode << ", R=" << r << ": a second evaluation differs";
      EXPECT_EQ(b->count_correct(one_wrong, 256), right - 1) << mode << ", R=" << r;
    }
  }
  // The graph mode keeps the examples it evaluated on the devices; a split changed in place since (the
  // same object, size and buffers) is evaluated as it is now.
  engine::CudaGraphBackend graph(one_gpu(2), params);
  io::Split changing = data().test;
  const int64_t before = graph.count_correct(changing, 256);
  ASSERT_LT(before, right - 100) << "the change must change the count";
  std::copy(labelled.labels.begin(), labelled.labels.end(), changing.labels.begin());
  EXPECT_EQ(graph.count_correct(changing, 256), right) << "evaluated the split as it was before the change";
}

// Interrupted and resumed from the parameters then, in both CUDA modes, equals the uninterrupted run bit
// for bit on every replica, with the same metrics (deterministic algorithms, and the shuffle depends only
// on seed and epoch). Eleven steps an epoch; stopped after step 7 (the resumed graph backend's staging
// slots swapped against the uninterrupted one's), step 8 (not swapped), step 9 (the partial minibatch
// among the resumed backend's first two steps) or epoch 1's last step (an epoch's end: the resumed run
// trains epoch 2 only).
TEST(CudaGraph, ResumeEqualsUninterruptedInBothModes) {
  LENET_REQUIRE_GPU();
  constexpr int kReplicas = 2;
  engine::TrainOptions opt;
  opt.epochs = 2;
  opt.seed = 6;
  const std::vector<float> start = model::init_parameters<float>(opt.seed);
  std::ostringstream log;
  for (const std::string mode : {"naive", "graph"}) {
    auto make = [&](const std::vector<float>& params) -> std::unique_ptr<engine::Backend> {
      if (mode == "naive") return std::make_unique<engine::CudaNaiveBackend>(one_gpu(kReplicas), params);
      return std::make_unique<engine::CudaGraphBackend>(one_gpu(kReplicas), params);
    };
    const auto algorithms = [&mode](const engine::Backend& b) {
      if (mode == "naive") return dynamic_cast<const engine::CudaNaiveBackend&>(b).algorithm_report();
      return dynamic_cast<const engine::CudaGraphBackend&>(b).algorithm_report();
    };
    auto whole = make(start);
    const engine::TrainResult uninterrupted = engine::train(*whole, data(), opt, log, false);
    ASSERT_EQ(uninterrupted.epochs.size(), 2u) << mode;
    for (const uint64_t stop_after : {uint64_t{7}, uint64_t{8}, uint64_t{9}, kBatches}) {
      const std::string where = mode + ", stopped after step " + std::to_string(stop_after);
      auto first = make(start);
      engine::TrainOptions stop = opt;
      uint64_t asked = 0;  // the trainer asks after every step but an epoch's last, and after that epoch
      std::vector<float> saved;
      uint64_t saved_step = 0;
      engine::EpochSoFar saved_so_far;
      stop.stop_requested = [&] { return ++asked == stop_after ? 15 : 0; };
      stop.checkpoint = [&](int, uint64_t step, const engine::EpochSoFar& so_far) {
        saved = first->parameters(0);
        saved_step = step;
        saved_so_far = so_far;
      };
      EXPECT_THROW(engine::train(*first, data(), stop, log, false), engine::TrainingStopped) << where;
      ASSERT_EQ(saved_step, stop_after) << where;
      auto second = make(saved);
      engine::TrainOptions resume = opt;
      resume.start_step = saved_step;
      resume.start_so_far = saved_so_far;
      const engine::TrainResult resumed = engine::train(*second, data(), resume, log, false);
      // Other cuDNN algorithms would explain bits that differ.
      EXPECT_EQ(algorithms(*second), algorithms(*whole)) << where;
      for (int r = 0; r < kReplicas; ++r) {
        EXPECT_EQ(lenet::testing::bit_difference(second->parameters(r), whole->parameters(r)), "")
            << where << ", replica " << r;
      }
      // The resumed epochs' metrics: an interrupted epoch's cover its steps before the stop too (the loss
      // sum in another order).
      const size_t skip = size_t(stop_after / kBatches);  // epochs completed before the stop
      ASSERT_EQ(resumed.epochs.size() + skip, uninterrupted.epochs.size()) << where;
      for (size_t e = 0; e < resumed.epochs.size(); ++e) {
        const engine::EpochMetrics &got = resumed.epochs[e], &want = uninterrupted.epochs[e + skip];
        EXPECT_EQ(got.epoch, want.epoch) << where;
        EXPECT_EQ(got.train_acc, want.train_acc) << where << ", epoch " << want.epoch;
        EXPECT_NEAR(got.train_loss, want.train_loss, 1e-12 * want.train_loss) << where << ", epoch " << want.epoch;
        EXPECT_EQ(got.test_acc, want.test_acc) << where << ", epoch " << want.epoch;
      }
    }
  }
}

// Replicas on two GPUs (cross-device ring copies and event waits inside the captured graph, peer
// copies in the naive mode) train as the same replicas sharing one GPU. Replica r is on GPU r % 2: with
// 2 and 4 replicas every ring neighbour is on the other GPU; with 3 (GPUs 0, 1, 0) replicas 2 and 0 are
// neighbours on one GPU, so one ring mixes both kinds of link. Needs two GPUs: with one it skips.
TEST(CudaGraph, ReplicasOnTwoGpusMatchReplicasSharingOne) {
  LENET_REQUIRE_GPU();
  if (engine::probe_cuda().devices < 2) GTEST_SKIP() << "needs two CUDA devices, this machine has one";
  const uint64_t seed = 9;
  const std::vector<float> start = model::init_parameters<float>(seed);
  for (int r : {2, 3, 4}) {
    engine::CudaPlacement two = one_gpu(r);
    two.num_gpus = 2;
    engine::CudaGraphBackend shared(one_gpu(r), start);
    run_epoch0(shared, seed);
    const std::vector<float> ref = shared.parameters(0);
    const double moved = distance(ref, start);
    engine::CudaGraphBackend graph(two, start);
    engine::CudaNaiveBackend naive(two, start);
    run_epoch0(graph, seed);
    run_epoch0(naive, seed);
    EXPECT_LT(distance(graph.parameters(0), ref) / moved, 1e-4) << "graph, R=" << r;
    EXPECT_LT(distance(naive.parameters(0), ref) / moved, 1e-4) << "naive, R=" << r;
    for (int i = 1; i < r; ++i) {
      EXPECT_EQ(graph.parameters(i), graph.parameters(0)) << "graph, replica " << i << " of " << r;
      EXPECT_EQ(naive.parameters(i), naive.parameters(0)) << "naive, replica " << i << " of " << r;
    }
    std::vector<std::string> placed;  // replica i on GPU i mod 2, in both modes
    for (int i = 0; i < r; ++i) placed.push_back("cuda:" + std::to_string(i % 2));
    EXPECT_EQ(graph.devices(), placed) << "graph, R=" << r;
    EXPECT_EQ(naive.devices(), placed) << "naive, R=" << r;
  }
}

// The loss stays on the device during an epoch, yet a diverged run names its step (tracked by the loss
// kernel), in both modes, like the CPU backend.
TEST(CudaGraph, DivergenceNamesTheStepInBothModes) {
  LENET_REQUIRE_GPU();
  engine::TrainOptions opt;
  opt.epochs = 1;
  opt.lr = 1e6;
  opt.quiet = true;
  const std::vector<float> start = model::init_parameters<float>(3);
  auto diverged_at = [&](engine::Backend& b) -> long {
    std::ostringstream log;
    try {
      engine::train(b, data(), opt, log, false);
    } catch (const engine::TrainingDiverged& e) {
      const std::string m = e.what();
      const size_t at = m.find(", at step ");
      EXPECT_NE(at, std::string::npos) << b.mode() << ": " << m;
      return at == std::string::npos ? -1 : std::stol(m.substr(at + 10));
    }
    ADD_FAILURE() << b.mode() << ": lr 1e6 did not diverge";
    return -1;
  };
  engine::CpuBackend cpu(2, start);
  const long cpu_step = diverged_at(cpu);
  engine::CudaNaiveBackend naive(one_gpu(2), start);
  engine::CudaGraphBackend graph(one_gpu(2), start);
  for (engine::Backend* b : {static_cast<engine::Backend*>(&naive), static_cast<engine::Backend*>(&graph)}) {
    // On the CPU the loss of step 2 is about 5e13 and step 3 overflows every logit: rounding differences
    // between the backends cannot move the step.
    EXPECT_EQ(diverged_at(*b), cpu_step) << b->mode();
  }
}

}  // namespace
