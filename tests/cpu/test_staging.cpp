// The plain arithmetic the CUDA graph mode relies on, checked without a GPU: staging-slot rotation and the
// order of its copies, waits and replays on a model of streams and events, per-replica buffer capacity over
// full and partial minibatches, the per-step parameters read at replay, and masking (a step computed on a
// full-size buffer with the extra rows masked equals the step on the real rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/lent_block.hpp"
#include "engine/ring.hpp"
#include "engine/staging.hpp"
#include "model/cpu_lenet.hpp"
#include "stream_order.hpp"

namespace {

using namespace lenet;

TEST(StagingSlots, RotateAndNameTheStepThatLastUsedTheSlot) {
  const engine::StagingSlots s(2);
  EXPECT_EQ(s.slot(0), 0);
  EXPECT_EQ(s.slot(1), 1);
  EXPECT_EQ(s.slot(2), 0);
  EXPECT_EQ(s.previous_user(0), -1);
  EXPECT_EQ(s.previous_user(1), -1);
  EXPECT_EQ(s.previous_user(2), 0);
  EXPECT_EQ(s.previous_user(7), 5);
  const engine::StagingSlots three(3);
  for (uint64_t k = 0; k < 20; ++k) {
    if (three.previous_user(k) >= 0) {
      EXPECT_EQ(three.slot(uint64_t(three.previous_user(k))), three.slot(k)) << "the previous user shares the slot";
    }
  }
  EXPECT_THROW(engine::StagingSlots(1), std::invalid_argument);
}

TEST(StagingSlots, CapacityCoversEveryMinibatchShare) {
  // 60000 examples in minibatches of 26 over 6 replicas: full minibatches give 5,5,5,5,5,1, the last
  // (18 rows) 3 each, so the last replica needs room for 3, not 1.
  EXPECT_EQ(engine::largest_share({26}, 6, 5), 1);
  EXPECT_EQ(engine::largest_share({26, 60000 % 26}, 6, 5), 3);
  for (int b = 1; b <= 40; ++b)
    for (int r = 1; r <= 8; ++r)
      for (int last = 1; last <= b; ++last)
        for (int i = 0; i < r; ++i) {
          const int cap = engine::largest_share({b, last}, r, i);
          ASSERT_GE(cap, engine::split_rows(b, r)[size_t(i)].rows);
          ASSERT_GE(cap, engine::split_rows(last, r)[size_t(i)].rows);
        }
}

// Exactly the most, not just enough: a replica past the end of every minibatch (B = 5, R = 4: 2, 2, 1, 0)
// gets none; the GPU modes size its buffers for one row themselves.
TEST(StagingSlots, LargestShareIsTheMostRowsAndNoneForAReplicaThatGetsNone) {
  EXPECT_EQ(engine::largest_share({5}, 4, 3), 0);
  EXPECT_EQ(engine::largest_share({5, 3}, 4, 3), 0);
  for (int b = 1; b <= 20; ++b)
    for (int last = 1; last <= b; ++last)
      for (int i = 0; i < 6; ++i)
        ASSERT_EQ(engine::largest_share({b, last}, 6, i),
                  std::max(engine::split_rows(b, 6)[size_t(i)].rows, engine::split_rows(last, 6)[size_t(i)].rows));
}

TEST(StagingSlots, MinibatchSizesOfAnEpoch) {
  EXPECT_EQ(engine::minibatch_sizes(60000, 256), (std::vector<int>{256, 96}));
  EXPECT_EQ(engine::minibatch_sizes(512, 256), (std::vector<int>{256}));
  EXPECT_EQ(engine::minibatch_sizes(100, 256), (std::vector<int>{100}));
}

// GPUs no replica runs on are left out, so that a run opens only the GPUs it uses; replica r runs on
// GPU r mod (GPUs used), the same GPU as r mod (GPUs given) for every replica.
TEST(CudaPlacement, ReplicasGoRoundTheGpusTheyUseAndNoOthers) {
  const engine::CudaPlacement one = engine::place(8, 1, 60000, 10000, 256);
  EXPECT_EQ(one.num_gpus, 1);
  EXPECT_EQ(one.device(0), 0);
  EXPECT_EQ(one.train_batch_rows, (std::vector<int>{256, 96}));
  EXPECT_EQ(one.eval_batch_rows, (std::vector<int>{256, 16}));
  for (int gpus = 1; gpus <= 8; ++gpus)
    for (int replicas = 1; replicas <= 10; ++replicas) {
      const engine::CudaPlacement p = engine::place(gpus, replicas, 100, 10, 32);
      EXPECT_EQ(p.num_gpus, std::min(gpus, replicas));
      EXPECT_EQ(p.replicas, replicas);
      std::vector<int> used(size_t(gpus), 0);
      for (int r = 0; r < replicas; ++r) {
        EXPECT_EQ(p.device(r), r % gpus) << gpus << " GPUs, replica " << r;
        ++used.at(size_t(p.device(r)));
      }
      for (int g = 0; g < p.num_gpus; ++g) EXPECT_GT(used[size_t(g)], 0) << "GPU " << g << " opened for no replica";
    }
  EXPECT_THROW(engine::place(0, 1, 100, 10, 32), std::invalid_argument);
  EXPECT_THROW(engine::place(1, 0, 100, 10, 32), std::invalid_argument);
  EXPECT_THROW(engine::place(1, 1, 100, 10, 0), std::invalid_argument);
}

TEST(CudaPlacement, AskingForMoreGpusThanAreVisibleNamesTheFlagAndTheCount) {
  EXPECT_EQ(engine::num_gpus_error(2, 2), "");
  EXPECT_EQ(engine::num_gpus_error(1, 8), "");
  EXPECT_EQ(engine::num_gpus_error(3, 2), "--num-gpus 3: only 2 GPUs are visible");
  EXPECT_EQ(engine::num_gpus_error(2, 1), "--num-gpus 2: only 1 GPU is visible");
}

TEST(LentBlock, LendsItsMemoryToOneRequestAtATimeAndNeverMoreThanItHas) {
  char memory[64];
  engine::LentBlock block("the block", memory, sizeof memory);
  EXPECT_EQ(block.lend(64), memory);
  EXPECT_TRUE(block.lent());
  try {
    block.lend(1);
    FAIL() << "a second request got the block while it was lent";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "the block: a second request while the block is lent");
  }
  block.give_back();
  EXPECT_FALSE(block.lent());
  EXPECT_EQ(block.lend(0), memory);
  block.give_back();
  try {
    block.lend(65);
    FAIL() << "a request larger than the block was granted";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "the block: a request for 65 bytes, more than the 64 allocated");
  }
  EXPECT_FALSE(block.lent()) << "a refused request leaves the block free";
}

// An empty request is a request too: granted while the block is out, its give_back would free the block
// under the first request.
TEST(LentBlock, EvenAnEmptyRequestWaitsForTheBlockToComeBack) {
  char memory[8];
  engine::LentBlock block("the block", memory, sizeof memory);
  block.lend(8);
  EXPECT_THROW(block.lend(0), std::logic_error);
  EXPECT_TRUE(block.lent());
}

TEST(StagingSlots, StepParametersCarryRowsAndTheSgdScale) {
  const engine::StepParams p = engine::step_params(32, 96, 0.2f);
  EXPECT_EQ(p.rows, 32);
  EXPECT_EQ(p.scale, model::sgd_scale(0.2f, 96));  // the CPU backend's scale, to the bit
  EXPECT_THROW(engine::step_params(0, 0, 0.2f), std::invalid_argument);
}

// A replica past the end of a minibatch (B = 5 over 4 replicas: 2, 2, 1, 0) still replays its captured
// step with every row masked: zero rows and the minibatch's scale, not an error.
TEST(StagingSlots, StepParametersOfAReplicaWithNoRowsAreValid) {
  const engine::StepParams p = engine::step_params(0, 5, 0.1f);
  EXPECT_EQ(p.rows, 0);
  EXPECT_EQ(p.scale, model::sgd_scale(0.1f, 5));
}

// One float division, lr / rows: lr * (1 / rows) differs in the last bit for about a quarter of the
// pairs below (0.1f and 5 among them), and the GPU and CPU updates would no longer agree to the bit.
TEST(StagingSlots, SgdScaleIsOneFloatDivision) {
  for (float lr : {0.2f, 0.1f, 0.01f, 0.05f})
    for (int rows = 1; rows <= 300; ++rows)
      ASSERT_EQ(model::sgd_scale(lr, rows), lr / static_cast<float>(rows)) << "lr " << lr << ", rows " << rows;
}

// The graph mode's staging and replay on the model of streams and events: stream 0 is the host, 1..R the
// replicas' copy streams, R + 1 the root stream; events "copied" of replica r and slot s at r * S + s,
// "replayed" of slot s at R * S + s. Every operation on a device stream is enqueued by the host after what the host
// did and waited for before, so it first takes the host's clock. The replay's reads stand for the graph's
// (its nodes run after the root stream's earlier work and before its later work).
class StagingModel {
 public:
  StagingModel(size_t replicas, size_t slots) : order(replicas + 2, (replicas + 1) * slots), r_(replicas), s_(slots) {}

  void host_wait_copied(size_t r, size_t s) { order.wait(kHost, copied(r, s)); }
  void fill(size_t r, size_t s) { order.access(kHost, pinned(r, s), 0, 1, true); }
  void copy_wait_replayed(size_t r, size_t s) {
    on(copy_stream(r));
    order.wait(copy_stream(r), replayed(s));
  }
  void copy(size_t r, size_t s) {
    on(copy_stream(r));
    order.access(copy_stream(r), pinned(r, s), 0, 1, false);
    order.access(copy_stream(r), device(r, s), 0, 1, true);
  }
  void record_copied(size_t r, size_t s) {
    on(copy_stream(r));
    order.record(copy_stream(r), copied(r, s));
  }
  void root_wait_copied(size_t r, size_t s) {
    on(root_stream());
    order.wait(root_stream(), copied(r, s));
  }
  void replay(size_t s) {
    on(root_stream());
    for (size_t r = 0; r < r_; ++r) order.access(root_stream(), device(r, s), 0, 1, false);
  }
  void record_replayed(size_t s) {
    on(root_stream());
    order.record(root_stream(), replayed(s));
  }

  lenet::test::StreamOrder order;

 private:
  static constexpr size_t kHost = 0;
  size_t copy_stream(size_t r) const { return 1 + r; }
  size_t root_stream() const { return r_ + 1; }
  size_t copied(size_t r, size_t s) const { return r * s_ + s; }
  size_t replayed(size_t s) const { return r_ * s_ + s; }
  static std::string pinned(size_t r, size_t s) { return "pinned " + std::to_string(r) + "/" + std::to_string(s); }
  static std::string device(size_t r, size_t s) { return "device " + std::to_string(r) + "/" + std::to_string(s); }
  // The host enqueues the operation only now: it follows everything the host did or waited for.
  void on(size_t stream) { order.follow(stream, kHost); }

  size_t r_, s_;
};

void staged_steps(const engine::StagingSlots& staging, size_t replicas, uint64_t steps, StagingModel& model) {
  for (uint64_t k = 0; k < steps; ++k) {
    engine::enqueue_staging(staging, k, replicas, model);
    engine::enqueue_replay(staging, k, replicas, model);
  }
}

TEST(StagingOnStreams, NoSlotIsRefilledWhileItsLastCopyOrReplayMayRun) {
  for (int slots : {2, 3}) {
    for (size_t replicas = 1; replicas <= 4; ++replicas) {
      const engine::StagingSlots staging(slots);
      StagingModel model(replicas, size_t(slots));
      staged_steps(staging, replicas, 4 * uint64_t(slots) + 1, model);
      const std::vector<std::string> races = model.order.races();
      EXPECT_TRUE(races.empty()) << slots << " slots, " << replicas << " replicas: " << races.size()
                                 << " races, first " << races.front();
    }
  }
}

TEST(StagingOnStreams, TheModelSeesARaceWhenAnyWaitIsMissing) {
  const engine::StagingSlots staging(2);
  for (size_t replicas = 1; replicas <= 3; ++replicas) {
    StagingModel all(replicas, 2);
    staged_steps(staging, replicas, 6, all);
    ASSERT_TRUE(all.order.races().empty());
    // Four reused steps, each with R host waits, R copy-stream waits and R root waits; two fresh steps
    // with R root waits each.
    ASSERT_EQ(all.order.waits(), 14 * replicas);
    for (size_t skip = 0; skip < all.order.waits(); ++skip) {
      StagingModel model(replicas, 2);
      model.order.drop_wait(skip);
      staged_steps(staging, replicas, 6, model);
      EXPECT_FALSE(model.order.races().empty()) << replicas << " replicas: wait " << skip << " of "
                                                << all.order.waits() << " dropped";
    }
  }
}

TEST(Masking, MaskedFullBufferEqualsTheRealRows) {
  std::mt19937 gen(21);
  std::normal_distribution<float> w(0.f, 0.1f);
  std::uniform_real_distribution<float> px(0.f, 1.f);
  std::vector<float> params(model::kNumParameters);
  for (float& v : params) v = w(gen);
  const int capacity = 64, valid = 23;
  std::vector<float> x(size_t(capacity) * model::kInPixels);
  for (float& v : x) v = px(gen);  // the masked rows hold real-looking stale data
  std::vector<int32_t> labels(capacity);
  for (int i = 0; i < capacity; ++i) labels[size_t(i)] = int32_t(gen() % model::kClasses);

  model::CpuLenet<float> net;
  std::vector<float> real(model::kNumParameters), masked(model::kNumParameters);
  const model::StepStats a = net.forward_backward(params.data(), x.data(), labels.data(), valid, real.data());
  const model::StepStats b = net.forward_backward(params.data(), x.data(), labels.data(), capacity, masked.data(), valid);
  EXPECT_EQ(a.correct, b.correct);
  EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-6 * std::fabs(a.loss_sum));
  // Masked rows add exact zeros; only the GEMMs' blocking over more rows may reorder the sums, which
  // moves float32 results by a few ulps (~1e-7 relative), far under the 1e-5 bound.
  double num = 0, den = 0;
  for (size_t i = 0; i < real.size(); ++i) {
    num += (double(masked[i]) - real[i]) * (double(masked[i]) - real[i]);
    den += double(real[i]) * real[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

// A replica whose share of a partial minibatch is empty runs its full buffer with every row masked:
// nothing counts, and every gradient is an exact zero (stale rows must not leak in).
TEST(Masking, EveryRowMaskedGivesNoLossNoHitsAndZeroGradients) {
  std::mt19937 gen(22);
  std::normal_distribution<float> w(0.f, 0.1f);
  std::vector<float> params(model::kNumParameters);
  for (float& v : params) v = w(gen);
  const int capacity = 16;
  std::vector<float> x(size_t(capacity) * model::kInPixels, 0.5f);
  std::vector<int32_t> labels(capacity, 3);
  std::vector<float> grads(model::kNumParameters, 1.0f);
  model::CpuLenet<float> net;
  // An unmasked step first leaves every row's loss gradient in the network's buffers.
  std::vector<float> first_grads(model::kNumParameters);
  net.forward_backward(params.data(), x.data(), labels.data(), capacity, first_grads.data());
  const model::StepStats s = net.forward_backward(params.data(), x.data(), labels.data(), capacity, grads.data(), 0);
  EXPECT_EQ(s.loss_sum, 0.0);
  EXPECT_EQ(s.correct, 0);
  EXPECT_EQ(std::count(grads.begin(), grads.end(), 0.0f), std::ptrdiff_t(grads.size()));
}

}  // namespace
