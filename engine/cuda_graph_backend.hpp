// The CUDA graph mode: the same mathematics as the naive mode with the launch and synchronisation
// overhead taken out. Each replica has its own library handles, a compute stream and a copy stream.
// One step of all replicas (forward, masked loss, backward, the ring allreduce with peer copies, SGD)
// is captured once per staging slot into a multi-device graph and only replayed; minibatches go from
// pinned, double-buffered host staging to the devices on the copy streams while the previous step
// computes; events order everything, and the host waits only before refilling a staging slot.
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "engine/backend.hpp"
#include "engine/ring.hpp"
#include "engine/staging.hpp"
#include "graphs/cuda_graph.hpp"
#include "model/cuda_lenet.hpp"

namespace lenet::engine {

class CudaGraphBackend final : public Backend {
 public:
  static constexpr int kSlots = 2;

  CudaGraphBackend(const CudaPlacement& placement, const std::vector<float>& initial_parameters);
  ~CudaGraphBackend() override;

  std::string name() const override { return "cuda"; }
  std::string mode() const override { return "graph"; }
  std::vector<std::string> devices() const override;
  void train_step(const io::Split& data, const uint32_t* idx, int rows, float lr) override;
  TrainStats take_train_stats() override;
  void synchronize() override;
  // On all replicas in parallel, each on its share of the examples, kept on the device after the first
  // call, in batches of the replica's captured row count rather than batch_size (no other cuDNN set-up).
  int64_t count_correct(const io::Split& data, int batch_size) override;
  std::vector<float> parameters(int replica) const override;
  std::vector<std::pair<std::string, double>> counters() const override;
  std::vector<std::string> algorithm_report() const;

 private:
  struct Replica;
  void build(const CudaPlacement& placement, const std::vector<float>& initial_parameters);
  void drain() noexcept;        // waits for every replica's streams, ignoring errors
  void enqueue_step(int slot);  // eagerly, or into a capture
  void prepare_evaluation(const io::Split& data);

  std::vector<std::unique_ptr<Replica>> replicas_;
  RingSchedule ring_;
  StagingSlots staging_{kSlots};
  std::array<cuda::GraphExec, kSlots> step_graphs_;
  std::array<cuda::Event, kSlots> step_done_;  // on replica 0's device, after each replay
  cuda::Event fork_;                           // on replica 0's device
  uint64_t step_ = 0;
  // The examples on the devices for evaluation, as compared with the next split to evaluate: by content,
  // since another split can take the freed place of one (same addresses and size) and a split can change.
  std::optional<io::Split> eval_data_;
};

}  // namespace lenet::engine
