// The minibatch split and the ring allreduce schedule, executed on host buffers, and the order of the
// graph mode's captured step with its ring (forks, waits, copies, event records, joins) on a model of
// streams and events. Inputs are small integers stored in floats, so every partial sum is exact and the
// result must equal the exact sum bit for bit, in whatever order the schedule adds.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/ring.hpp"
#include "engine/staging.hpp"
#include "model/lenet.hpp"
#include "stream_order.hpp"

namespace {

using namespace lenet::engine;

TEST(SplitRows, LikeTorchChunk) {
  for (int b : {256, 96, 7}) {
    for (int r = 1; r <= 8; ++r) {
      const std::vector<RowRange> parts = split_rows(b, r);
      ASSERT_EQ(parts.size(), size_t(r));
      const int per = (b + r - 1) / r;
      int next = 0;
      for (int i = 0; i < r; ++i) {
        const RowRange p = parts[size_t(i)];
        EXPECT_EQ(p.first, std::min(next, b)) << "B=" << b << " R=" << r;
        EXPECT_EQ(p.rows, std::max(0, std::min(per, b - i * per))) << "B=" << b << " R=" << r << " i=" << i;
        next = p.first + p.rows;
      }
      EXPECT_EQ(next, b) << "every row exactly once";
    }
  }
  const std::vector<RowRange> p = split_rows(5, 4);  // 2, 2, 1, 0: the last replica gets nothing
  EXPECT_EQ(p[0].rows, 2);
  EXPECT_EQ(p[2].rows, 1);
  EXPECT_EQ(p[3].rows, 0);
  EXPECT_EQ(split_rows(96, 3)[2].rows, 32);
  EXPECT_EQ(split_rows(7, 8)[7].rows, 0);
}

// A minibatch of no rows is no error (a negative count is): every replica gets none.
TEST(SplitRows, NoRowsGiveEveryReplicaNone) {
  for (int r = 1; r <= 4; ++r)
    for (const RowRange& p : split_rows(0, r)) EXPECT_EQ(p.rows, 0) << "R=" << r;
}

TEST(Batches, CoverTheRowsInOrderOnlyTheLastPartial) {
  for (size_t width = 1; width <= 12; ++width) {
    for (size_t rows = 0; rows <= 50; ++rows) {
      const std::vector<ChunkRange> b = batches(rows, width);
      ASSERT_EQ(b.size(), (rows + width - 1) / width) << rows << " rows, width " << width;
      size_t next = 0;
      for (size_t i = 0; i < b.size(); ++i) {
        EXPECT_EQ(b[i].offset, next) << rows << " rows, width " << width << ", batch " << i;
        EXPECT_EQ(b[i].size, i + 1 < b.size() ? width : rows - next) << rows << " rows, width " << width;
        EXPECT_GE(b[i].size, 1u);
        next += b[i].size;
      }
      EXPECT_EQ(next, rows) << "every row once, width " << width;
    }
  }
  // The test set in the source text's minibatches: 39 of 256 and one of 16.
  const std::vector<ChunkRange> test_set = batches(10000, 256);
  ASSERT_EQ(test_set.size(), 40u);
  EXPECT_EQ(test_set.back().offset, 9984u);
  EXPECT_EQ(test_set.back().size, 16u);
  EXPECT_THROW(batches(5, 0), std::invalid_argument);
}

TEST(Batches, PaddedRowsHoldEveryBatchAtFullWidth) {
  for (size_t width = 1; width <= 12; ++width) {
    for (size_t rows = 0; rows <= 50; ++rows) {
      const size_t padded = padded_rows(rows, width);
      EXPECT_EQ(padded % width, 0u) << rows << " rows, width " << width;
      EXPECT_GE(padded, std::max(rows, width)) << rows << " rows, width " << width;
      EXPECT_LT(padded, std::max(rows, size_t{1}) + width) << "less than a batch of padding";
      // Graph mode's captured forward pass reads `width` rows from every batch's first.
      for (const ChunkRange& b : batches(rows, width)) EXPECT_LE(b.offset + width, padded);
    }
  }
  EXPECT_EQ(padded_rows(0, 8), 8u);  // a replica without test rows still has one batch of buffers
  EXPECT_EQ(padded_rows(16, 8), 16u);
  EXPECT_EQ(padded_rows(17, 8), 24u);
  EXPECT_THROW(padded_rows(5, 0), std::invalid_argument);
}

TEST(RingSchedule, ChunksAndStepsAreWellFormed) {
  for (int r = 1; r <= 8; ++r) {
    for (size_t len : {size_t(0), size_t(1), size_t(5), size_t(129068)}) {
      const RingSchedule s(r, len);
      size_t covered = 0, smallest = len, largest = 0;
      for (const ChunkRange& c : s.chunks()) {
        EXPECT_EQ(c.offset, covered);
        covered += c.size;
        smallest = std::min(smallest, c.size);
        largest = std::max(largest, c.size);
      }
      EXPECT_EQ(covered, len);
      EXPECT_LE(largest - std::min(smallest, largest), 1u);
      ASSERT_EQ(s.steps().size(), size_t(2 * (r - 1)));
      for (size_t k = 0; k < s.steps().size(); ++k) {
        const auto& step = s.steps()[k];
        ASSERT_EQ(step.size(), size_t(r));
        std::set<int> senders, receivers;
        for (const Transfer& t : step) {
          senders.insert(t.src);
          receivers.insert(t.dst);
          EXPECT_EQ(t.dst, (t.src + 1) % r) << "a ring passes to the next replica";
          EXPECT_EQ(t.reduce, k < size_t(r - 1)) << "reduce-scatter first, then all-gather";
          // The chunk a replica receives in this step is not the one it sends, so the transfers of a
          // step may run concurrently.
          for (const Transfer& u : step) {
            if (u.dst == t.src) {
              EXPECT_NE(u.chunk, t.chunk);
            }
          }
        }
        EXPECT_EQ(senders.size(), size_t(r));
        EXPECT_EQ(receivers.size(), size_t(r));
      }
    }
  }
}

std::vector<std::vector<float>> integer_buffers(int r, size_t len, std::mt19937& gen) {
  std::uniform_int_distribution<int> d(-1000, 1000);
  std::vector<std::vector<float>> bufs(size_t(r), std::vector<float>(len, 0.0f));
  for (auto& b : bufs)
    for (float& v : b) v = static_cast<float>(d(gen));
  return bufs;
}

TEST(RingAllreduce, ExactSumOnEveryReplica) {
  std::mt19937 gen(11);
  const std::vector<size_t> lengths = {1, 2, 3, 7, 8, 9, 1000, 1001, lenet::model::kNumParameters};
  for (int r = 1; r <= 8; ++r) {
    for (size_t len : lengths) {
      auto bufs = integer_buffers(r, len, gen);
      std::vector<float> expected(len, 0.0f);
      for (const auto& b : bufs)
        for (size_t i = 0; i < len; ++i) expected[i] += b[i];
      std::vector<float*> ptrs;
      for (auto& b : bufs) ptrs.push_back(b.data());
      ring_allreduce_host(RingSchedule(r, len), ptrs);
      for (int i = 0; i < r; ++i) ASSERT_EQ(bufs[size_t(i)], expected) << "R=" << r << " length=" << len << " replica=" << i;
    }
  }
}

TEST(RingAllreduce, TransfersOfAStepCommute) {
  // Running each step's transfers in reverse order must give the same bits: what the GPU executor,
  // which runs them concurrently, relies on.
  std::mt19937 gen(12);
  const int r = 5;
  const size_t len = 23;
  const RingSchedule s(r, len);
  auto a = integer_buffers(r, len, gen);
  auto b = a;
  std::vector<float*> pa, pb;
  for (int i = 0; i < r; ++i) pa.push_back(a[size_t(i)].data()), pb.push_back(b[size_t(i)].data());
  ring_allreduce_host(s, pa);
  for (const auto& step : s.steps())
    for (auto t = step.rbegin(); t != step.rend(); ++t) {
      const ChunkRange c = s.chunks()[size_t(t->chunk)];
      for (size_t i = 0; i < c.size; ++i) {
        const float v = pb[size_t(t->src)][c.offset + i];
        pb[size_t(t->dst)][c.offset + i] = t->reduce ? pb[size_t(t->dst)][c.offset + i] + v : v;
      }
    }
  EXPECT_EQ(a, b);
}

// The operations of the graph mode's captured step (enqueue_replica_step) and of its ring (enqueue_ring)
// on the model of streams and events: stream r is replica r's compute stream (0 the root stream), stream
// R the host; events 0..R-1 are the progress events, R..2R-1 the join events, 2R the fork event and
// 2R + 1 stands for the host's synchronisation with the root stream before it reads parameters. Steps
// run back to back as the eager warm-up step and the next work on the root stream do; replays need
// less (a graph launch is one operation on the root stream), so this is the stricter check. The model
// also runs the data: each backward pass writes the replica's own gradients (its initial buffer), the
// transfers go through receive buffers as on the GPU, and each update checks that it reads the full sum.
class StepModel {
 public:
  StepModel(const RingSchedule& s, std::vector<std::vector<float>> gradients)
      : order(size_t(s.replicas()) + 1, 2 * size_t(s.replicas()) + 2),
        updates(size_t(s.replicas()), 0),
        schedule_(s),
        r_(size_t(s.replicas())),
        gradients_(std::move(gradients)),
        buffers_(gradients_),
        sum_(s.length(), 0.0f),
        receive_(r_, std::vector<float>(s.chunks()[0].size, 0.0f)) {
    for (const auto& g : gradients_)
      for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += g[i];
  }

  // enqueue_replica_step's operations. The backward pass writes the replica's gradient buffer, which ring
  // neighbours read in the ring's last step; SGD writes the parameters that the next forward pass and
  // the host read.
  void record_fork() { order.record(0, fork()); }
  void wait_fork(size_t r) { order.wait(r, fork()); }
  void forward_backward(size_t r) {
    order.access(r, params(r), 0, 1, false);
    order.access(r, buffer(r), 0, schedule_.length(), true);
    buffers_[r] = gradients_[r];
  }
  void record_progress(size_t r) { record(int(r)); }
  void allreduce() { enqueue_ring(schedule_, *this); }
  void update(size_t r) {
    order.access(r, buffer(r), 0, schedule_.length(), false);
    EXPECT_EQ(buffers_[r], sum_) << "replica " << r << "'s update reads what the allreduce left";
    ++updates[r];
    order.access(r, params(r), 0, 1, true);
  }
  void record_joined(size_t r) { order.record(r, joined(r)); }
  void root_wait_joined(size_t r) { order.wait(0, joined(r)); }

  // After the last step the host waits for the root stream and reads every replica's parameters.
  void synchronize_and_read() {
    order.record(0, done());
    order.wait(r_, done());
    for (size_t r = 0; r < r_; ++r) order.access(r_, params(r), 0, 1, false);
  }

  // enqueue_ring's operations.
  void wait(int dst, int src) { order.wait(size_t(dst), size_t(src)); }
  void record(int r) { order.record(size_t(r), size_t(r)); }
  void transfer(const Transfer& t, const ChunkRange& c) {
    ASSERT_GT(c.size, 0u) << "enqueue_ring never transfers an empty chunk";
    const size_t d = size_t(t.dst), s = size_t(t.src);
    const float* in = buffers_[s].data() + c.offset;
    float* out = buffers_[d].data() + c.offset;
    order.access(d, buffer(s), c.offset, c.size, false);  // the copy, on the receiver's stream
    if (t.reduce) {
      ASSERT_LE(c.size, receive_[d].size());
      order.access(d, receive(d), 0, c.size, true);
      std::copy(in, in + c.size, receive_[d].begin());
      order.access(d, receive(d), 0, c.size, false);  // the add kernel
      order.access(d, buffer(d), c.offset, c.size, false);
      order.access(d, buffer(d), c.offset, c.size, true);
      for (size_t i = 0; i < c.size; ++i) out[i] += receive_[d][i];
    } else {
      order.access(d, buffer(d), c.offset, c.size, true);
      std::copy(in, in + c.size, out);
    }
  }

  lenet::test::StreamOrder order;
  std::vector<int> updates;  // per replica: an update that never runs leaves no access to race with

 private:
  static std::string buffer(size_t r) { return "gradients " + std::to_string(r); }
  static std::string receive(size_t r) { return "receive " + std::to_string(r); }
  static std::string params(size_t r) { return "parameters " + std::to_string(r); }
  size_t joined(size_t r) const { return r_ + r; }
  size_t fork() const { return 2 * r_; }
  size_t done() const { return 2 * r_ + 1; }

  const RingSchedule& schedule_;
  size_t r_;
  std::vector<std::vector<float>> gradients_, buffers_;
  std::vector<float> sum_;
  std::vector<std::vector<float>> receive_;
};

// Two steps and the host's read, so the hazards between one step's ring and the next step's backward
// pass, and between the last updates and the host, count too.
void two_steps(const RingSchedule& s, StepModel& model) {
  for (int step = 0; step < 2; ++step) enqueue_replica_step(size_t(s.replicas()), model);
  model.synchronize_and_read();
}

TEST(StepOnStreams, EveryConflictIsOrderedByEventsAndTheSumIsExact) {
  std::mt19937 gen(13);
  for (int r = 1; r <= 8; ++r) {
    for (size_t len : {size_t{1}, size_t{5}, size_t{29}}) {
      const RingSchedule s(r, len);
      StepModel model(s, integer_buffers(r, len, gen));
      two_steps(s, model);  // every update checks the sum it reads
      EXPECT_EQ(model.updates, std::vector<int>(size_t(r), 2)) << "R=" << r << ": every replica updates in both steps";
      const std::vector<std::string> races = model.order.races();
      EXPECT_TRUE(races.empty()) << "R=" << r << " length=" << len << ": " << races.size() << " races, first "
                                 << races.front();
    }
  }
}

TEST(StepOnStreams, TheModelSeesARaceWhenAnyWaitIsMissing) {
  // Without any one of the waits, of the rings, the joins, the second fork or the host's, two steps race:
  // the model can fail, and every wait is needed. (The first step's fork orders nothing here, as no work
  // precedes it on the root stream; on the GPU it is what brings replicas 1.. into the capture, which
  // the model does not represent.)
  for (int r = 2; r <= 8; ++r) {
    const RingSchedule s(r, 12);
    std::mt19937 gen(14);
    const auto bufs = integer_buffers(r, 12, gen);
    StepModel all(s, bufs);
    two_steps(s, all);
    ASSERT_TRUE(all.order.races().empty());
    // Per step R - 1 fork waits, 2(R - 1) ring steps of R waits and R - 1 join waits; the host's one.
    ASSERT_EQ(all.order.waits(), size_t(2 * ((r - 1) + 2 * (r - 1) * r + (r - 1)) + 1));
    for (size_t skip = size_t(r - 1); skip < all.order.waits(); ++skip) {
      StepModel model(s, bufs);
      model.order.drop_wait(skip);
      two_steps(s, model);
      EXPECT_FALSE(model.order.races().empty()) << "R=" << r << ": wait " << skip << " of " << all.order.waits()
                                                << " dropped";
    }
  }
}

TEST(RingAllreduce, RejectsWrongBufferCount) {
  std::vector<float> x(4), y(4), z(4);
  EXPECT_THROW(ring_allreduce_host(RingSchedule(2, 4), {x.data()}), std::invalid_argument);
  EXPECT_THROW(ring_allreduce_host(RingSchedule(2, 4), {x.data(), y.data(), z.data()}), std::invalid_argument);
}

// No replicas is an error, not a division by zero or an empty schedule.
TEST(RingAllreduce, RejectsFewerThanOneReplica) {
  for (const int replicas : {0, -1}) {
    EXPECT_THROW(split_rows(4, replicas), std::invalid_argument) << replicas;
    EXPECT_THROW(RingSchedule(replicas, 4), std::invalid_argument) << replicas;
  }
  EXPECT_THROW(split_rows(-1, 2), std::invalid_argument);
}

// The GPU pairs whose peer access a ring needs: every neighbour pair on two devices, the link from the
// last replica back to the first included, each pair once whichever way round the ring crosses it.
TEST(RingLinks, EveryNeighbourPairOnTwoDevicesOnce) {
  using Links = std::vector<std::pair<int, int>>;
  EXPECT_EQ(ring_links_between_devices({}), Links{});
  EXPECT_EQ(ring_links_between_devices({0}), Links{});
  EXPECT_EQ(ring_links_between_devices({0, 0, 0}), Links{});
  EXPECT_EQ(ring_links_between_devices({0, 1}), (Links{{0, 1}}));
  EXPECT_EQ(ring_links_between_devices({0, 1, 0}), (Links{{0, 1}}));
  EXPECT_EQ(ring_links_between_devices({0, 1, 2}), (Links{{0, 1}, {1, 2}, {0, 2}}));
  // Round-robin placement of 8 members on 8 GPUs, as lenet-bench's allreduce sweep places them.
  EXPECT_EQ(ring_links_between_devices({0, 1, 2, 3, 4, 5, 6, 7}),
            (Links{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {0, 7}}));
  // Three members on two GPUs, a mix of same-device and cross-device links; and 4 on 3 GPUs.
  EXPECT_EQ(ring_links_between_devices({0, 0, 1}), (Links{{0, 1}}));
  EXPECT_EQ(ring_links_between_devices({0, 1, 2, 0}), (Links{{0, 1}, {1, 2}, {0, 2}}));
  EXPECT_EQ(ring_links_between_devices({2, 0, 2, 0}), (Links{{0, 2}}));
}

}  // namespace
