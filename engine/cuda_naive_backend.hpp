// The CUDA naive mode: the source text's algorithm, faithfully. Replicas run one after the other, each
// as separate cuDNN/cuBLAS calls and kernels on its device's default stream; rows are copied to each
// replica synchronously; gradients are summed tensor by tensor into replica 0 and copied back; every
// device is synchronised after every minibatch; evaluation runs on replica 0 only.
#pragma once
#include <memory>
#include <vector>

#include "engine/backend.hpp"
#include "engine/ring.hpp"
#include "model/cuda_lenet.hpp"

namespace lenet::engine {

class CudaNaiveBackend final : public Backend {
 public:
  CudaNaiveBackend(const CudaPlacement& placement, const std::vector<float>& initial_parameters);
  ~CudaNaiveBackend() override;

  std::string name() const override { return "cuda"; }
  std::string mode() const override { return "naive"; }
  std::vector<std::string> devices() const override;
  void train_step(const io::Split& data, const uint32_t* idx, int rows, float lr) override;
  TrainStats take_train_stats() override;
  void synchronize() override;
  int64_t count_correct(const io::Split& data, int batch_size) override;
  std::vector<float> parameters(int replica) const override;
  std::vector<float> gradients(int replica) const;
  // The cuDNN algorithms each replica chose, one line per replica.
  std::vector<std::string> algorithm_report() const;

 private:
  void copy_rows_to(int replica, const io::Split& data, const uint32_t* idx, int rows);
  void allreduce_textbook();

  std::vector<std::unique_ptr<cuda::DeviceContext>> contexts_;  // one per GPU
  std::vector<std::unique_ptr<cuda::CudaLenet>> replicas_;
  cuda::DeviceBuffer<float> receive_;  // on replica 0's device: one tensor of another replica's gradient
  std::vector<float> host_x_;
  std::vector<int32_t> host_labels_;
};

}  // namespace lenet::engine
