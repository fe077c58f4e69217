#include "engine/cuda_graph_backend.hpp"

#include <thrust/execution_policy.h>
#include <thrust/reduce.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/cuda_ring.hpp"
#include "engine/lent_block.hpp"
#include "io/pinned.hpp"
#include "model/cuda_kernels.hpp"
#include "model/cuda_lenet.hpp"
#include "profiling/nvtx.hpp"

namespace lenet::engine {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceGuard;
using cuda::Event;
using cuda::Stream;

// Thrust's temporary storage, allocated once per replica and lent through engine/lent_block.hpp: the
// evaluation's reduction (one temporary array per thrust::reduce) then allocates nothing.
class PreallocatedTemp {
 public:
  using value_type = char;
  explicit PreallocatedTemp(LentBlock& block) : block_(&block) {}
  char* allocate(std::ptrdiff_t bytes) { return block_->lend(static_cast<size_t>(bytes)); }
  void deallocate(char*, size_t) noexcept { block_->give_back(); }

 private:
  LentBlock* block_;
};

constexpr size_t kThrustTempBytes = size_t{1} << 20;

// The address of a field of a struct in device memory, without forming a reference to device memory
// on the host.
template <typename Field>
const Field* device_field(const StepParams* base, size_t offset) {
  return reinterpret_cast<const Field*>(reinterpret_cast<const char*>(base) + offset);
}

}  // namespace

struct CudaGraphBackend::Replica {
  int device = 0;
  int capacity = 0;  // rows of the captured step: the replica's largest share of any minibatch
  Stream compute, copy;  // declared first, destroyed last: the handles below are bound to `compute`
  std::unique_ptr<cuda::DeviceContext> ctx;  // own handles and workspaces: replicas sharing a GPU run concurrently
  std::unique_ptr<cuda::CudaLenet> net;
  Event progress, joined;
  std::array<Event, kSlots> copied;  // on the copy stream, after a slot's host-to-device copies
  std::array<DeviceBuffer<float>, kSlots> x;
  std::array<DeviceBuffer<int32_t>, kSlots> labels;
  std::array<DeviceBuffer<StepParams>, kSlots> params;
  std::array<io::PinnedBuffer<float>, kSlots> host_x;
  std::array<io::PinnedBuffer<int32_t>, kSlots> host_labels;
  std::array<io::PinnedBuffer<StepParams>, kSlots> host_params;
  DeviceBuffer<float> receive;  // the ring's incoming chunk
  // Evaluation: this replica's share of the test set, resident on the device, padded to whole batches.
  DeviceBuffer<float> test_x;
  DeviceBuffer<int32_t> test_labels, test_correct;
  size_t test_rows = 0;
  DeviceBuffer<char> thrust_temp;
};

CudaGraphBackend::CudaGraphBackend(const CudaPlacement& placement, const std::vector<float>& initial_parameters)
    : ring_(placement.replicas, model::kNumParameters) {
  if (placement.num_gpus < 1 || placement.replicas < 1)
    throw std::invalid_argument("CudaGraphBackend: no GPU or no replica");
  if (initial_parameters.size() != model::kNumParameters) throw std::invalid_argument("CudaGraphBackend: parameters");
  if (placement.train_batch_rows.empty()) throw std::invalid_argument("CudaGraphBackend: no minibatch size");
  try {
    build(placement, initial_parameters);
  } catch (...) {
    // No destructor runs for a constructor that throws: the warm-up step or a replica's part of it may
    // still be queued when the members are freed.
    drain();
    throw;
  }
}

void CudaGraphBackend::build(const CudaPlacement& placement, const std::vector<float>& initial_parameters) {
  const int n_rep = placement.replicas;
  size_t largest_chunk = 0;
  for (const ChunkRange& c : ring_.chunks()) largest_chunk = std::max(largest_chunk, c.size);

  for (int r = 0; r < n_rep; ++r) {
    auto rep = std::make_unique<Replica>();
    rep->device = placement.device(r);
    rep->capacity = std::max(1, largest_share(placement.train_batch_rows, n_rep, r));
    const int dev = rep->device;
    const size_t cap = static_cast<size_t>(rep->capacity);
    rep->compute = Stream(dev);
    rep->copy = Stream(dev);
    rep->ctx = std::make_unique<cuda::DeviceContext>(dev);
    // The captured step always runs `capacity` rows (fewer are masked), so one row count is all cuDNN sees.
    rep->net = std::make_unique<cuda::CudaLenet>(*rep->ctx, rep->capacity, std::vector<int>{rep->capacity});
    rep->progress = Event(dev);
    rep->joined = Event(dev);
    DeviceGuard guard(dev);
    for (int s = 0; s < kSlots; ++s) {
      rep->copied[static_cast<size_t>(s)] = Event(dev);
      rep->x[s] = DeviceBuffer<float>(dev, cap * model::kInPixels);
      rep->labels[s] = DeviceBuffer<int32_t>(dev, cap);
      rep->params[s] = DeviceBuffer<StepParams>(dev, 1);
      // Rows a partial minibatch leaves untouched still flow through the (masked) step: keep them finite.
      LENET_CUDA_CHECK(cudaMemset(rep->x[s].get(), 0, rep->x[s].bytes()));
      LENET_CUDA_CHECK(cudaMemset(rep->labels[s].get(), 0, rep->labels[s].bytes()));
      LENET_CUDA_CHECK(cudaMemset(rep->params[s].get(), 0, rep->params[s].bytes()));
      rep->host_x[s] = io::PinnedBuffer<float>(cap * model::kInPixels);
      rep->host_labels[s] = io::PinnedBuffer<int32_t>(cap);
      rep->host_params[s] = io::PinnedBuffer<StepParams>(1);
    }
    rep->receive = DeviceBuffer<float>(dev, std::max<size_t>(largest_chunk, 1));
    rep->thrust_temp = DeviceBuffer<char>(dev, kThrustTempBytes);
    LENET_CUDA_CHECK(cudaMemcpy(rep->net->params(), initial_parameters.data(), model::kNumParameters * sizeof(float),
                                cudaMemcpyHostToDevice));
    rep->ctx->bind(rep->compute.get());
    // The memsets and the pageable copies above ran on the legacy stream, which the replica's
    // non-blocking streams do not wait for.
    LENET_CUDA_CHECK(cudaDeviceSynchronize());
    replicas_.push_back(std::move(rep));
  }
  // Ring neighbours on different GPUs copy inside the captured graph.
  std::vector<int> devices;
  for (const auto& rep : replicas_) devices.push_back(rep->device);
  if (const std::string pair = enable_ring_peer_access(devices); !pair.empty())
    throw cuda::CudaError("graph mode needs peer access between " + pair + ", which could not be enabled; use --mode naive");
  const int root = replicas_[0]->device;
  fork_ = Event(root);
  for (int s = 0; s < kSlots; ++s) step_done_[static_cast<size_t>(s)] = Event(root);

  // One eager step first, with every row masked and a zero learning rate: cuDNN and cuBLAS do their
  // lazy initialisation outside any capture, and the parameters stay exactly as they are.
  synchronize();
  enqueue_step(0);
  synchronize();
  for (auto& rep : replicas_) rep->net->zero_stats(cuda::CudaLenet::kTrainStats);
  synchronize();

  // Capture once per staging slot; training only replays these. A library call that cannot be
  // captured (one that synchronises or allocates) fails here, named, with the way around it.
  for (int s = 0; s < kSlots; ++s) {
    try {
      cuda::Capture capture(replicas_[0]->compute);
      enqueue_step(s);
      step_graphs_[static_cast<size_t>(s)] = capture.finish();
      step_graphs_[static_cast<size_t>(s)].upload(replicas_[0]->compute.get());
    } catch (const cuda::CudaError& e) {
      throw cuda::CudaError(std::string("capturing the training step into a CUDA graph failed: ") + e.what() +
                            "; --mode naive trains without graphs");
    }
  }
  synchronize();
}

CudaGraphBackend::~CudaGraphBackend() { drain(); }

void CudaGraphBackend::drain() noexcept {
  // Every stream, even after an error on one: no graph or copy may still use what is freed next.
  // Errors are ignored, there is nothing useful to do about them while tearing down.
  for (auto& rep : replicas_) {
    cuda::QuietDeviceGuard guard(rep->device);
    cudaStreamSynchronize(rep->copy.get());
    cudaStreamSynchronize(rep->compute.get());
  }
}

std::vector<std::string> CudaGraphBackend::devices() const {
  std::vector<std::string> out;
  for (const auto& rep : replicas_) out.push_back("cuda:" + std::to_string(rep->device));
  return out;
}

void CudaGraphBackend::enqueue_step(int slot) {
  // The operations that enqueue_replica_step (engine/staging.hpp) puts in order.
  struct CapturedOps {
    CudaGraphBackend& b;
    size_t s;
    Replica& rep(size_t r) const { return *b.replicas_[r]; }
    cudaStream_t stream(size_t r) const { return rep(r).compute.get(); }
    void record_fork() const { b.fork_.record(stream(0)); }
    void wait_fork(size_t r) const { b.fork_.wait_on(stream(r)); }
    void forward_backward(size_t r) const {
      Replica& p = rep(r);
      const StepParams* params = p.params[s].get();
      p.net->forward(p.capacity, p.x[s].get());
      p.net->loss(p.capacity, cuda::CudaLenet::kTrainStats, p.labels[s].get(),
                  device_field<int32_t>(params, offsetof(StepParams, rows)));
      p.net->backward(p.capacity, p.x[s].get());
    }
    void record_progress(size_t r) const { rep(r).progress.record(stream(r)); }
    void allreduce() const {
      std::vector<RingMember> members;
      for (auto& p : b.replicas_)
        members.push_back({p->device, p->net->grads(), p->receive.get(), p->compute.get(), p->progress.get()});
      enqueue_ring_allreduce(b.ring_, members);
    }
    void update(size_t r) const {
      Replica& p = rep(r);
      DeviceGuard guard(p.device);
      cuda::launch_sgd_update(p.net->params(), p.net->grads(), model::kNumParameters,
                              device_field<float>(p.params[s].get(), offsetof(StepParams, scale)), stream(r));
    }
    void record_joined(size_t r) const { rep(r).joined.record(stream(r)); }
    void root_wait_joined(size_t r) const { rep(r).joined.wait_on(stream(0)); }
  } ops{*this, static_cast<size_t>(slot)};
  enqueue_replica_step(replicas_.size(), ops);
}

void CudaGraphBackend::train_step(const io::Split& data, const uint32_t* idx, int rows, float lr) {
  const std::vector<RowRange> split = split_rows(rows, static_cast<int>(replicas_.size()));
  for (size_t r = 0; r < replicas_.size(); ++r) {
    if (const int capacity = replicas_[r]->capacity; split[r].rows > capacity) {
      throw std::invalid_argument("CudaGraphBackend: replica " + std::to_string(r) + "'s share of a minibatch of " +
                                  std::to_string(rows) + " rows, " + std::to_string(split[r].rows) +
                                  ", is more than the " + std::to_string(capacity) +
                                  (capacity == 1 ? " row" : " rows") + " its graphs were captured for");
    }
  }
  // The operations that enqueue_staging and enqueue_replay (engine/staging.hpp) put in order.
  struct StepOps {
    CudaGraphBackend& b;
    const io::Split& data;
    const uint32_t* idx;
    const std::vector<RowRange>& split;
    int rows;
    float lr;
    Replica& rep(size_t r) const { return *b.replicas_[r]; }
    // The only host wait of the mode: the copy that last read this pinned slot must be done.
    void host_wait_copied(size_t r, size_t s) const { rep(r).copied[s].synchronize(); }
    void fill(size_t r, size_t s) const {
      Replica& p = rep(r);
      data.gather(idx + split[r].first, static_cast<size_t>(split[r].rows), p.host_x[s].get(), p.host_labels[s].get());
      *p.host_params[s].get() = step_params(split[r].rows, rows, lr);
    }
    void copy_wait_replayed(size_t r, size_t s) const { b.step_done_[s].wait_on(rep(r).copy.get()); }
    void copy(size_t r, size_t s) const {
      Replica& p = rep(r);
      const size_t n = static_cast<size_t>(split[r].rows);
      DeviceGuard guard(p.device);
      cudaStream_t cs = p.copy.get();
      if (n > 0) {
        LENET_CUDA_CHECK(cudaMemcpyAsync(p.x[s].get(), p.host_x[s].get(), n * model::kInPixels * sizeof(float),
                                         cudaMemcpyHostToDevice, cs));
        LENET_CUDA_CHECK(
            cudaMemcpyAsync(p.labels[s].get(), p.host_labels[s].get(), n * sizeof(int32_t), cudaMemcpyHostToDevice, cs));
      }
      LENET_CUDA_CHECK(
          cudaMemcpyAsync(p.params[s].get(), p.host_params[s].get(), sizeof(StepParams), cudaMemcpyHostToDevice, cs));
    }
    void record_copied(size_t r, size_t s) const { rep(r).copied[s].record(rep(r).copy.get()); }
    void root_wait_copied(size_t r, size_t s) const { rep(r).copied[s].wait_on(rep(0).compute.get()); }
    void replay(size_t s) const {
      DeviceGuard guard(rep(0).device);  // launches go to a stream of the current device
      b.step_graphs_[s].launch(rep(0).compute.get());
    }
    void record_replayed(size_t s) const { b.step_done_[s].record(rep(0).compute.get()); }
  } ops{*this, data, idx, split, rows, lr};
  try {
    {
      profiling::Range range("h2d");
      enqueue_staging(staging_, step_, replicas_.size(), ops);
    }
    profiling::Range range("replay");
    enqueue_replay(staging_, step_, replicas_.size(), ops);
  } catch (...) {
    // A step that throws part-way may have queued a copy whose event was not recorded: a call after this
    // one fills the same pinned slot again and, in the first two steps, waits for nothing.
    drain();
    throw;
  }
  ++step_;
}

void CudaGraphBackend::synchronize() {
  for (auto& rep : replicas_) {
    DeviceGuard guard(rep->device);
    LENET_CUDA_CHECK(cudaStreamSynchronize(rep->copy.get()));
    LENET_CUDA_CHECK(cudaStreamSynchronize(rep->compute.get()));
  }
}

TrainStats CudaGraphBackend::take_train_stats() {
  synchronize();  // replays run on the root stream: all of them must be done before reading
  std::vector<cuda::CudaLenet*> nets;
  for (auto& rep : replicas_) nets.push_back(rep->net.get());
  const TrainStats total = engine::take_train_stats(nets);
  // Work enqueued outside the graphs on replica streams is not ordered before the next replay (which
  // is ordered only after the root stream): finish it here.
  synchronize();
  return total;
}

void CudaGraphBackend::prepare_evaluation(const io::Split& data) {
  // About a millisecond for the test set's 7.8 MB, against the seconds of an epoch.
  if (eval_data_ && data.labels == eval_data_->labels && data.pixels == eval_data_->pixels) return;
  eval_data_.reset();
  const std::vector<RowRange> shares = split_rows(static_cast<int>(data.size()), static_cast<int>(replicas_.size()));
  std::vector<float> x;
  std::vector<int32_t> labels;
  for (size_t r = 0; r < replicas_.size(); ++r) {
    Replica& rep = *replicas_[r];
    const size_t cap = static_cast<size_t>(rep.capacity);
    const size_t rows = static_cast<size_t>(shares[r].rows);
    const size_t padded = padded_rows(rows, cap);
    x.assign(padded * model::kInPixels, 0.0f);
    labels.assign(padded, 0);
    data.slice(static_cast<size_t>(shares[r].first), rows, x.data(), labels.data());
    rep.test_x = DeviceBuffer<float>(rep.device, x.size());
    rep.test_labels = DeviceBuffer<int32_t>(rep.device, padded);
    rep.test_correct = DeviceBuffer<int32_t>(rep.device, padded);
    rep.test_x.upload(x.data(), x.size());
    rep.test_labels.upload(labels.data(), labels.size());
    rep.test_rows = rows;
    DeviceGuard guard(rep.device);
    LENET_CUDA_CHECK(cudaDeviceSynchronize());  // uploads on the legacy stream, read on the compute stream
  }
  eval_data_ = data;
}

int64_t CudaGraphBackend::count_correct(const io::Split& data, int /*batch_size*/) {
  synchronize();
  prepare_evaluation(data);
  // Every replica evaluates its share on its own stream, in batches of its captured row count (the
  // forward pass then needs no other cuDNN configuration); the counts are reduced on the device.
  for (auto& rep : replicas_) {
    DeviceGuard guard(rep->device);
    for (const ChunkRange& b : batches(rep->test_rows, static_cast<size_t>(rep->capacity))) {
      rep->net->forward(rep->capacity, rep->test_x.get() + b.offset * model::kInPixels);
      cuda::launch_count_correct(rep->net->logits(), rep->test_labels.get() + b.offset, static_cast<int>(b.size),
                                 model::kClasses, rep->test_correct.get() + b.offset, rep->compute.get());
    }
  }
  int64_t correct = 0;
  for (auto& rep : replicas_) {
    if (rep->test_rows == 0) continue;
    DeviceGuard guard(rep->device);
    LentBlock block("Thrust's temporary storage", rep->thrust_temp.get(), rep->thrust_temp.bytes());
    PreallocatedTemp temp(block);
    // One host read per replica and evaluation: thrust::reduce returns its sum to the host.
    correct += thrust::reduce(thrust::cuda::par_nosync(temp).on(rep->compute.get()), rep->test_correct.get(),
                              rep->test_correct.get() + rep->test_rows, int64_t{0});
  }
  synchronize();
  return correct;
}

std::vector<float> CudaGraphBackend::parameters(int replica) const {
  const Replica& rep = *replicas_.at(static_cast<size_t>(replica));
  {
    // Replays run on replica 0's stream (on its device) and span every replica's device.
    DeviceGuard root(replicas_[0]->device);
    LENET_CUDA_CHECK(cudaStreamSynchronize(replicas_[0]->compute.get()));
    DeviceGuard guard(rep.device);
    LENET_CUDA_CHECK(cudaDeviceSynchronize());  // the download runs on the legacy stream, unordered with ours
  }
  return rep.net->param_buffer().download();
}

std::vector<std::pair<std::string, double>> CudaGraphBackend::counters() const {
  return {{"graph_instantiations", static_cast<double>(cuda::GraphExec::instantiations())}};
}

std::vector<std::string> CudaGraphBackend::algorithm_report() const {
  std::vector<std::string> out;
  for (size_t r = 0; r < replicas_.size(); ++r) out.push_back(describe_replica(r, *replicas_[r]->net));
  return out;
}

}  // namespace lenet::engine
