#include "engine/ring.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace lenet::engine {

std::vector<std::pair<int, int>> ring_links_between_devices(const std::vector<int>& devices) {
  std::vector<std::pair<int, int>> links;
  for (size_t r = 0; r < devices.size(); ++r) {
    const int a = devices[r], b = devices[(r + 1) % devices.size()];
    const std::pair<int, int> link{std::min(a, b), std::max(a, b)};
    if (a != b && std::find(links.begin(), links.end(), link) == links.end()) links.push_back(link);
  }
  return links;
}

std::vector<RowRange> split_rows(int batch_rows, int replicas) {
  if (replicas < 1) throw std::invalid_argument("split_rows: replicas " + std::to_string(replicas));
  if (batch_rows < 0) throw std::invalid_argument("split_rows: rows " + std::to_string(batch_rows));
  const int per = (batch_rows + replicas - 1) / replicas;
  std::vector<RowRange> out(static_cast<size_t>(replicas));
  for (int r = 0; r < replicas; ++r) {
    const int first = std::min(batch_rows, r * per);
    out[static_cast<size_t>(r)] = {first, std::min(batch_rows, first + per) - first};
  }
  return out;
}

std::vector<int> minibatch_sizes(size_t examples, int batch) {
  const size_t b = static_cast<size_t>(batch);
  std::vector<int> sizes = {static_cast<int>(std::min(examples, b))};
  if (examples > b && examples % b != 0) sizes.push_back(static_cast<int>(examples % b));
  return sizes;
}

int largest_share(const std::vector<int>& batch_sizes, int replicas, int replica) {
  int most = 0;
  for (int b : batch_sizes) most = std::max(most, split_rows(b, replicas).at(static_cast<size_t>(replica)).rows);
  return most;
}

std::vector<ChunkRange> batches(size_t rows, size_t width) {
  if (width == 0) throw std::invalid_argument("batches: width 0");
  std::vector<ChunkRange> out;
  for (size_t first = 0; first < rows; first += width) out.push_back({first, std::min(width, rows - first)});
  return out;
}

size_t padded_rows(size_t rows, size_t width) {
  if (width == 0) throw std::invalid_argument("padded_rows: width 0");
  return std::max<size_t>(1, (rows + width - 1) / width) * width;
}

CudaPlacement place(int num_gpus, int replicas, size_t train_examples, size_t test_examples, int batch_size) {
  if (num_gpus < 1 || replicas < 1 || batch_size < 1) {
    throw std::invalid_argument("place: GPUs " + std::to_string(num_gpus) + ", replicas " + std::to_string(replicas) +
                                ", batch size " + std::to_string(batch_size));
  }
  return {std::min(num_gpus, replicas), replicas, minibatch_sizes(train_examples, batch_size),
          minibatch_sizes(test_examples, batch_size)};
}

std::string num_gpus_error(int num_gpus, int visible) {
  if (num_gpus <= visible) return "";
  return "--num-gpus " + std::to_string(num_gpus) + ": only " + std::to_string(visible) + " GPU" +
         (visible == 1 ? " is" : "s are") + " visible";
}

RingSchedule::RingSchedule(int replicas, size_t length) : replicas_(replicas), length_(length) {
  if (replicas < 1) throw std::invalid_argument("RingSchedule: replicas " + std::to_string(replicas));
  const size_t r = static_cast<size_t>(replicas);
  size_t offset = 0;
  for (size_t c = 0; c < r; ++c) {
    const size_t size = length / r + (c < length % r ? 1 : 0);
    chunks_.push_back({offset, size});
    offset += size;
  }
  auto mod = [replicas](int v) { return ((v % replicas) + replicas) % replicas; };
  for (int s = 0; s + 1 < replicas; ++s) {
    std::vector<Transfer> step;
    for (int src = 0; src < replicas; ++src) step.push_back({src, mod(src + 1), mod(src - s), true});
    steps_.push_back(std::move(step));
  }
  for (int s = 0; s + 1 < replicas; ++s) {
    std::vector<Transfer> step;
    for (int src = 0; src < replicas; ++src) step.push_back({src, mod(src + 1), mod(src + 1 - s), false});
    steps_.push_back(std::move(step));
  }
}

void ring_allreduce_host(const RingSchedule& schedule, const std::vector<float*>& buffers) {
  if (buffers.size() != static_cast<size_t>(schedule.replicas())) {
    throw std::invalid_argument("ring_allreduce_host: " + std::to_string(buffers.size()) + " buffers for " +
                                std::to_string(schedule.replicas()) + " replicas");
  }
  for (const auto& step : schedule.steps()) {
    for (const Transfer& t : step) {
      const ChunkRange& c = schedule.chunks()[static_cast<size_t>(t.chunk)];
      const float* src = buffers[static_cast<size_t>(t.src)] + c.offset;
      float* dst = buffers[static_cast<size_t>(t.dst)] + c.offset;
      if (t.reduce) {
        for (size_t i = 0; i < c.size; ++i) dst[i] += src[i];
      } else {
        std::copy(src, src + c.size, dst);
      }
    }
  }
}

}  // namespace lenet::engine
