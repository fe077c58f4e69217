#include "engine/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "model/gemm.hpp"
#include "model/lenet.hpp"
#include "profiling/nvtx.hpp"

namespace lenet::engine {

bool cpu_backend_is_parallel() {
#ifdef _OPENMP
  return true;
#else
  return false;
#endif
}

namespace {

// OpenMP's default (OMP_NUM_THREADS, else every core), at most one per core: more only contend for the
// cores, and each thread's share of the chunk buffers costs memory (OMP_NUM_THREADS=100000 crashed libgomp).
int thread_count(int asked) {
#ifdef _OPENMP
  return asked > 0 ? asked : std::max(1, std::min(omp_get_max_threads(), omp_get_num_procs()));
#else
  (void)asked;
  return 1;
#endif
}

}  // namespace

void parallel_for(int n, [[maybe_unused]] int threads, const std::function<void(int, int)>& fn) {
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int i = 0; i < n; ++i) {
    int thread = 0;
#ifdef _OPENMP
    thread = omp_get_thread_num();
#endif
    try {
      fn(i, thread);
    } catch (...) {
#pragma omp critical(lenet_cpu_backend_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

CpuBackend::CpuBackend(int replicas, const std::vector<float>& initial_parameters, int threads)
    : replicas_(static_cast<size_t>(replicas)), ring_(replicas, model::kNumParameters) {
  if (initial_parameters.size() != model::kNumParameters) {
    throw std::invalid_argument("CpuBackend: " + std::to_string(initial_parameters.size()) + " parameters, expected " +
                                std::to_string(model::kNumParameters));
  }
  for (Replica& r : replicas_) {
    r.params = initial_parameters;
    r.grads.assign(model::kNumParameters, 0.0f);
  }
  // The chunks are the parallelism; BLAS threads inside them would only contend for the same cores.
  model::gemm_single_threaded();
  workers_.resize(static_cast<size_t>(thread_count(threads)));
}

std::vector<std::string> CpuBackend::devices() const { return std::vector<std::string>(replicas_.size(), "cpu"); }

void CpuBackend::train_step(const io::Split& data, const uint32_t* idx, int rows, float lr) {
  const std::vector<RowRange> split = split_rows(rows, static_cast<int>(replicas_.size()));
  std::vector<Chunk> chunks;
  for (size_t r = 0; r < replicas_.size(); ++r) {
    for (const ChunkRange& c : batches(static_cast<size_t>(split[r].rows), kCpuChunkRows))
      chunks.push_back({static_cast<int>(r), split[r].first + static_cast<int>(c.offset), static_cast<int>(c.size)});
  }
  const size_t wave = std::min(chunks.size(), std::max(kCpuChunksPerWave, 2 * workers_.size()));
  if (chunk_grads_.size() < wave) chunk_grads_.resize(wave, std::vector<float>(model::kNumParameters));
  std::vector<model::StepStats> chunk_stats(wave);
  double step_loss = 0;
  {
    profiling::Range range("forward_backward");
    // Each replica's gradient: its chunks' sum in chunk order (zero for a replica without rows).
    for (Replica& rep : replicas_) std::fill(rep.grads.begin(), rep.grads.end(), 0.0f);
    for (size_t begin = 0; begin < chunks.size(); begin += wave) {
      const size_t n = std::min(wave, chunks.size() - begin);
      parallel_for(static_cast<int>(n), static_cast<int>(workers_.size()), [&](int k, int thread) {
        const Chunk& c = chunks[begin + size_t(k)];
        Worker& w = workers_[size_t(thread)];
        w.x.resize(static_cast<size_t>(c.rows) * model::kInPixels);
        w.labels.resize(static_cast<size_t>(c.rows));
        data.gather(idx + c.first, static_cast<size_t>(c.rows), w.x.data(), w.labels.data());
        chunk_stats[size_t(k)] = w.net.forward_backward(replicas_[size_t(c.replica)].params.data(), w.x.data(),
                                                        w.labels.data(), c.rows, chunk_grads_[size_t(k)].data());
      });
      for (size_t k = 0; k < n; ++k) {
        float* g = replicas_[size_t(chunks[begin + k].replica)].grads.data();
        const float* c = chunk_grads_[k].data();
        for (size_t j = 0; j < model::kNumParameters; ++j) g[j] += c[j];
        stats_.loss_sum += chunk_stats[k].loss_sum;
        stats_.correct += chunk_stats[k].correct;
        step_loss += chunk_stats[k].loss_sum;
      }
    }
  }
  model::track_step(tracker_, step_loss);
  {
    profiling::Range range("allreduce");
    std::vector<float*> grads;
    for (Replica& rep : replicas_) grads.push_back(rep.grads.data());
    ring_allreduce_host(ring_, grads);
  }
  {
    profiling::Range range("update");
    const float scale = model::sgd_scale(lr, rows);
    for (Replica& rep : replicas_) model::sgd_update(rep.params.data(), rep.grads.data(), model::kNumParameters, scale);
  }
}

TrainStats CpuBackend::take_train_stats() {
  TrainStats out;
  static_cast<model::StepStats&>(out) = std::exchange(stats_, model::StepStats{});
  out.first_nonfinite_step = model::first_bad_step(std::exchange(tracker_, model::StepTracker{}));
  return out;
}

// In chunks of kCpuChunkRows rather than minibatches: the count is the same for any batching.
int64_t CpuBackend::count_correct(const io::Split& data, int /*batch_size*/) {
  const std::vector<ChunkRange> chunks = batches(data.size(), kCpuChunkRows);
  std::vector<int64_t> correct(chunks.size(), 0);
  parallel_for(static_cast<int>(chunks.size()), static_cast<int>(workers_.size()), [&](int i, int thread) {
    Worker& w = workers_[size_t(thread)];
    const ChunkRange& c = chunks[size_t(i)];
    w.x.resize(c.size * model::kInPixels);
    w.labels.resize(c.size);
    data.slice(c.offset, c.size, w.x.data(), w.labels.data());
    const float* params = replicas_.front().params.data();
    correct[size_t(i)] = w.net.forward(params, w.x.data(), w.labels.data(), int(c.size)).correct;
  });
  int64_t total = 0;
  for (const int64_t c : correct) total += c;
  return total;
}

std::vector<float> CpuBackend::parameters(int replica) const {
  return replicas_.at(static_cast<size_t>(replica)).params;
}

}  // namespace lenet::engine
