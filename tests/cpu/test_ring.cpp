// The minibatch split and the ring allreduce schedule, executed on host buffers. Inputs are small
// integers stored in floats, so every partial sum is exact and the result must equal the exact sum bit
// for bit, in whatever order the schedule adds.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "engine/ring.hpp"
#include "model/lenet.hpp"

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

TEST(RingAllreduce, RejectsWrongBufferCount) {
  std::vector<float> x(4);
  EXPECT_THROW(ring_allreduce_host(RingSchedule(2, 4), {x.data()}), std::invalid_argument);
}

}  // namespace
