// Data-parallel plumbing that does not depend on where it runs: the split of a minibatch over replicas,
// the batches an evaluation walks, the ring allreduce schedule and the order of its operations on
// per-replica streams. The CPU backend executes the schedule with memory copies (ring_allreduce_host);
// the CUDA graph mode enqueues it (enqueue_ring) as peer copies and add kernels ordered by events
// (cuda_ring.hpp).
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace lenet::engine {

struct RowRange {
  int first = 0;
  int rows = 0;
};

// Rows of a minibatch per replica, like torch.chunk: ceil(B / R) rows each in order, the last non-empty
// replica takes what is left, and replicas past the end get zero rows (e.g. B = 5, R = 4: 2, 2, 1, 0).
std::vector<RowRange> split_rows(int batch_rows, int replicas);

// The minibatch sizes an epoch of `examples` in minibatches of `batch` meets: the full size (or all the
// examples when fewer) and the partial last one, if any.
std::vector<int> minibatch_sizes(size_t examples, int batch);

// The most rows replica `replica` gets over minibatches of the given sizes. Not always its share of the
// largest one: a later replica can get more of a smaller, partial minibatch (B = 26, R = 6: 5,5,5,5,5,1;
// B = 18: 3 each), so buffers sized from the full minibatch alone would be too small.
int largest_share(const std::vector<int>& batch_sizes, int replicas, int replica);

// Where the GPU modes run their replicas: replica r on GPU r mod num_gpus. Every minibatch size the run
// trains on (a full batch and the last partial one) and evaluates on is listed, so that each replica
// picks cuDNN algorithms supporting its share of all of them.
struct CudaPlacement {
  int num_gpus = 1;  // GPUs 0..num_gpus-1, each running a replica
  int replicas = 1;
  std::vector<int> train_batch_rows;
  std::vector<int> eval_batch_rows;
  int device(int replica) const { return replica % num_gpus; }
};

// `replicas` replicas on GPUs 0..num_gpus-1 training on `train_examples` and evaluating on
// `test_examples` in minibatches of `batch_size`. GPUs past the replica count are left out (no context,
// no workspace, no peer access): `--replicas 1` on an 8-GPU node opens one GPU, not eight.
CudaPlacement place(int num_gpus, int replicas, size_t train_examples, size_t test_examples, int batch_size);

// "" when GPUs 0..num_gpus-1 are among the `visible` ones, else the error naming --num-gpus, for
// lenet-train and lenet-bench alike.
std::string num_gpus_error(int num_gpus, int visible);

struct ChunkRange {
  size_t offset = 0;
  size_t size = 0;
};

// `rows` examples taken in batches of `width`: each batch's first row and row count, in order, the last
// one partial where `width` does not divide `rows` (no batch for no rows). Evaluation in every mode and
// the CPU backend's chunks walk their rows so.
std::vector<ChunkRange> batches(size_t rows, size_t width);

// `rows` rounded up to whole batches of `width`, at least one: what graph mode's evaluation buffers hold,
// since its captured forward pass always reads `width` rows.
size_t padded_rows(size_t rows, size_t width);

// One copy of the schedule: replica `src` sends chunk `chunk` of its buffer to replica `dst`, which adds
// it to its own chunk (reduce) or overwrites its own chunk with it (gather).
struct Transfer {
  int src = 0;
  int dst = 0;
  int chunk = 0;
  bool reduce = false;
};

// Ring allreduce over R replicas of a buffer of `length` elements cut into R chunks whose sizes differ by
// at most one. Steps 0..R-2 are the reduce-scatter: at step s replica r sends chunk (r - s) mod R to
// replica r + 1, which adds it; afterwards replica r holds the full sum of chunk (r + 1) mod R. Steps
// R-1..2R-3 are the all-gather: at step s' = s - (R - 1) replica r sends chunk (r + 1 - s') mod R, which
// the receiver copies. Within a step every replica sends one chunk and receives another, so the R
// transfers of a step may run in parallel (and in any order): no replica reads a chunk that the same
// step writes on it. Every replica ends with identical bits, since each chunk is summed in one place.
class RingSchedule {
 public:
  RingSchedule(int replicas, size_t length);

  int replicas() const { return replicas_; }
  size_t length() const { return length_; }
  const std::vector<ChunkRange>& chunks() const { return chunks_; }
  // 2(R - 1) steps of R transfers each; none for R = 1.
  const std::vector<std::vector<Transfer>>& steps() const { return steps_; }

 private:
  int replicas_;
  size_t length_;
  std::vector<ChunkRange> chunks_;
  std::vector<std::vector<Transfer>> steps_;
};

// The schedule as the CUDA graph mode enqueues it on one stream per replica, ordered by one progress
// event per replica. `queue` provides
//   wait(dst, src)            replica dst's stream waits for replica src's progress event;
//   transfer(t, chunk)        on replica t.dst's stream: a reduce copies the chunk into the receive
//                             buffer and adds it, a gather copies it into the buffer (never empty);
//   record(replica)           the replica's progress event marks the work on its stream so far.
// The caller records every progress event after the work that produced the buffers. A step's transfer
// waits only for its sender's previous step; the chain of those waits around the ring orders every
// later write of a chunk behind the earlier reads of it (tests/cpu/test_ring.cpp checks that on a model
// of streams and events). A step's waits all come before its records: recording a sender's event
// before its receiver waited would order the receiver behind this step too (correct, but serial).
template <typename Queue>
void enqueue_ring(const RingSchedule& schedule, Queue& queue) {
  for (const std::vector<Transfer>& step : schedule.steps()) {
    for (const Transfer& t : step) queue.wait(t.dst, t.src);
    for (const Transfer& t : step) {
      const ChunkRange& c = schedule.chunks()[static_cast<size_t>(t.chunk)];
      if (c.size > 0) queue.transfer(t, c);
    }
    for (int r = 0; r < schedule.replicas(); ++r) queue.record(r);
  }
}

// The pairs of different GPUs that ring neighbours sit on (replica r sends to replica (r + 1) mod R,
// which runs on devices[(r + 1) mod R]), each pair once with the smaller device first, in ring order:
// where the ring's copies cross between GPUs and need peer access both ways.
std::vector<std::pair<int, int>> ring_links_between_devices(const std::vector<int>& devices);

// Executes the schedule on host buffers (one per replica, each schedule.length() floats): afterwards
// every buffer holds the elementwise sum of all of them.
void ring_allreduce_host(const RingSchedule& schedule, const std::vector<float*>& buffers);

}  // namespace lenet::engine
