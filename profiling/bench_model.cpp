#include "profiling/bench_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "engine/numbers.hpp"
#include "engine/output_file.hpp"

namespace lenet::profiling {

BusyIdle busy_and_idle(std::vector<Interval> kernels) {
  BusyIdle r;
  std::sort(kernels.begin(), kernels.end(), [](const Interval& a, const Interval& b) {
    return a.device != b.device ? a.device < b.device : a.start < b.start;
  });
  size_t i = 0;
  while (i < kernels.size()) {
    const uint32_t device = kernels[i].device;
    const uint64_t first = kernels[i].start;
    uint64_t last = kernels[i].end, busy = 0, run_start = kernels[i].start, run_end = kernels[i].end;
    for (; i < kernels.size() && kernels[i].device == device; ++i) {
      const Interval& k = kernels[i];
      r.kernel_seconds += double(k.end - k.start) * 1e-9;
      last = std::max(last, k.end);
      if (k.start > run_end) {  // a gap: close the current run of overlapping kernels
        busy += run_end - run_start;
        run_start = k.start;
        run_end = k.end;
      } else {
        run_end = std::max(run_end, k.end);
      }
    }
    busy += run_end - run_start;
    r.busy_seconds += double(busy) * 1e-9;
    r.idle_seconds += double(last - first - busy) * 1e-9;
  }
  return r;
}

double union_seconds(std::vector<Interval> intervals) {
  for (Interval& i : intervals) i.device = 0;
  return busy_and_idle(std::move(intervals)).busy_seconds;
}

JoinedLaunches join_launches(const std::vector<std::pair<uint32_t, LaunchedKernel>>& kernels,
                             const std::unordered_map<uint32_t, uint64_t>& api_start) {
  JoinedLaunches out;
  for (const auto& [correlation, kernel] : kernels) {
    LaunchedKernel k = kernel;
    if (k.graph == 0) {
      const auto api = api_start.find(correlation);
      if (api == api_start.end()) {
        ++out.unplaced;
        continue;
      }
      k.launched = api->second;
    }
    out.launched.push_back(k);
  }
  return out;
}

std::vector<BusyIdle> per_step_busy_idle(const std::vector<LaunchedKernel>& kernels,
                                         const std::vector<uint64_t>& step_starts) {
  std::vector<std::vector<Interval>> by_step(step_starts.size());
  std::vector<const LaunchedKernel*> graph_kernels;
  for (const LaunchedKernel& k : kernels) {
    if (k.graph != 0) {
      graph_kernels.push_back(&k);
      continue;
    }
    const auto after = std::upper_bound(step_starts.begin(), step_starts.end(), k.launched);
    if (after == step_starts.begin()) continue;
    by_step[size_t(after - step_starts.begin()) - 1].push_back(k.run);
  }
  std::sort(graph_kernels.begin(), graph_kernels.end(),
            [](const LaunchedKernel* a, const LaunchedKernel* b) { return a->run.start < b->run.start; });
  std::map<std::pair<uint32_t, uint64_t>, size_t> node_runs;  // (graph, node) -> runs so far
  std::map<std::pair<uint32_t, size_t>, size_t> replays;      // (graph, run number) -> its rank by first start
  for (const LaunchedKernel* k : graph_kernels) {
    const size_t run = node_runs[{k->graph, k->graph_node}]++;
    const size_t replay = replays.try_emplace({k->graph, run}, replays.size()).first->second;
    if (replay < by_step.size()) by_step[replay].push_back(k->run);
  }
  if (!replays.empty() && replays.size() != by_step.size())
    throw std::runtime_error("the graphs' kernels make " + std::to_string(replays.size()) + " replays for " +
                             std::to_string(by_step.size()) + " steps");
  for (const auto& [node, runs] : node_runs) {
    const size_t first = node_runs.lower_bound({node.first, 0})->second;
    if (runs != first)
      throw std::runtime_error("graph " + std::to_string(node.first) + ": one node ran " + std::to_string(first) +
                               " times, another " + std::to_string(runs));
  }
  std::vector<BusyIdle> out;
  for (auto& step : by_step) out.push_back(busy_and_idle(std::move(step)));
  return out;
}

double algbw(double bytes, double seconds) { return bytes / seconds; }

double allreduce_busbw(double algbw, int ranks) { return algbw * 2.0 * (ranks - 1) / ranks; }

int fp32_lanes_per_sm(int major, int minor) {
  switch (major) {
    case 6: return minor == 0 ? 64 : 128;
    case 7: return 64;                        // Volta, Turing
    case 8: return minor == 0 ? 64 : 128;     // A100: 64; GA10x and Ada: 128
    case 9: return 128;                       // Hopper
    case 10:
    case 12: return 128;                      // Blackwell
    default: return 0;
  }
}

double peak_fp32_flops(int sms, int lanes_per_sm, double clock_hz) { return double(sms) * lanes_per_sm * 2.0 * clock_hz; }

double ring_allreduce_seconds(int replicas, double bytes, double alpha_seconds, double beta_bytes_per_second) {
  if (replicas <= 1) return 0.0;
  const double steps = 2.0 * (replicas - 1);
  return steps * alpha_seconds + steps / replicas * bytes / beta_bytes_per_second;
}

double projected_epoch_seconds(double steps_per_epoch, double step_compute_seconds, int replicas, double bytes,
                               double alpha_seconds, double beta_bytes_per_second) {
  return steps_per_epoch *
         (step_compute_seconds + ring_allreduce_seconds(replicas, bytes, alpha_seconds, beta_bytes_per_second));
}

namespace {

nlohmann::json opt(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

// A number of a row (from a file of the peers): finite and within [lo, hi], a whole number where
// `whole`. Anything else is an error naming the field, never a value converted out of its type's range.
double get_number(const nlohmann::json& j, const char* key, double lo, double hi, bool whole) {
  const nlohmann::json& v = j.at(key);
  const double d = v.is_number() ? v.get<double>() : std::nan("");
  if (!(d >= lo && d <= hi) || (whole && d != std::floor(d))) {
    throw std::runtime_error(std::string("\"") + key + "\" is " + v.dump() + ", not " + (whole ? "an integer" : "a number") +
                             " from " + engine::format_double(lo) + " to " + engine::format_double(hi));
  }
  return d;
}

// A measurement: null where the row has none, else a number from 0 to `hi`.
std::optional<double> get_opt(const nlohmann::json& j, const char* key,
                              double hi = std::numeric_limits<double>::max()) {
  if (!j.contains(key)) throw std::runtime_error(std::string("benchmark row without \"") + key + "\"");
  if (j.at(key).is_null()) return std::nullopt;
  return get_number(j, key, 0, hi, false);
}

// An optional list of numbers from 0 to `hi`, each checked as get_number does.
std::vector<double> get_list(const nlohmann::json& j, const char* key, double hi) {
  std::vector<double> out;
  if (!j.contains(key)) return out;
  if (!j.at(key).is_array()) throw std::runtime_error(std::string("\"") + key + "\" is not a list");
  for (const nlohmann::json& v : j.at(key)) out.push_back(get_number({{key, v}}, key, 0, hi, false));
  return out;
}

// A name shown in a Markdown table cell and in messages: printable, on one line (nothing one_line escapes).
std::string get_name(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  const std::string s = v.is_string() ? v.get<std::string>() : "";
  if (s.empty() || engine::one_line(s) != s)
    throw std::runtime_error(std::string("\"") + key + "\" is " + v.dump() + ", not a name on one line");
  return s;
}

// Fixed-point with `digits` decimals; from 1e12 on, 4 significant digits with an exponent.
std::string cell(const std::optional<double>& v, int digits) {
  if (!v) return "-";
  char buf[64];
  if (std::fabs(*v) >= 1e12) std::snprintf(buf, sizeof buf, "%.3e", *v);
  else std::snprintf(buf, sizeof buf, "%.*f", digits, *v);
  return buf;
}

// A table cell's text: '|' would end the cell.
std::string escape_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

nlohmann::json to_json(const BenchRow& r) {
  return {{"name", r.name},
          {"impl", r.impl},
          {"mode", r.mode},
          {"replicas", r.replicas},
          {"devices", r.devices},
          {"batch_size", r.batch_size},
          {"lr", r.lr},
          {"epochs", r.epochs},
          {"train_examples", r.train_examples},
          {"seconds_per_epoch", opt(r.seconds_per_epoch)},
          {"examples_per_second", opt(r.examples_per_second)},
          {"kernel_ms_per_step", opt(r.kernel_ms_per_step)},
          {"idle_ms_per_step", opt(r.idle_ms_per_step)},
          {"host_enqueue_ms_per_step", opt(r.host_enqueue_ms_per_step)},
          {"kernel_launches_per_step", opt(r.kernel_launches_per_step)},
          {"graph_launches_per_step", opt(r.graph_launches_per_step)},
          {"allreduce_ms_per_step", opt(r.allreduce_ms_per_step)},
          {"test_acc", opt(r.test_acc)},
          {"test_acc_per_epoch", r.test_acc_per_epoch},
          {"epoch_seconds", r.epoch_seconds},
          {"seconds_per_epoch_spread", opt(r.seconds_per_epoch_spread)}};
}

std::optional<double> epoch_spread(const std::vector<double>& seconds) {
  if (seconds.size() < 2) return std::nullopt;
  const auto [low, high] = std::minmax_element(seconds.begin(), seconds.end());
  const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / double(seconds.size());
  if (!(mean > 0)) return std::nullopt;
  return (*high - *low) / 2 / mean;
}

BenchRow row_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::runtime_error(std::string("a JSON ") + j.type_name() + ", not an object");
  for (const char* key : {"name", "impl", "mode", "replicas", "devices", "batch_size", "lr", "epochs"})
    if (!j.contains(key)) throw std::runtime_error(std::string("benchmark row without \"") + key + "\"");
  BenchRow r;
  r.name = get_name(j, "name");
  r.impl = get_name(j, "impl");
  r.mode = get_name(j, "mode");
  constexpr double kMostInt = std::numeric_limits<int>::max();
  r.replicas = static_cast<int>(get_number(j, "replicas", 1, 64, true));  // as lenet-bench and the peer go
  // One device per replica.
  const nlohmann::json& devices = j.at("devices");
  if (!devices.is_array() || devices.size() != size_t(r.replicas))
    throw std::runtime_error("\"devices\" is " + devices.dump() + ", not a list of one device per replica (" +
                             std::to_string(r.replicas) + ")");
  for (size_t i = 0; i < devices.size(); ++i) r.devices.push_back(get_name({{"devices", devices[i]}}, "devices"));
  r.batch_size = static_cast<int>(get_number(j, "batch_size", 1, kMostInt, true));
  r.lr = get_number(j, "lr", std::numeric_limits<double>::min(), std::numeric_limits<double>::max(), false);
  r.epochs = static_cast<int>(get_number(j, "epochs", 1, kMostInt, true));
  // 0: not recorded (a row from before the field).
  r.train_examples = j.contains("train_examples") ? static_cast<int64_t>(get_number(j, "train_examples", 0, 0x1p53, true)) : 0;
  r.seconds_per_epoch = get_opt(j, "seconds_per_epoch");
  r.examples_per_second = get_opt(j, "examples_per_second");
  r.kernel_ms_per_step = get_opt(j, "kernel_ms_per_step");
  r.idle_ms_per_step = get_opt(j, "idle_ms_per_step");
  r.host_enqueue_ms_per_step = get_opt(j, "host_enqueue_ms_per_step");
  r.kernel_launches_per_step = get_opt(j, "kernel_launches_per_step");
  r.graph_launches_per_step = get_opt(j, "graph_launches_per_step");
  r.allreduce_ms_per_step = get_opt(j, "allreduce_ms_per_step");
  r.test_acc = get_opt(j, "test_acc", 1);
  r.test_acc_per_epoch = get_list(j, "test_acc_per_epoch", 1);
  r.epoch_seconds = get_list(j, "epoch_seconds", std::numeric_limits<double>::max());
  // Every epoch that ran, where given.
  using List = std::pair<const char*, const std::vector<double>&>;
  for (const auto& [key, list] : {List{"test_acc_per_epoch", r.test_acc_per_epoch}, {"epoch_seconds", r.epoch_seconds}})
    if (!list.empty() && list.size() != size_t(r.epochs))
      throw std::runtime_error(std::string("\"") + key + "\" has " + std::to_string(list.size()) +
                               " entries, not one per epoch (" + std::to_string(r.epochs) + ")");
  if (r.test_acc && !r.test_acc_per_epoch.empty() && *r.test_acc != r.test_acc_per_epoch.back())
    throw std::runtime_error("\"test_acc\" is " + engine::format_double(*r.test_acc) + ", not the last epoch's (" +
                             engine::format_double(r.test_acc_per_epoch.back()) + ")");
  // Absent from rows made before it.
  if (j.contains("seconds_per_epoch_spread")) r.seconds_per_epoch_spread = get_opt(j, "seconds_per_epoch_spread");
  // A time or rate of 0 measures nothing (the table's ratios would divide by it), and a rate that is not
  // the training-set size over the time (to 1 %) belongs to another row.
  using Field = std::pair<const char*, const std::optional<double>&>;
  for (const auto& [key, v] : {Field{"seconds_per_epoch", r.seconds_per_epoch}, {"examples_per_second", r.examples_per_second}})
    if (v && *v == 0) throw std::runtime_error(std::string("\"") + key + "\" is 0, not a measurement");
  if (r.train_examples > 0 && r.seconds_per_epoch && r.examples_per_second) {
    const double expected = double(r.train_examples) / *r.seconds_per_epoch;
    if (std::abs(*r.examples_per_second - expected) > 0.01 * expected) {
      throw std::runtime_error("\"examples_per_second\" is " + engine::format_double(*r.examples_per_second) +
                               ", not \"train_examples\" over \"seconds_per_epoch\" (" +
                               engine::format_double(expected) + ")");
    }
  }
  return r;
}

std::string peer_mismatch(const BenchRow& peer, int64_t train_examples, int batch_size, double lr) {
  std::vector<std::string> differences;
  auto differs = [&](const std::string& theirs, const std::string& ours) {
    differences.push_back(theirs + " (this run: " + ours + ")");
  };
  if (peer.train_examples == 0) {
    differs("does not record its training-set size", std::to_string(train_examples));
  } else if (peer.train_examples != train_examples) {
    differs("ran on " + std::to_string(peer.train_examples) + " training examples", std::to_string(train_examples));
  }
  if (peer.batch_size != batch_size) differs("used batch " + std::to_string(peer.batch_size), std::to_string(batch_size));
  if (peer.lr != lr) differs("used lr " + engine::format_double(peer.lr), engine::format_double(lr));
  if (differences.empty()) return "";
  std::string note = "Note: " + peer.name;
  for (size_t i = 0; i < differences.size(); ++i) {
    note += i == 0 ? " " : i + 1 == differences.size() ? " and " : ", ";
    note += differences[i];
  }
  return note + ": its numbers do not compare with the others.\n";
}

std::string markdown_table(const std::vector<BenchRow>& rows, const std::string& reference) {
  std::optional<double> ref;
  for (const BenchRow& r : rows)
    if (r.name == reference) {
      ref = r.seconds_per_epoch;
      break;
    }
  std::ostringstream out;
  out << "| configuration | s/epoch | ± | examples/s | kernel ms/step | idle ms/step | host ms/step | kernels/step | "
         "graphs/step | allreduce ms/step | test acc | time vs " << escape_cell(reference) << " |\n";
  out << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const BenchRow& r : rows) {
    std::optional<double> ratio;
    if (ref && *ref > 0 && r.seconds_per_epoch && *r.seconds_per_epoch > 0) ratio = *r.seconds_per_epoch / *ref;
    const std::string spread = r.seconds_per_epoch_spread ? cell(*r.seconds_per_epoch_spread * 100, 1) + "%" : "-";
    out << "| " << escape_cell(r.name) << " | " << cell(r.seconds_per_epoch, 3) << " | " << spread << " | "
        << cell(r.examples_per_second, 0) << " | "
        << cell(r.kernel_ms_per_step, 3) << " | " << cell(r.idle_ms_per_step, 3) << " | "
        << cell(r.host_enqueue_ms_per_step, 3) << " | " << cell(r.kernel_launches_per_step, 1) << " | "
        << cell(r.graph_launches_per_step, 1) << " | " << cell(r.allreduce_ms_per_step, 3) << " | "
        << cell(r.test_acc, 4) << " | " << cell(ratio, 3) << " |\n";
  }
  return out.str();
}

}  // namespace lenet::profiling
