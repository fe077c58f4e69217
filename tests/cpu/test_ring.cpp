// The minibatch split and the ring allreduce schedule, executed on host buffers, and the order of waits,
// copies and event records the graph mode enqueues it in, on a model of streams and events. Inputs are
// small integers stored in floats, so every partial sum is exact and the result must equal the exact sum
// bit for bit, in whatever order the schedule adds.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/ring.hpp"
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

// The queue enqueue_ring drives, on the model of streams and events (stream r is replica r's; events
// 0..R-1 the progress events, R..2R-1 the join events, 2R the fork event), also running the transfers on
// host buffers in the order they were enqueued, through receive buffers as the GPU does.
class RingModel {
 public:
  RingModel(const RingSchedule& s, std::vector<std::vector<float>> buffers)
      : order(size_t(s.replicas()), 2 * size_t(s.replicas()) + 1),
        schedule_(s),
        r_(size_t(s.replicas())),
        buffers_(std::move(buffers)),
        receive_(r_, std::vector<float>(s.chunks()[0].size, 0.0f)) {}

  // The rest of the graph mode's step (enqueue_step in engine/cuda_graph_backend.cu) around the ring:
  // each replica's backward pass writes its whole buffer and records its progress event; after the ring
  // its SGD update reads the buffer; the join (replicas 1.. record an event the root stream waits for)
  // ends the step, and the next step's fork (the root records an event replicas 1.. wait for) comes
  // before the next backward pass, which writes the buffers ring neighbours read in the last ring step.
  void backward() {
    for (size_t r = 0; r < r_; ++r) {
      order.access(r, buffer(r), 0, schedule_.length(), true);
      record(int(r));
    }
  }
  void update_join_fork() {
    for (size_t r = 0; r < r_; ++r) order.access(r, buffer(r), 0, schedule_.length(), false);
    for (size_t r = 1; r < r_; ++r) {
      order.record(r, joined(r));
      order.wait(0, joined(r));
    }
    order.record(0, fork());
    for (size_t r = 1; r < r_; ++r) order.wait(r, fork());
  }

  void wait(int dst, int src) { order.wait(size_t(dst), size_t(src)); }
  void record(int r) { order.record(size_t(r), size_t(r)); }
  void transfer(const Transfer& t, const ChunkRange& c) {
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

  const std::vector<std::vector<float>>& buffers() const { return buffers_; }
  lenet::test::StreamOrder order;

 private:
  static std::string buffer(size_t r) { return "buffer " + std::to_string(r); }
  static std::string receive(size_t r) { return "receive " + std::to_string(r); }
  size_t joined(size_t r) const { return r_ + r; }
  size_t fork() const { return 2 * r_; }

  const RingSchedule& schedule_;
  size_t r_;
  std::vector<std::vector<float>> buffers_, receive_;
};

// A step and the next one's backward pass and ring, so the hazards between the ring's last step and the
// next backward pass count too.
void two_steps(const RingSchedule& s, RingModel& model) {
  model.backward();
  enqueue_ring(s, model);
  model.update_join_fork();
  model.backward();
  enqueue_ring(s, model);
}

TEST(RingOnStreams, EveryConflictIsOrderedByEventsAndTheSumIsExact) {
  std::mt19937 gen(13);
  for (int r = 1; r <= 8; ++r) {
    for (size_t len : {size_t{1}, size_t{5}, size_t{29}}) {
      const RingSchedule s(r, len);
      const auto bufs = integer_buffers(r, len, gen);
      std::vector<float> expected(len, 0.0f);
      for (const auto& b : bufs)
        for (size_t i = 0; i < len; ++i) expected[i] += b[i];
      RingModel model(s, bufs);
      model.backward();
      enqueue_ring(s, model);
      for (int i = 0; i < r; ++i) EXPECT_EQ(model.buffers()[size_t(i)], expected) << "R=" << r << " replica " << i;
      model.update_join_fork();
      model.backward();
      enqueue_ring(s, model);
      const std::vector<std::string> races = model.order.races();
      EXPECT_TRUE(races.empty()) << "R=" << r << " length=" << len << ": " << races.size() << " races, first "
                                 << races.front();
    }
  }
}

TEST(RingOnStreams, TheModelSeesARaceWhenAnyWaitIsMissing) {
  // Without any one of its waits, of the ring or of the join and fork, two steps race: the model can
  // fail, and every wait is needed.
  for (int r = 2; r <= 8; ++r) {
    const RingSchedule s(r, 12);
    std::mt19937 gen(14);
    const auto bufs = integer_buffers(r, 12, gen);
    RingModel all(s, bufs);
    two_steps(s, all);
    ASSERT_TRUE(all.order.races().empty());
    // Two rings of 2(R - 1) steps with R waits each, and R - 1 join and R - 1 fork waits between them.
    ASSERT_EQ(all.order.waits(), size_t(4 * (r - 1) * r + 2 * (r - 1)));
    for (size_t skip = 0; skip < all.order.waits(); ++skip) {
      RingModel model(s, bufs);
      model.order.drop_wait(skip);
      two_steps(s, model);
      EXPECT_FALSE(model.order.races().empty()) << "R=" << r << ": wait " << skip << " of " << all.order.waits()
                                                << " dropped";
    }
  }
}

TEST(RingAllreduce, RejectsWrongBufferCount) {
  std::vector<float> x(4);
  EXPECT_THROW(ring_allreduce_host(RingSchedule(2, 4), {x.data()}), std::invalid_argument);
}

}  // namespace
