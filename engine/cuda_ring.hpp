// The ring allreduce schedule of ring.hpp executed on GPUs: each transfer is a copy (peer copy across
// devices, device-to-device copy for replicas sharing a GPU) on the receiver's stream, followed by an
// add kernel for reduce-scatter steps, and replicas are ordered by events only, so it can run eagerly or
// inside a captured graph. Also what the naive and graph modes share besides the allreduce: peer access,
// the replica log line, and reading the training statistics.
#pragma once
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/ring.hpp"

namespace lenet::cuda {
class CudaLenet;
}

namespace lenet::engine {

// Lets GPU `from` access the memory of GPU `to` if the hardware offers it and the driver's limit on
// peers allows; returns whether it now can (true when from == to). Eager copies between GPUs without
// peer access still work, staged through the host by the driver.
bool enable_peer_access(int from, int to);

// Peer access both ways for every pair of GPUs that ring neighbours placed on `devices` sit on
// (ring_links_between_devices). A captured ring needs it: copies between GPUs staged through the host
// are documented for eager copies only. Returns "" where every pair has it, else the first pair
// without it, as "cuda:A and cuda:B".
std::string enable_ring_peer_access(const std::vector<int>& devices);

// One line for the log: where a replica runs and which cuDNN algorithms it chose.
std::string describe_replica(size_t index, const cuda::CudaLenet& net);

// The replicas' training statistics since the last call, summed, with the earliest step whose loss was
// not finite on any of them; their counts are set back to zero (on each replica's stream).
TrainStats take_train_stats(const std::vector<cuda::CudaLenet*>& replicas);

struct RingMember {
  int device = 0;
  float* buffer = nullptr;   // schedule.length() floats, summed in place
  float* receive = nullptr;  // at least the largest chunk, on `device`
  cudaStream_t stream = nullptr;
  cudaEvent_t progress = nullptr;  // on `device`, created with cudaEventDisableTiming
};

// The caller records every member's `progress` event on its stream after the work that produced the
// buffer; afterwards each member's stream holds the allreduce behind that work, and `progress` marks the
// end of the member's part. At every step a member waits only for its ring predecessor's previous step.
void enqueue_ring_allreduce(const RingSchedule& schedule, const std::vector<RingMember>& members);

// The source text's allreduce of `count` floats at `offset` in every member's buffer: each other
// member's part copied to member 0 (into member 0's receive buffer) and added there, then the sum copied
// back to every member. Everything runs in the order of the calls, as tensor.to(device) orders it:
// cudaMemcpyPeer is serialised with all work on both devices, and a copy within a device and the adds
// go to that device's legacy default stream (none of them waits for the host); streams and events of
// the members are not used.
void textbook_allreduce(const std::vector<RingMember>& members, size_t offset, size_t count);


}  // namespace lenet::engine
