// The source text's central claim: splitting a minibatch over R replicas and summing their gradients
// is the same SGD as one replica on the whole minibatch. From the same seed and minibatches of real
// Fashion-MNIST, R = 1, 2, 3 and 4 (and a case where a replica gets no rows) must end at the same
// parameters, up to float32 summation order.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "engine/cpu_backend.hpp"
#include "train_steps.hpp"
#include "io/dataset.hpp"
#include "model/cpu_lenet.hpp"
#include "model/lenet.hpp"
#include "model/softmax_row.hpp"

namespace {

using namespace lenet;

const io::FashionMnist& data() {
  static const io::FashionMnist d = io::load_fashion_mnist(LENET_TEST_DATA_DIR, 2144, 100);
  return d;
}

// Runs the minibatches of epoch 0 (2144 = 8 * 256 + 96: eight full minibatches and a partial one) and
// returns every replica's parameters.
std::vector<std::vector<float>> train_replicas(int replicas, int batch, uint64_t seed, size_t max_steps = 9,
                                               int threads = 0) {
  engine::CpuBackend b(replicas, model::init_parameters<float>(seed), threads);
  lenet::testing::train_epoch0(b, data().train, batch, seed, max_steps);
  std::vector<std::vector<float>> out;
  for (int i = 0; i < replicas; ++i) out.push_back(b.parameters(i));
  return out;
}

std::vector<float> train_steps(int replicas, int batch, uint64_t seed) { return train_replicas(replicas, batch, seed)[0]; }


TEST(Equivalence, ReplicaCountDoesNotChangeTheParameters) {
  const uint64_t seed = 5;
  const std::vector<float> start = model::init_parameters<float>(seed);
  const std::vector<float> one = train_steps(1, 256, seed);
  const double moved = lenet::testing::distance(one, start);
  ASSERT_GT(moved, 1e-3) << "the steps must change the parameters for the comparison to mean anything";
  for (int r : {2, 3, 4}) {
    const std::vector<std::vector<float>> all = train_replicas(r, 256, seed);
    const std::vector<float>& got = all[0];
    // Only summation order differs (per-replica GEMM sums, the ring's chunk sums): float32 rounding of
    // ~1e-7 relative per operation, accumulated over 9 steps, stays orders of magnitude under 1e-4 of
    // the distance the parameters moved; a wrong split, divisor or reduction gives O(1).
    EXPECT_LT(lenet::testing::distance(got, one) / moved, 1e-4) << "R=" << r;
    // Tensor by tensor too (here under 6e-6), so that a small error in a tensor that moves little, a
    // 0.1% error in conv1.bias's gradient for one, does not vanish in the whole distance.
    const lenet::testing::TensorError worst = lenet::testing::worst_tensor_error(got, one, start);
    EXPECT_LT(worst.relative, 1e-4) << "R=" << r << ", " << worst.name;
    for (int i = 1; i < r; ++i)
      EXPECT_EQ(lenet::testing::bit_difference(all[size_t(i)], got), "")
          << "replica " << i << " of " << r << " differs";
  }
}

// The per-tensor comparison: a tensor that did not move is right only where it did not move either, and
// a NaN fails every bound.
TEST(Equivalence, WorstTensorErrorOfATensorThatDidNotMove) {
  const std::vector<float> start(model::kNumParameters, 1.0f);
  std::vector<float> ref = start;
  for (size_t i = 0; i < ref.size(); i += 2) ref[i] = 2.0f;  // every tensor moves
  const size_t fc2_bias = model::tensor_specs().back().offset;
  for (size_t i = fc2_bias; i < ref.size(); ++i) ref[i] = 1.0f;  // but fc2.bias
  std::vector<float> got = ref;
  EXPECT_EQ(lenet::testing::worst_tensor_error(got, ref, start).relative, 0.0);
  got[fc2_bias] = 1.0f + 1e-6f;
  lenet::testing::TensorError worst = lenet::testing::worst_tensor_error(got, ref, start);
  EXPECT_TRUE(std::isinf(worst.relative));
  EXPECT_STREQ(worst.name, "fc2.bias");
  got[fc2_bias] = 1.0f;
  got[0] = std::nanf("");
  worst = lenet::testing::worst_tensor_error(got, ref, start);
  EXPECT_TRUE(std::isnan(worst.relative));
  EXPECT_STREQ(worst.name, "conv1.weight");
}

TEST(Equivalence, ReplicaWithNoRowsContributesNothing) {
  // Batch 5 over 4 replicas: rows 2, 2, 1, 0.
  const uint64_t seed = 9;
  const std::vector<float> start = model::init_parameters<float>(seed);
  const std::vector<float> one = train_steps(1, 5, seed);
  const std::vector<float> four = train_steps(4, 5, seed);
  EXPECT_LT(lenet::testing::distance(four, one) / lenet::testing::distance(one, start), 1e-4);
  const lenet::testing::TensorError worst = lenet::testing::worst_tensor_error(four, one, start);
  EXPECT_LT(worst.relative, 1e-4) << worst.name;
}

// The backend runs chunks of kCpuChunkRows rows in parallel, in waves of kCpuChunksPerWave; CpuLenet
// passes over the minibatch in pieces of up to 256 rows are the same step up to summation order.
class ChunkedStep : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Equivalence, ChunkedStep,
                         ::testing::Values(3 * engine::kCpuChunkRows + 5,  // one wave, a partial chunk too
                                           int(2 * engine::kCpuChunksPerWave) * engine::kCpuChunkRows + 5));  // three

TEST_P(ChunkedStep, EqualsPassesOverTheWholeMinibatch) {
  const int rows = GetParam();
  ASSERT_LE(size_t(rows), data().train.size());
  const std::vector<float> start = model::init_parameters<float>(3);
  std::vector<uint32_t> idx(static_cast<size_t>(rows));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint32_t>(7 * i % data().train.size());
  const float lr = 0.2f;

  engine::CpuBackend b(1, start);
  b.train_step(data().train, idx.data(), rows, lr);
  const model::StepStats chunked = b.take_train_stats();

  std::vector<float> x(static_cast<size_t>(rows) * model::kInPixels), grads(model::kNumParameters, 0.0f);
  std::vector<float> piece_grads(model::kNumParameters);
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  data().train.gather(idx.data(), idx.size(), x.data(), labels.data());
  model::CpuLenet<float> net;
  model::StepStats whole;
  for (int first = 0; first < rows; first += 256) {
    const int n = std::min(256, rows - first);
    const model::StepStats st = net.forward_backward(start.data(), x.data() + size_t(first) * model::kInPixels,
                                                     labels.data() + first, n, piece_grads.data());
    whole.loss_sum += st.loss_sum;
    whole.correct += st.correct;
    for (size_t j = 0; j < grads.size(); ++j) grads[j] += piece_grads[j];
  }
  std::vector<float> want = start;
  model::sgd_update(want.data(), grads.data(), model::kNumParameters, lr / float(rows));

  EXPECT_EQ(chunked.correct, whole.correct);
  EXPECT_NEAR(chunked.loss_sum, whole.loss_sum, 1e-5 * whole.loss_sum);
  const double moved = lenet::testing::distance(want, start);
  ASSERT_GT(moved, 1e-4);
  EXPECT_LT(lenet::testing::distance(b.parameters(0), want) / moved, 1e-5);
}

// The step bit for bit: each replica's gradient is its chunks' gradients summed in chunk order from
// zero, the replicas' gradients are then added (with two replicas the ring's one addition, the same bits
// either way round) and the SGD update applied. 101 rows over 2 replicas: 51 and 50, four chunks each,
// so a changed chunk order (not only a swap of two addends) or chunks summed into another replica's
// gradient changes rounding, which the tolerance of the tests above lets through.
TEST(Equivalence, StepIsEachReplicasChunksSummedInOrderThenTheReplicasSum) {
  const int rows = 101;
  const std::vector<float> start = model::init_parameters<float>(4);
  std::vector<uint32_t> idx(static_cast<size_t>(rows));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint32_t>(11 * i % data().train.size());
  const float lr = 0.2f;
  engine::CpuBackend b(2, start);  // first: it makes OpenBLAS single-threaded, for the reference below too
  b.train_step(data().train, idx.data(), rows, lr);

  std::vector<float> x(static_cast<size_t>(rows) * model::kInPixels), piece(model::kNumParameters);
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  data().train.gather(idx.data(), idx.size(), x.data(), labels.data());
  model::CpuLenet<float> net;
  std::vector<std::vector<float>> replica_grads;
  for (const engine::RowRange& part : engine::split_rows(rows, 2)) {
    ASSERT_GE(part.rows, 3 * engine::kCpuChunkRows);
    std::vector<float> g(model::kNumParameters, 0.0f);
    for (int first = part.first; first < part.first + part.rows; first += engine::kCpuChunkRows) {
      const int n = std::min(engine::kCpuChunkRows, part.first + part.rows - first);
      net.forward_backward(start.data(), x.data() + size_t(first) * model::kInPixels, labels.data() + first, n,
                           piece.data());
      for (size_t j = 0; j < g.size(); ++j) g[j] += piece[j];
    }
    replica_grads.push_back(g);
  }
  ASSERT_EQ(replica_grads.size(), 2u);
  std::vector<float> sum(model::kNumParameters), want = start;
  for (size_t j = 0; j < sum.size(); ++j) sum[j] = replica_grads[0][j] + replica_grads[1][j];
  model::sgd_update(want.data(), sum.data(), model::kNumParameters, model::sgd_scale(lr, rows));
  ASSERT_NE(lenet::testing::bit_difference(want, start), "");
  EXPECT_EQ(lenet::testing::bit_difference(b.parameters(0), want), "");
  EXPECT_EQ(lenet::testing::bit_difference(b.parameters(1), want), "");
}

// Parameters of any other length are refused, too many as well as too few.
TEST(Equivalence, InitialParametersOfAnotherLengthAreRefused) {
  for (const size_t n : {model::kNumParameters - 1, model::kNumParameters + 1, size_t{0}})
    EXPECT_THROW(engine::CpuBackend(1, std::vector<float>(n, 0.0f)), std::invalid_argument) << n;
  EXPECT_NO_THROW(engine::CpuBackend(1, std::vector<float>(model::kNumParameters, 0.0f)));
}

// The thread count asked for is the one used, so the next test compares really different runs.
TEST(Equivalence, TheThreadCountAskedForIsTheOneUsed) {
  if (!engine::cpu_backend_is_parallel()) GTEST_SKIP() << "built without OpenMP: one thread";
  for (const int threads : {1, 2, 5, 40})
    EXPECT_EQ(engine::CpuBackend(2, model::init_parameters<float>(7), threads).threads(), threads);
}

// A chunk that throws (a failed allocation) ends the step with its error, once every other chunk has run:
// none may leave the threads' region, nor may the error be lost. Each call gets a thread below `threads`.
TEST(Equivalence, AnErrorInOneChunkReachesTheCaller) {
  for (const int threads : {1, 2, 4}) {
    std::atomic<int> calls{0}, bad_thread{0};
    try {
      engine::parallel_for(9, threads, [&](int i, int thread) {
        ++calls;
        if (thread < 0 || thread >= threads) ++bad_thread;
        if (i == 6) throw std::runtime_error("chunk 6 failed");
      });
      ADD_FAILURE() << "no error with " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "chunk 6 failed") << threads;
    }
    EXPECT_EQ(calls, 9) << threads;
    EXPECT_EQ(bad_thread, 0) << threads;
  }
}

// Each chunk has its own gradient buffer and they are added in chunk order: the thread count cannot
// change a bit, nor can the waves it sizes (batch 2053 over 2 replicas: 130 chunks, in waves of 64
// with 1 to 32 threads and of 80 with 40).
TEST(Equivalence, ThreadCountDoesNotChangeTheBits) {
  const std::vector<float> one = train_replicas(2, 256, 7, 3, 1)[0];
  EXPECT_EQ(train_replicas(2, 256, 7, 3, 2)[0], one);
  EXPECT_EQ(train_replicas(2, 256, 7, 3, 5)[0], one);
  const std::vector<float> big = train_replicas(2, 2053, 7, 1, 1)[0];
  EXPECT_EQ(train_replicas(2, 2053, 7, 1, 40)[0], big);
}

// Evaluation runs in chunks of kCpuChunkRows; the test split here (100 rows) ends in a partial one.
// Labels set to the model's own predictions make every row count, so a dropped or doubled row shows.
TEST(Equivalence, CountCorrectSeesEveryRowOfTheSplit) {
  const std::vector<float> params = train_replicas(1, 256, 5)[0];
  io::Split test = data().test;
  const size_t n = test.size();
  ASSERT_NE(n % engine::kCpuChunkRows, 0u);
  std::vector<float> x(n * model::kInPixels);
  std::vector<int32_t> labels(n);
  test.slice(0, n, x.data(), labels.data());
  model::CpuLenet<float> net;
  net.forward(params.data(), x.data(), labels.data(), static_cast<int>(n));
  for (size_t i = 0; i < n; ++i)
    test.labels[i] = static_cast<uint8_t>(model::argmax_row(net.logits().data() + i * model::kClasses, model::kClasses));
  engine::CpuBackend b(1, params);
  EXPECT_EQ(b.count_correct(test, 256), static_cast<int64_t>(n));
  test.labels[n - 1] = static_cast<uint8_t>((test.labels[n - 1] + 1) % model::kClasses);  // the last row now wrong
  EXPECT_EQ(b.count_correct(test, 256), static_cast<int64_t>(n) - 1);
}

TEST(Equivalence, SameSeedSameBits) {
  EXPECT_EQ(train_steps(3, 256, 7), train_steps(3, 256, 7));
  EXPECT_NE(train_steps(1, 256, 7), train_steps(1, 256, 8));
}

}  // namespace
