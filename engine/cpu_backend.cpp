#include "engine/cpu_backend.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "profiling/nvtx.hpp"

namespace lenet::engine {

CpuBackend::CpuBackend(int replicas, const std::vector<float>& initial_parameters)
    : replicas_(static_cast<size_t>(replicas)), ring_(replicas, model::kNumParameters) {
  if (initial_parameters.size() != model::kNumParameters) {
    throw std::invalid_argument("CpuBackend: " + std::to_string(initial_parameters.size()) + " parameters, expected " +
                                std::to_string(model::kNumParameters));
  }
  for (Replica& r : replicas_) {
    r.params = initial_parameters;
    r.grads.assign(model::kNumParameters, 0.0f);
  }
}

std::vector<std::string> CpuBackend::devices() const { return std::vector<std::string>(replicas_.size(), "cpu"); }

void CpuBackend::train_step(const io::Split& data, const uint32_t* idx, int rows, float lr) {
  const std::vector<RowRange> split = split_rows(rows, static_cast<int>(replicas_.size()));
  const double loss_before = stats_.loss_sum;
  {
    profiling::Range range("forward_backward");
    for (size_t r = 0; r < replicas_.size(); ++r) {
      Replica& rep = replicas_[r];
      const RowRange part = split[r];
      rep.x.resize(static_cast<size_t>(part.rows) * model::kInPixels);
      rep.labels.resize(static_cast<size_t>(part.rows));
      data.gather(idx + part.first, static_cast<size_t>(part.rows), rep.x.data(), rep.labels.data());
      const model::StepStats st =
          rep.net.forward_backward(rep.params.data(), rep.x.data(), rep.labels.data(), part.rows, rep.grads.data());
      stats_.loss_sum += st.loss_sum;
      stats_.correct += st.correct;
    }
  }
  if (first_nonfinite_ < 0 && std::isfinite(loss_before) && !std::isfinite(stats_.loss_sum)) first_nonfinite_ = steps_;
  ++steps_;
  {
    profiling::Range range("allreduce");
    std::vector<float*> grads;
    for (Replica& rep : replicas_) grads.push_back(rep.grads.data());
    ring_allreduce_host(ring_, grads);
  }
  {
    profiling::Range range("update");
    const float scale = lr / static_cast<float>(rows);
    for (Replica& rep : replicas_) model::sgd_update(rep.params.data(), rep.grads.data(), model::kNumParameters, scale);
  }
}

model::StepStats CpuBackend::take_train_stats() {
  steps_ = 0;
  first_nonfinite_ = -1;
  return std::exchange(stats_, model::StepStats{});
}

int64_t CpuBackend::count_correct(const io::Split& data, int batch_size) {
  Replica& rep = replicas_.front();
  int64_t correct = 0;
  for (size_t first = 0; first < data.size(); first += static_cast<size_t>(batch_size)) {
    const size_t rows = std::min(static_cast<size_t>(batch_size), data.size() - first);
    rep.x.resize(rows * model::kInPixels);
    rep.labels.resize(rows);
    data.slice(first, rows, rep.x.data(), rep.labels.data());
    correct += rep.net.forward(rep.params.data(), rep.x.data(), rep.labels.data(), static_cast<int>(rows)).correct;
  }
  return correct;
}

std::vector<float> CpuBackend::parameters(int replica) const {
  return replicas_.at(static_cast<size_t>(replica)).params;
}

}  // namespace lenet::engine
