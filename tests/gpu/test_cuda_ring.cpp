// The ring allreduce alone on a GPU: R = 1..8 replicas sharing GPU 0 (one stream each), buffer lengths
// from 1 to the model's 129,068 including lengths not divisible by R and smaller than R, integer-valued
// inputs so the result must equal the exact sum bit for bit; run eagerly and captured into a graph. The
// naive mode's textbook allreduce too, tensor by tensor as that mode calls it.
#include <algorithm>
#include <random>

#include "engine/cuda_ring.hpp"
#include "gpu_test.hpp"
#include "graphs/cuda_graph.hpp"
#include "model/cuda_memory.hpp"
#include "model/lenet.hpp"

namespace {

using namespace lenet;

struct RingFixture {
  std::vector<cuda::Stream> streams;
  std::vector<cuda::Event> events;
  std::vector<cuda::DeviceBuffer<float>> buffers, receives;
  std::vector<std::vector<float>> inputs;
  std::vector<float> expected;
  std::vector<engine::RingMember> members;

  // receive_len: what each member's receive buffer holds at least (the ring needs a chunk).
  RingFixture(int r, size_t len, std::mt19937& gen, size_t receive_len = 0) : expected(len, 0.0f) {
    std::uniform_int_distribution<int> d(-1000, 1000);
    for (int i = 0; i < r; ++i) {
      streams.emplace_back(0);
      events.emplace_back(0);
      buffers.emplace_back(0, len);
      receives.emplace_back(0, std::max(len / size_t(r) + 1, receive_len));
      std::vector<float> in(len);
      for (size_t k = 0; k < len; ++k) {
        in[k] = float(d(gen));
        expected[k] += in[k];
      }
      buffers.back().upload(in.data(), len);
      inputs.push_back(std::move(in));
    }
    LENET_CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < r; ++i)
      members.push_back({0, buffers[size_t(i)].get(), receives[size_t(i)].get(), streams[size_t(i)].get(),
                         events[size_t(i)].get()});
  }
  void check(int r, size_t len, const char* how) {
    LENET_CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < r; ++i) ASSERT_EQ(buffers[size_t(i)].download(), expected) << how << " R=" << r << " length=" << len << " replica " << i;
  }
};

const std::vector<size_t> kLengths = {1, 2, 3, 5, 7, 8, 9, 100, 1001, model::kNumParameters};

TEST(CudaRing, EagerGivesTheExactSum) {
  LENET_REQUIRE_GPU();
  std::mt19937 gen(31);
  for (int r = 1; r <= 8; ++r)
    for (size_t len : kLengths) {
      RingFixture f(r, len, gen);
      for (int i = 0; i < r; ++i) f.events[size_t(i)].record(f.streams[size_t(i)].get());
      engine::enqueue_ring_allreduce(engine::RingSchedule(r, len), f.members);
      f.check(r, len, "eager");
    }
}

TEST(CudaRing, CapturedAndReplayedGivesTheExactSum) {
  LENET_REQUIRE_GPU();
  std::mt19937 gen(32);
  for (int r = 1; r <= 8; ++r)
    for (size_t len : {size_t(3), size_t(1001), model::kNumParameters}) {
      RingFixture f(r, len, gen);
      cuda::Event fork(0), join(0);
      cuda::GraphExec exec;
      {
        cuda::Capture capture(f.streams[0]);
        fork.record(f.streams[0].get());
        for (int i = 1; i < r; ++i) fork.wait_on(f.streams[size_t(i)].get());
        for (int i = 0; i < r; ++i) f.events[size_t(i)].record(f.streams[size_t(i)].get());
        engine::enqueue_ring_allreduce(engine::RingSchedule(r, len), f.members);
        std::vector<cuda::Event> joins;
        for (int i = 1; i < r; ++i) {
          joins.emplace_back(0);
          joins.back().record(f.streams[size_t(i)].get());
          joins.back().wait_on(f.streams[0].get());
        }
        exec = capture.finish();
      }
      exec.launch(f.streams[0].get());
      f.check(r, len, "captured");
      // A second replay on reset inputs gives the same exact sum: the graph holds no stale state.
      for (int i = 0; i < r; ++i) f.buffers[size_t(i)].upload(f.inputs[size_t(i)].data(), len);
      LENET_CUDA_CHECK(cudaDeviceSynchronize());
      exec.launch(f.streams[0].get());
      f.check(r, len, "replayed");
    }
}

// As the naive mode calls it: one tensor at a time, member 0's receive buffer holding the largest
// tensor. Then the whole of a buffer whose length is no tensor's, as lenet-bench's sweep calls it.
TEST(CudaRing, TextbookGivesTheExactSum) {
  LENET_REQUIRE_GPU();
  std::mt19937 gen(33);
  size_t largest = 0;
  for (const model::TensorSpec& t : model::tensor_specs()) largest = std::max(largest, t.size);
  for (int r = 1; r <= 8; ++r) {
    RingFixture f(r, model::kNumParameters, gen, largest);
    for (const model::TensorSpec& t : model::tensor_specs()) engine::textbook_allreduce(f.members, t.offset, t.size);
    f.check(r, model::kNumParameters, "textbook, tensor by tensor");
    RingFixture whole(r, 1001, gen, 1001);
    engine::textbook_allreduce(whole.members, 0, 1001);
    whole.check(r, 1001, "textbook, whole buffer");
  }
}

}  // namespace
