// The graph mode's step as plain C++ that the tests check without a GPU: the rotation of its staging
// buffers and the order of its operations (staging, replay, and the work each replay runs). Step k stages
// its minibatch in slot k mod S; before the host refills the pinned slot the copy of step k - S (the
// last to read it) must be done, and before the copy stream overwrites the device slot the replay of
// step k - S (which read it) must be done.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "model/lenet.hpp"

namespace lenet::engine {

class StagingSlots {
 public:
  explicit StagingSlots(int slots) : slots_(slots) {
    if (slots < 2) throw std::invalid_argument("StagingSlots: at least two slots, or copies cannot overlap compute");
  }
  int slots() const { return slots_; }
  int slot(uint64_t step) const { return static_cast<int>(step % static_cast<uint64_t>(slots_)); }
  // The earlier step that used the same slot, or -1 for the first S steps.
  int64_t previous_user(uint64_t step) const {
    return step >= static_cast<uint64_t>(slots_) ? static_cast<int64_t>(step) - slots_ : -1;
  }

 private:
  int slots_;
};

// One training step of the graph mode in the order it is enqueued, for R replicas, across the host, each
// replica's copy stream and the root stream (replica 0's compute stream, where the step's graph is
// launched): first every replica's minibatch rows go through its pinned slot to its device slot, then
// the slot's graph replays. cuda_graph_backend.cu instantiates both halves; tests/cpu/test_staging.cpp
// runs them on a model of streams and events. `ops` provides, for replica r and staging slot s:
//   host_wait_copied(r, s)    the host waits for r's "copied" event of slot s (after the slot's last
//                             host-to-device copies) before refilling the pinned slot;
//   fill(r, s)                the host writes r's pinned slot: its rows of the minibatch, its StepParams;
//   copy_wait_replayed(r, s)  r's copy stream waits for slot s's "replayed" event (after the last replay,
//                             which read the slot's device copy);
//   copy(r, s)                r's copy stream copies the pinned slot to the device slot;
//   record_copied(r, s)       r's copy stream records r's "copied" event of slot s;
//   root_wait_copied(r, s)    the root stream waits for r's "copied" event of slot s;
//   replay(s)                 the root stream launches slot s's graph, which reads every device slot s;
//   record_replayed(s)        the root stream records slot s's "replayed" event.
// The waits are needed only once a slot is reused (earlier events were never recorded).
template <typename Ops>
void enqueue_staging(const StagingSlots& staging, uint64_t step, size_t replicas, Ops& ops) {
  const size_t s = static_cast<size_t>(staging.slot(step));
  const bool reused = staging.previous_user(step) >= 0;
  for (size_t r = 0; r < replicas; ++r) {
    if (reused) ops.host_wait_copied(r, s);
    ops.fill(r, s);
    if (reused) ops.copy_wait_replayed(r, s);
    ops.copy(r, s);
    ops.record_copied(r, s);
  }
}

template <typename Ops>
void enqueue_replay(const StagingSlots& staging, uint64_t step, size_t replicas, Ops& ops) {
  const size_t s = static_cast<size_t>(staging.slot(step));
  for (size_t r = 0; r < replicas; ++r) ops.root_wait_copied(r, s);
  ops.replay(s);
  ops.record_replayed(s);
}

// What each replay runs (captured once per slot after one eager warm-up step), across the replicas'
// compute streams, replica 0's being the root stream that the graph is captured on and launched into:
//   record_fork(), wait_fork(r)   the root stream records the fork event, replica r >= 1 waits for it;
//   forward_backward(r)           replica r's forward pass, loss and backward pass, writing its gradients;
//   record_progress(r)            ... then its progress event, which the ring's first step waits for;
//   allreduce()                   the ring over the replicas' streams and progress events
//                                 (enqueue_ring_allreduce, which instantiates enqueue_ring);
//   update(r)                     replica r's SGD update from the summed gradients;
//   record_joined(r), root_wait_joined(r)  replica r >= 1 records its join event, the root stream waits.
// A capture must end with every forked stream joined back, and the eager warm-up step needs the join for
// the root stream's later work to follow it (a replay is one operation on the root stream anyway).
// tests/cpu/test_ring.cpp runs two steps back to back on a model of streams and events.
template <typename Ops>
void enqueue_replica_step(size_t replicas, Ops& ops) {
  ops.record_fork();
  for (size_t r = 1; r < replicas; ++r) ops.wait_fork(r);
  for (size_t r = 0; r < replicas; ++r) {
    ops.forward_backward(r);
    ops.record_progress(r);
  }
  ops.allreduce();
  for (size_t r = 0; r < replicas; ++r) ops.update(r);
  for (size_t r = 1; r < replicas; ++r) {
    ops.record_joined(r);
    ops.root_wait_joined(r);
  }
}

// What one replica's captured step reads from device memory at replay: its row count (rows past it
// are masked) and the SGD scale lr / (rows of the whole minibatch).
struct StepParams {
  int32_t rows = 0;
  float scale = 0.0f;
};

inline StepParams step_params(int replica_rows, int minibatch_rows, float lr) {
  if (minibatch_rows < 1) throw std::invalid_argument("step_params: empty minibatch");
  return {replica_rows, model::sgd_scale(lr, minibatch_rows)};
}

}  // namespace lenet::engine
