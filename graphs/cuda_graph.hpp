// RAII for the CUDA objects the graph mode orders its work with: streams, events, and captured graphs
// with their executables. Each object remembers its device and is destroyed there.
#pragma once
#include <cuda_runtime_api.h>

#include <utility>

#include "graphs/cuda_check.hpp"

namespace lenet::cuda {

// A non-blocking stream: it never synchronises with the legacy default stream.
class Stream {
 public:
  Stream() = default;
  explicit Stream(int device) : device_(device) {
    DeviceGuard guard(device);
    LENET_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~Stream() {
    if (stream_ == nullptr) return;
    QuietDeviceGuard guard(device_);
    cudaStreamDestroy(stream_);
  }
  Stream(Stream&& o) noexcept { *this = std::move(o); }
  Stream& operator=(Stream&& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(stream_, o.stream_);
    return *this;
  }
  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }

 private:
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
};

// An event for ordering only (no timing: the documented fastest kind), created on `device`, where it
// must be recorded.
class Event {
 public:
  Event() = default;
  explicit Event(int device) : device_(device) {
    DeviceGuard guard(device);
    LENET_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~Event() {
    if (event_ == nullptr) return;
    QuietDeviceGuard guard(device_);
    cudaEventDestroy(event_);
  }
  Event(Event&& o) noexcept { *this = std::move(o); }
  Event& operator=(Event&& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(event_, o.event_);
    return *this;
  }
  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }
  void record(cudaStream_t stream) const {
    DeviceGuard guard(device_);
    LENET_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  // Makes `stream` (any device) wait for the work before the last record.
  void wait_on(cudaStream_t stream) const { LENET_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }
  void synchronize() const { LENET_CUDA_CHECK(cudaEventSynchronize(event_)); }

 private:
  int device_ = -1;
  cudaEvent_t event_ = nullptr;
};

// An instantiated graph, counted so the trainer can show that nothing is instantiated during training.
class GraphExec {
 public:
  GraphExec() = default;
  GraphExec(cudaGraph_t graph, int device) : device_(device) {
    DeviceGuard guard(device);
    LENET_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph, 0));
    ++instantiations();
  }
  ~GraphExec() {
    if (exec_ == nullptr) return;
    QuietDeviceGuard guard(device_);
    cudaGraphExecDestroy(exec_);
  }
  GraphExec(GraphExec&& o) noexcept { *this = std::move(o); }
  GraphExec& operator=(GraphExec&& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(exec_, o.exec_);
    return *this;
  }
  void upload(cudaStream_t stream) const {
    DeviceGuard guard(device_);
    LENET_CUDA_CHECK(cudaGraphUpload(exec_, stream));
  }
  void launch(cudaStream_t stream) const { LENET_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }
  // Instantiations in this process so far.
  static long long& instantiations() {
    static long long count = 0;
    return count;
  }

 private:
  int device_ = -1;
  cudaGraphExec_t exec_ = nullptr;
};

// Captures the work enqueued on `origin` (and on streams it forks to through events, which must join
// back) between construction and finish(). A capture left unfinished by an exception is ended and
// its graph discarded.
class Capture {
 public:
  explicit Capture(const Stream& origin) : origin_(origin) {
    DeviceGuard guard(origin.device());
    LENET_CUDA_CHECK(cudaStreamBeginCapture(origin.get(), cudaStreamCaptureModeThreadLocal));
    active_ = true;
  }
  ~Capture() {
    if (!active_) return;
    QuietDeviceGuard guard(origin_.device());
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(origin_.get(), &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  GraphExec finish() {
    DeviceGuard guard(origin_.device());
    cudaGraph_t graph = nullptr;
    active_ = false;
    const cudaError_t ended = cudaStreamEndCapture(origin_.get(), &graph);
    if (ended != cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);  // an earlier launch's error, say
    check_cuda(ended, "cudaStreamEndCapture", __FILE__, __LINE__);
    GraphExec exec;
    try {
      exec = GraphExec(graph, origin_.device());
    } catch (...) {
      cudaGraphDestroy(graph);
      throw;
    }
    LENET_CUDA_CHECK(cudaGraphDestroy(graph));
    return exec;
  }

 private:
  const Stream& origin_;
  bool active_ = false;
};

}  // namespace lenet::cuda
