// The CPU backend: R replicas in host memory, each with its own copy of the parameters, run one after
// the other; gradients summed with the ring schedule, as the CUDA graph mode does across GPUs.
#pragma once
#include <vector>

#include "engine/backend.hpp"
#include "engine/ring.hpp"

namespace lenet::engine {

class CpuBackend final : public Backend {
 public:
  CpuBackend(int replicas, const std::vector<float>& initial_parameters);

  std::string name() const override { return "cpu"; }
  std::string mode() const override { return "cpu"; }
  std::vector<std::string> devices() const override;
  void train_step(const io::Split& data, const uint32_t* idx, int rows, float lr) override;
  model::StepStats take_train_stats() override;
  int64_t first_nonfinite_step() const override { return first_nonfinite_; }
  // On replica 0, as the source text evaluates on its first device.
  int64_t count_correct(const io::Split& data, int batch_size) override;
  std::vector<float> parameters(int replica) const override;

 private:
  struct Replica {
    std::vector<float> params, grads, x;
    std::vector<int32_t> labels;
    model::CpuLenet<float> net;
  };
  std::vector<Replica> replicas_;
  RingSchedule ring_;
  model::StepStats stats_;
  int64_t steps_ = 0;  // since the last take_train_stats()
  int64_t first_nonfinite_ = -1;
};

}  // namespace lenet::engine
