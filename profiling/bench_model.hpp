// The arithmetic behind lenet-bench, in plain C++ so the tests check it without a GPU: busy and idle
// time from kernel intervals, bandwidth by the nccl-tests definitions, the floating-point floor of an
// epoch, an alpha-beta projection of multi-GPU epochs, and the table writers.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace lenet::profiling {

// One kernel's execution on a device, in nanoseconds on CUPTI's clock.
struct Interval {
  uint64_t start = 0, end = 0;
  uint32_t device = 0;
};

struct BusyIdle {
  double kernel_seconds = 0;  // sum of kernel durations (overlapping kernels count twice)
  double busy_seconds = 0;    // union of kernel intervals, summed over devices
  double idle_seconds = 0;    // per device: from its first kernel start to its last kernel end, minus busy
};
BusyIdle busy_and_idle(std::vector<Interval> kernels);
// The time during which at least one of the intervals runs, on whichever device (the union of all).
double union_seconds(std::vector<Interval> intervals);

// A kernel with the time its launch was called on the host (the API record with the same CUPTI
// correlation id) or, for a kernel a graph ran, the graph and node it belongs to.
struct LaunchedKernel {
  Interval run;
  uint64_t launched = 0;
  uint32_t graph = 0;  // 0: launched directly
  uint64_t graph_node = 0;
};

// CUPTI's kernel records with their correlation ids, joined to the start of the runtime or driver call
// with the same id (`api_start`, id -> start) into `launched`. A graph's kernels are kept as they are
// (they are placed by node, below); a kernel outside graphs whose call CUPTI did not record is left out
// and counted in `unplaced`. The kernels keep their order.
struct JoinedLaunches {
  std::vector<LaunchedKernel> launched;
  size_t unplaced = 0;
};
JoinedLaunches join_launches(const std::vector<std::pair<uint32_t, LaunchedKernel>>& kernels,
                             const std::unordered_map<uint32_t, uint64_t>& api_start);

// Busy and idle time per training step. A kernel launched directly belongs to the step during whose
// host call it was launched (step k's call starts at step_starts[k], on CUPTI's clock); kernels launched
// before the first step are left out. A graph's kernels are not matched to their launch by correlation
// id: CUPTI before 13.1 Update 1 gives graph launches wrong ids in every tracing session after the first
// (its release notes). Every step launches one graph instead, replays run one after another (each
// graph is one unit of work on its launch stream), and a node runs once per replay of its graph: the
// j-th run of a node is its graph's j-th replay, and the i-th replay to start is step i. Throws
// std::runtime_error when the graph kernels make another number of replays than there are steps.
std::vector<BusyIdle> per_step_busy_idle(const std::vector<LaunchedKernel>& kernels,
                                         const std::vector<uint64_t>& step_starts);

// nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time; for allreduce busbw = algbw * 2 (n - 1) / n,
// the bandwidth each link must sustain, comparable across replica counts.
double algbw(double bytes, double seconds);
double allreduce_busbw(double algbw, int ranks);

// FP32 lanes per SM for a compute capability (CUDA C Programming Guide, arithmetic instruction
// throughput table), 0 when unknown. Peak FP32 = SMs * lanes * 2 (FMA) * clock.
int fp32_lanes_per_sm(int major, int minor);
double peak_fp32_flops(int sms, int lanes_per_sm, double clock_hz);

// The alpha-beta model of a ring allreduce over R GPUs: 2(R-1) steps, each a latency alpha plus a chunk
// of bytes / R at link bandwidth beta: 2(R-1) * alpha + 2(R-1)/R * bytes / beta. Zero for R = 1.
double ring_allreduce_seconds(int replicas, double bytes, double alpha_seconds, double beta_bytes_per_second);

// A projected epoch: each step computes on every GPU in parallel (step_compute_seconds, measured on one
// GPU for that GPU's rows) and then allreduces the gradient; the graph mode does not overlap the two.
double projected_epoch_seconds(double steps_per_epoch, double step_compute_seconds, int replicas, double bytes,
                               double alpha_seconds, double beta_bytes_per_second);

// One row of the comparison table (lenet-bench and the PyTorch peers write the same fields). Missing
// measurements are absent (null in JSON, "-" in Markdown).
struct BenchRow {
  std::string name, impl, mode;
  int replicas = 0;
  std::vector<std::string> devices;
  int batch_size = 0;
  double lr = 0;
  int epochs = 0;
  int64_t train_examples = 0;  // the training set an epoch went over; 0: not recorded (older rows)
  std::optional<double> seconds_per_epoch, examples_per_second, kernel_ms_per_step, idle_ms_per_step,
      host_enqueue_ms_per_step, kernel_launches_per_step, graph_launches_per_step, allreduce_ms_per_step, test_acc;
  std::vector<double> test_acc_per_epoch, epoch_seconds;
  // Half the range of the timed epochs' seconds over their mean (0.012: the epochs were within ±1.2 % of
  // the mean), from two timed epochs or more; nullopt for one, or a row from before the field.
  std::optional<double> seconds_per_epoch_spread;
};

// seconds_per_epoch_spread of these epochs' seconds; nullopt for fewer than two.
std::optional<double> epoch_spread(const std::vector<double>& seconds);

nlohmann::json to_json(const BenchRow& row);
BenchRow row_from_json(const nlohmann::json& j);  // throws std::runtime_error naming the missing field

// Why a peer's row does not compare with this run's (another training-set size, batch size or learning
// rate; a size it does not record is unknown), as a note for under the table; empty when it does.
// A lenet-bench row's name: "graph R=2".
inline std::string row_name(const std::string& mode, int replicas) { return mode + " R=" + std::to_string(replicas); }

std::string peer_mismatch(const BenchRow& peer, int64_t train_examples, int batch_size, double lr);

// The table, each row's seconds per epoch with its spread and as a ratio to the reference row (the first
// row named `reference`, when present).
std::string markdown_table(const std::vector<BenchRow>& rows, const std::string& reference);

}  // namespace lenet::profiling
