// The CPU backend: R replicas in host memory, each with its own copy of the parameters; gradients
// summed with the ring schedule, as the CUDA graph mode does across GPUs. Each replica's rows are cut
// into chunks of kCpuChunkRows that run in parallel on all cores (OpenMP), each into its own gradient
// buffer; a replica's chunk gradients are then added in chunk order. So the result does not depend on
// the number of threads, and a chunk's working set (about 10 MB) stays in cache where a whole 256-row
// minibatch's im2col buffers (about 50 MB) would not. Large minibatches run in waves of chunks, their
// buffers reused, so memory does not grow with the batch (the sums, in chunk order, are the same).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.hpp"
#include "engine/ring.hpp"
#include "model/step_tracker.hpp"

namespace lenet::engine {

constexpr int kCpuChunkRows = 16;
// Chunks in flight at once (more when there are more threads): 64 gradient buffers, 33 MB.
constexpr size_t kCpuChunksPerWave = 64;
// Whether this build runs the chunks on several threads (OpenMP found); without it, on one.
bool cpu_backend_is_parallel();
// Calls fn(i, thread) for every i in [0, n), on `threads` threads (thread in [0, threads)); the first
// exception a call throws is rethrown here once every call has ended (none may leave an OpenMP region).
void parallel_for(int n, int threads, const std::function<void(int, int)>& fn);

class CpuBackend final : public Backend {
 public:
  // threads: how many run the chunks; 0 is OpenMP's default (OMP_NUM_THREADS, else every core).
  CpuBackend(int replicas, const std::vector<float>& initial_parameters, int threads = 0);

  std::string name() const override { return "cpu"; }
  std::string mode() const override { return "cpu"; }
  std::vector<std::string> devices() const override;
  void train_step(const io::Split& data, const uint32_t* idx, int rows, float lr) override;
  TrainStats take_train_stats() override;
  bool diverged_without_waiting() const override { return tracker_.first_bad_plus_one != 0; }
  // On replica 0, as the source text evaluates on its first device.
  int64_t count_correct(const io::Split& data, int batch_size) override;
  std::vector<float> parameters(int replica) const override;
  // The threads a step runs its chunks on: `threads` when given and the build is parallel.
  int threads() const { return static_cast<int>(workers_.size()); }
  // In each metrics record: the epoch's seconds depend on it.
  std::vector<std::pair<std::string, double>> counters() const override { return {{"cpu_threads", threads()}}; }

 private:
  struct Replica {
    std::vector<float> params, grads;
  };
  struct Chunk {
    int replica, first, rows;  // rows [first, first + rows) of the minibatch
  };
  // What one thread needs to run a chunk.
  struct Worker {
    model::CpuLenet<float> net;
    std::vector<float> x;
    std::vector<int32_t> labels;
  };
  std::vector<Replica> replicas_;
  std::vector<Worker> workers_;                  // one per thread
  std::vector<std::vector<float>> chunk_grads_;  // one per chunk of a wave
  RingSchedule ring_;
  model::StepStats stats_;
  model::StepTracker tracker_;  // since the last take_train_stats()
};

}  // namespace lenet::engine
