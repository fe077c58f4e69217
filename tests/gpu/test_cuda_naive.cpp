// The CUDA naive mode against the CPU backend on real Fashion-MNIST, from the same seed and the same
// minibatches, with R = 1, 2 and 4 replicas placed on one GPU, and determinism from run to run.
#include <cmath>

#include "engine/cpu_backend.hpp"
#include "engine/cuda_naive_backend.hpp"
#include "engine/ring.hpp"
#include "gpu_test.hpp"
#include "train_steps.hpp"
#include "io/dataset.hpp"
#include "model/lenet.hpp"

namespace {

using namespace lenet;
using lenet::testing::distance;

const io::FashionMnist& data() {
  static const io::FashionMnist d = io::load_fashion_mnist(LENET_TEST_DATA_DIR);
  return d;
}

engine::CudaPlacement one_gpu(int replicas, int batch) {
  engine::CudaPlacement p;
  p.num_gpus = 1;
  p.replicas = replicas;
  p.train_batch_rows = {batch};
  p.eval_batch_rows = {batch};
  return p;
}

// After the steps, the GPU parameters differ from the CPU backend's by under 1e-4 of the distance the
// parameters moved: only float32 summation order differs (cuDNN's and OpenBLAS's sums, the allreduce's
// order), ~1e-6 relative per step; a wrong split, divisor or reduction gives O(1).
void compare_with_cpu(int replicas, int batch, size_t steps) {
  const uint64_t seed = 3;
  const std::vector<float> start = model::init_parameters<float>(seed);
  engine::CpuBackend cpu(1, start);
  lenet::testing::train_epoch0(cpu, data().train, batch, seed, steps);
  engine::CudaNaiveBackend gpu(one_gpu(replicas, batch), start);
  lenet::testing::train_epoch0(gpu, data().train, batch, seed, steps);
  const std::vector<float> ref = cpu.parameters(0);
  const double moved = distance(ref, start);
  ASSERT_GT(moved, 1e-4);
  const std::vector<float> got = gpu.parameters(0);
  EXPECT_LT(distance(got, ref) / moved, 1e-4) << "R=" << replicas << " batch=" << batch << " steps=" << steps;
  const lenet::testing::TensorError worst = lenet::testing::worst_tensor_error(got, ref, start);
  EXPECT_LT(worst.relative, lenet::testing::kTensorBound) << "R=" << replicas << " batch=" << batch << ", " << worst.name;
  for (int r = 1; r < replicas; ++r) EXPECT_EQ(gpu.parameters(r), got) << "replica " << r << " drifted";
  const model::StepStats cs = cpu.take_train_stats(), gs = gpu.take_train_stats();
  EXPECT_NEAR(gs.loss_sum, cs.loss_sum, 1e-4 * cs.loss_sum);
}

TEST(CudaNaive, OneStepMatchesCpu) {
  LENET_REQUIRE_GPU();
  for (int r : {1, 2, 4}) compare_with_cpu(r, 256, 1);
}

TEST(CudaNaive, TenStepsMatchCpu) {
  LENET_REQUIRE_GPU();
  for (int r : {1, 2, 4}) compare_with_cpu(r, 256, 10);
}

TEST(CudaNaive, ReplicaWithNoRowsMatchesCpu) {
  LENET_REQUIRE_GPU();
  compare_with_cpu(4, 5, 5);  // rows 2, 2, 1, 0
}

TEST(CudaNaive, SameSeedGivesTheSameBits) {
  LENET_REQUIRE_GPU();
  const std::vector<float> start = model::init_parameters<float>(11);
  engine::CudaNaiveBackend a(one_gpu(2, 256), start), b(one_gpu(2, 256), start);
  lenet::testing::train_epoch0(a, data().train, 256, 11, 10);
  lenet::testing::train_epoch0(b, data().train, 256, 11, 10);
  EXPECT_EQ(a.parameters(0), b.parameters(0));
}

TEST(CudaNaive, DevicesNameEveryReplica) {
  LENET_REQUIRE_GPU();
  engine::CudaNaiveBackend b(one_gpu(2, 256), model::init_parameters<float>(1));
  EXPECT_EQ(b.devices(), (std::vector<std::string>{"cuda:0", "cuda:0"}));
}

// Rows above a replica's capacity are refused before they are copied into its input buffers (the copy
// would write past them), not only by the layers' check after it. The evaluation's batches, 256 rows and
// the test set's last 16, are announced as the command line announces them.
TEST(CudaNaive, RowsAboveTheCapacityAreRefusedBeforeTheCopy) {
  LENET_REQUIRE_GPU();
  engine::CudaPlacement placement = one_gpu(1, 256);
  placement.eval_batch_rows = engine::minibatch_sizes(data().test.size(), 256);
  engine::CudaNaiveBackend b(placement, model::init_parameters<float>(1));
  try {
    b.count_correct(data().test, 257);
    ADD_FAILURE() << "an evaluation batch of 257 rows was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "CudaNaiveBackend: replica 0 takes at most 256 rows, not 257");
  }
  engine::CudaNaiveBackend fresh(placement, model::init_parameters<float>(1));
  EXPECT_EQ(b.count_correct(data().test, 256), fresh.count_correct(data().test, 256)) << "a count after the refusal";
}

}  // namespace
