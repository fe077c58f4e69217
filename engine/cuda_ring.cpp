#include "engine/cuda_ring.hpp"

#include <stdexcept>
#include <string>

#include "graphs/cuda_check.hpp"
#include "model/cuda_kernels.hpp"
#include "model/cuda_lenet.hpp"

namespace lenet::engine {

bool enable_peer_access(int from, int to) {
  if (from == to) return true;
  cuda::DeviceGuard guard(from);  // a failure's message names the current device
  int can = 0;
  LENET_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
  if (!can) return false;
  const cudaError_t rc = cudaDeviceEnablePeerAccess(to, 0);
  if (rc == cudaErrorPeerAccessAlreadyEnabled || rc == cudaErrorTooManyPeers) {
    cudaGetLastError();  // neither error is sticky; clear it so the next check does not report it
    return rc == cudaErrorPeerAccessAlreadyEnabled;
  }
  LENET_CUDA_CHECK(rc);
  return true;
}

std::string enable_ring_peer_access(const std::vector<int>& devices) {
  for (const auto& [a, b] : ring_links_between_devices(devices))
    if (!enable_peer_access(a, b) || !enable_peer_access(b, a))
      return "cuda:" + std::to_string(a) + " and cuda:" + std::to_string(b);
  return "";
}

namespace {

// cudaMemcpyPeer is serialised with all work on both devices; whether it accepts srcDevice == dstDevice
// is not documented, so members sharing a GPU use a device-to-device copy on that device's stream.
void copy_between(float* dst, int dst_device, const float* src, int src_device, size_t count) {
  const size_t bytes = count * sizeof(float);
  cuda::DeviceGuard guard(dst_device);  // a failure's message names the current device: the destination
  if (dst_device == src_device) {
    LENET_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
  } else {
    LENET_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device, src, src_device, bytes));
  }
}

}  // namespace

void textbook_allreduce(const std::vector<RingMember>& members, size_t offset, size_t count) {
  const RingMember& root = members.at(0);
  float* sum = root.buffer + offset;
  for (size_t r = 1; r < members.size(); ++r) {
    copy_between(root.receive, root.device, members[r].buffer + offset, members[r].device, count);
    cuda::DeviceGuard guard(root.device);
    cuda::launch_add_into(sum, root.receive, count, nullptr);
  }
  for (size_t r = 1; r < members.size(); ++r) copy_between(members[r].buffer + offset, members[r].device, sum, root.device, count);
}

std::string describe_replica(size_t index, const cuda::CudaLenet& net) {
  return "replica " + std::to_string(index) + " on cuda:" + std::to_string(net.device()) + ": cuDNN algorithms " +
         net.algorithms();
}

TrainStats take_train_stats(const std::vector<cuda::CudaLenet*>& replicas) {
  TrainStats total;
  for (cuda::CudaLenet* net : replicas) {
    int64_t bad = -1;
    const model::StepStats st = net->read_stats(cuda::CudaLenet::kTrainStats, &bad);
    total.loss_sum += st.loss_sum;
    total.correct += st.correct;
    total.first_nonfinite_step = model::earlier_bad_step(total.first_nonfinite_step, bad);
    net->zero_stats(cuda::CudaLenet::kTrainStats);
  }
  return total;
}

void enqueue_ring_allreduce(const RingSchedule& schedule, const std::vector<RingMember>& members) {
  if (members.size() != static_cast<size_t>(schedule.replicas())) {
    throw std::invalid_argument("enqueue_ring_allreduce: " + std::to_string(members.size()) + " members for " +
                                std::to_string(schedule.replicas()) + " replicas");
  }
  struct Queue {
    const std::vector<RingMember>& m;
    const RingMember& at(int r) const { return m[static_cast<size_t>(r)]; }
    void wait(int dst, int src) { LENET_CUDA_CHECK(cudaStreamWaitEvent(at(dst).stream, at(src).progress, 0)); }
    void transfer(const Transfer& t, const ChunkRange& c) {
      const RingMember& src = at(t.src);
      const RingMember& dst = at(t.dst);
      cuda::DeviceGuard guard(dst.device);
      const size_t bytes = c.size * sizeof(float);
      // cudaMemcpyDefault: unified addressing finds both devices; a peer copy where they differ.
      if (t.reduce) {
        LENET_CUDA_CHECK(cudaMemcpyAsync(dst.receive, src.buffer + c.offset, bytes, cudaMemcpyDefault, dst.stream));
        cuda::launch_add_into(dst.buffer + c.offset, dst.receive, c.size, dst.stream);
      } else {
        LENET_CUDA_CHECK(cudaMemcpyAsync(dst.buffer + c.offset, src.buffer + c.offset, bytes, cudaMemcpyDefault,
                                         dst.stream));
      }
    }
    void record(int r) {
      cuda::DeviceGuard guard(at(r).device);
      LENET_CUDA_CHECK(cudaEventRecord(at(r).progress, at(r).stream));
    }
  } queue{members};
  enqueue_ring(schedule, queue);
}

}  // namespace lenet::engine
