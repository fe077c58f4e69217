// GPU activity of a timed region from CUPTI's activity API: every kernel that ran (cuDNN's and cuBLAS's
// included, which counting our own launch calls would miss), the device-to-device and peer copies, and
// the graph launches. Only one trace may be active at a time in a process.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "profiling/bench_model.hpp"

namespace lenet::profiling {

struct Activity {
  std::vector<Interval> kernels;
  // The same kernels with their graph node, or with their host launch time where CUPTI recorded it.
  std::vector<LaunchedKernel> launched;
  size_t host_launched_kernels = 0;  // kernels not launched by a graph (graphId 0)
  size_t graph_launches = 0;         // cudaGraphLaunch calls
  // The allreduce's work: our add kernels plus device-to-device and peer copies (the only ones the
  // training step makes besides host-to-device input copies), each on the device that ran it.
  std::vector<Interval> allreduce;
  size_t dropped_records = 0;  // records CUPTI could not store: the counts above are then too low
  size_t untimed_records = 0;  // kernel and copy records without valid start and end: not in the times
  size_t unread_buffers = 0;   // buffers whose records could not be read to the end
  size_t unplaced_kernels = 0; // kernels outside graphs whose launch CUPTI did not record: not in `launched`
};

class CuptiTrace {
 public:
  // False when the build found no CUPTI; start() then throws and the bench leaves its columns empty.
  static bool available();
  // Why not, when not available or when CUPTI refused (e.g. a profiler already attached).
  static std::string unavailable_reason();
  // Subscribes to CUPTI (throws std::runtime_error where another tool holds it) and registers its
  // buffers. Call before any CUDA graph exists: starting CUPTI after graphs were
  // captured has been reported to fault (pytorch#75504). PyTorch's workaround runs a whole empty profiler
  // session before capturing (pytorch#100441); this only registers, and CUPTI is never torn down here
  // (its teardown and re-initialisation with graphs crashed before CUDA 12.6: pytorch#112507, #150957).
  static void prepare();
  // Throws std::runtime_error (with every activity kind disabled again) when CUPTI refuses.
  void start();
  // Flushes every buffer, then disables the activity kinds; throws std::runtime_error (with every kind
  // disabled) when CUPTI fails.
  Activity stop();
  static uint64_t now();  // CUPTI's clock, the one activity records are stamped with
};

}  // namespace lenet::profiling
