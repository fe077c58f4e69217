#include "engine/cuda_naive_backend.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/cuda_ring.hpp"
#include "engine/ring.hpp"
#include "model/lenet.hpp"
#include "model/cuda_kernels.hpp"
#include "profiling/nvtx.hpp"

namespace lenet::engine {

using cuda::DeviceGuard;

CudaNaiveBackend::CudaNaiveBackend(const CudaPlacement& placement, const std::vector<float>& initial_parameters) {
  const int n_gpus = placement.num_gpus, n_rep = placement.replicas;
  if (n_gpus < 1 || n_rep < 1) throw std::invalid_argument("CudaNaiveBackend: no GPU or no replica");
  if (initial_parameters.size() != model::kNumParameters) throw std::invalid_argument("CudaNaiveBackend: parameters");
  if (placement.train_batch_rows.empty()) throw std::invalid_argument("CudaNaiveBackend: no minibatch size");
  for (int g = 0; g < n_gpus; ++g) contexts_.push_back(std::make_unique<cuda::DeviceContext>(g));
  for (int i = 0; i < n_gpus; ++i)
    for (int j = 0; j < n_gpus; ++j) enable_peer_access(i, j);  // where it cannot, copies go through the host

  const int largest_eval = placement.eval_batch_rows.empty()
                               ? 0
                               : *std::max_element(placement.eval_batch_rows.begin(), placement.eval_batch_rows.end());
  for (int r = 0; r < n_rep; ++r) {
    std::vector<int> rows;
    for (int b : placement.train_batch_rows) rows.push_back(split_rows(b, n_rep)[static_cast<size_t>(r)].rows);
    int capacity = std::max(1, largest_share(placement.train_batch_rows, n_rep, r));
    if (r == 0) {  // evaluation runs on replica 0, as in the source text
      rows.insert(rows.end(), placement.eval_batch_rows.begin(), placement.eval_batch_rows.end());
      capacity = std::max(capacity, largest_eval);
    }
    cuda::DeviceContext& ctx = *contexts_[static_cast<size_t>(placement.device(r))];
    replicas_.push_back(std::make_unique<cuda::CudaLenet>(ctx, capacity, rows));
    DeviceGuard guard(replicas_.back()->device());
    LENET_CUDA_CHECK(cudaMemcpy(replicas_.back()->params(), initial_parameters.data(),
                                model::kNumParameters * sizeof(float), cudaMemcpyHostToDevice));
  }
  size_t largest_tensor = 0;
  for (const model::TensorSpec& t : model::tensor_specs()) largest_tensor = std::max(largest_tensor, t.size);
  receive_ = cuda::DeviceBuffer<float>(replicas_[0]->device(), largest_tensor);
  synchronize();
}

CudaNaiveBackend::~CudaNaiveBackend() = default;

std::vector<std::string> CudaNaiveBackend::devices() const {
  std::vector<std::string> out;
  for (const auto& r : replicas_) out.push_back("cuda:" + std::to_string(r->device()));
  return out;
}

std::vector<std::string> CudaNaiveBackend::algorithm_report() const {
  std::vector<std::string> out;
  for (size_t r = 0; r < replicas_.size(); ++r) out.push_back(describe_replica(r, *replicas_[r]));
  return out;
}

void CudaNaiveBackend::copy_rows_to(int replica, const io::Split& data, const uint32_t* idx, int rows) {
  if (rows == 0) return;
  cuda::CudaLenet& rep = *replicas_[static_cast<size_t>(replica)];
  if (rows > rep.max_rows())  // the copy would write past the input buffers, before forward's own check
    throw std::invalid_argument("CudaNaiveBackend: replica " + std::to_string(replica) + " takes at most " +
                                std::to_string(rep.max_rows()) + " rows, not " + std::to_string(rows));
  host_x_.resize(static_cast<size_t>(rows) * model::kInPixels);
  host_labels_.resize(static_cast<size_t>(rows));
  data.gather(idx, static_cast<size_t>(rows), host_x_.data(), host_labels_.data());
  DeviceGuard guard(rep.device());
  LENET_CUDA_CHECK(cudaMemcpy(rep.x(), host_x_.data(), host_x_.size() * sizeof(float), cudaMemcpyHostToDevice));
  LENET_CUDA_CHECK(cudaMemcpy(rep.labels(), host_labels_.data(), host_labels_.size() * sizeof(int32_t),
                              cudaMemcpyHostToDevice));
}

// The source text's allreduce, for each parameter tensor in turn: every other replica's gradient is
// copied to replica 0 and added there, then the sum is copied back to every replica.
void CudaNaiveBackend::allreduce_textbook() {
  std::vector<RingMember> members;
  for (auto& rep : replicas_) members.push_back({rep->device(), rep->grads(), receive_.get(), nullptr, nullptr});
  for (const model::TensorSpec& t : model::tensor_specs()) textbook_allreduce(members, t.offset, t.size);
}

void CudaNaiveBackend::train_step(const io::Split& data, const uint32_t* idx, int rows, float lr) {
  const std::vector<RowRange> split = split_rows(rows, static_cast<int>(replicas_.size()));
  {
    profiling::Range range("h2d");
    for (size_t r = 0; r < replicas_.size(); ++r) copy_rows_to(static_cast<int>(r), data, idx + split[r].first, split[r].rows);
  }
  {
    profiling::Range range("forward");
    for (size_t r = 0; r < replicas_.size(); ++r) {
      replicas_[r]->forward(split[r].rows);
      replicas_[r]->loss(split[r].rows);
    }
  }
  {
    profiling::Range range("backward");
    for (size_t r = 0; r < replicas_.size(); ++r) replicas_[r]->backward(split[r].rows);
  }
  if (replicas_.size() > 1) {
    profiling::Range range("allreduce");
    allreduce_textbook();
  }
  {
    profiling::Range range("update");
    const float scale = model::sgd_scale(lr, rows);
    for (auto& rep : replicas_) {
      DeviceGuard guard(rep->device());
      cuda::launch_sgd_update(rep->params(), rep->grads(), model::kNumParameters, scale, nullptr);
    }
  }
  synchronize();  // torch.cuda.synchronize() after every minibatch, as in the source text
}

void CudaNaiveBackend::synchronize() {
  for (const auto& ctx : contexts_) {
    DeviceGuard guard(ctx->device());
    LENET_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

TrainStats CudaNaiveBackend::take_train_stats() {
  std::vector<cuda::CudaLenet*> nets;
  for (auto& rep : replicas_) nets.push_back(rep.get());
  return engine::take_train_stats(nets);
}

int64_t CudaNaiveBackend::count_correct(const io::Split& data, int batch_size) {
  cuda::CudaLenet& rep = *replicas_[0];
  std::vector<uint32_t> idx(std::min(static_cast<size_t>(batch_size), data.size()));
  for (const ChunkRange& b : batches(data.size(), static_cast<size_t>(batch_size))) {
    const int rows = static_cast<int>(b.size);
    std::iota(idx.begin(), idx.begin() + rows, static_cast<uint32_t>(b.offset));
    copy_rows_to(0, data, idx.data(), rows);
    rep.forward(rows);
    rep.loss(rows, cuda::CudaLenet::kEvalStats);
  }
  const int64_t correct = rep.read_stats(cuda::CudaLenet::kEvalStats).correct;
  rep.zero_stats(cuda::CudaLenet::kEvalStats);
  return correct;
}

std::vector<float> CudaNaiveBackend::parameters(int replica) const {
  return replicas_.at(static_cast<size_t>(replica))->param_buffer().download();
}

std::vector<float> CudaNaiveBackend::gradients(int replica) const {
  return replicas_.at(static_cast<size_t>(replica))->grad_buffer().download();
}

}  // namespace lenet::engine
