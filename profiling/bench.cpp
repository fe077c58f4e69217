// lenet-bench: the configurations asked for, in one process, on the same data and seed, side by side:
// seconds per epoch of the training pass (a warm-up epoch excluded), examples per second, GPU kernel and
// idle time per step and host launches per step (CUPTI, in a separate traced epoch so tracing does not
// slow the timed ones), host time to enqueue a step, allreduce time, final test accuracy and the ratio
// to the first row; then the arithmetic floor, the allreduce alone (ring versus the textbook's gather to
// replica 0) and a projection to several GPUs. Writes the tables as JSON and Markdown.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/cpu_backend.hpp"
#include "engine/cuda_probe.hpp"
#include "engine/gemm_kernels.hpp"
#include "engine/cli_checks.hpp"
#include "engine/numbers.hpp"
#include "engine/output_file.hpp"
#include "engine/read_file.hpp"
#include "engine/replace_file.hpp"
#include "engine/ring.hpp"
#include "engine/stop_signals.hpp"
#include "engine/strict_json.hpp"
#include "graphs/have_cuda.hpp"
#include "io/dataset.hpp"
#include "io/sampler.hpp"
#include "model/gemm.hpp"
#include "model/lenet.hpp"
#include "profiling/bench_model.hpp"
#include "profiling/cupti_trace.hpp"

#if LENET_HAVE_CUDA
#include "engine/cuda_graph_backend.hpp"
#include "engine/cuda_naive_backend.hpp"
#include "engine/cuda_ring.hpp"
#include "model/cuda_memory.hpp"
#endif

namespace {

using namespace lenet;
using Clock = std::chrono::steady_clock;

void say(const std::string& message) { engine::say("lenet-bench", message); }

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The first SIGINT, SIGTERM or SIGHUP stops the benchmark before its next timed step: the rows measured
// before it are shown and written, the row being measured is left out, and the status is 128 + the
// signal. A second one (engine::take_stop, as in lenet-train) ends the process at once.
// engine/stop_signals.hpp installs it.
engine::StopRecord g_stop;  // written by the handler of any thread (engine::take_stop)

extern "C" void on_stop_signal(int signal) {
  if (engine::take_stop(g_stop, signal)) {
    engine::remove_replacement_in_progress();  // a result file being written stays as it was
    static const char line[] = "lenet-bench: stopped at once by a second signal\n";
    [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, line, sizeof line - 1);
    _exit(128 + signal);
  }
}

// Whether the output `path` names is written by replacing it (replace_file): a regular file, or nothing
// yet, that neither stdout nor stderr writes. A reader of the file then finds the whole of a result, the
// previous one or the new; a second signal while it is written leaves the previous one.
bool replaced(const std::string& path) {
  return engine::standard_stream_of(path) == nullptr && !engine::other_than_regular_file(path);
}

// Why `path` cannot take an output, checked before the benchmark: what a replacement or a write needs.
std::string output_problem(const std::string& path) {
  return replaced(path) ? engine::replaced_file_problem(path) : engine::output_file_problem(path);
}

// Writes `text` to the output `path` names: a regular file is replaced, the file stdout or stderr
// writes goes through that stream, a pipe or a device is opened and written. "" or the problem.
std::string write_output(const std::string& path, const std::string& text) {
  if (replaced(path)) {
    const std::string failed = engine::replace_file(path, text.data(), text.size(), "file");
    return failed.empty() ? "" : path + ": " + failed;
  }
  std::ofstream file;
  std::ostream* stream = engine::standard_stream_of(path);
  if (stream == nullptr) {
    // A pipe's reader may have gone during the benchmark: the open would then wait for another.
    if (const engine::PipeWriteEnd pipe(path); !pipe.problem().empty()) return pipe.problem();
    errno = 0;
    file.open(path);
    if (const int err = errno; !file) return path + ": cannot open for writing" + engine::reason(err);
    stream = &file;
  }
  return engine::write_all(*stream, text, path);
}

// Thrown out of a timed epoch by a stop; not a std::exception, so that nothing on the way takes it for
// a failure.
struct Stopped {};

struct Options {
  std::vector<std::string> modes = LENET_HAVE_CUDA ? std::vector<std::string>{"naive", "graph"}
                                                   : std::vector<std::string>{"cpu"};  // what a build without CUDA has
  std::vector<int> replicas = {1, 2, 4};
  int batch_size = 256;
  double lr = 0.2;
  int timed_epochs = 2;
  uint64_t seed = 1;
  std::string seed_text = "1";
  std::string lr_text = "0.2";  // parsed into lr
  int num_gpus = 0;  // 0: all visible
  std::string data_dir, json_path, markdown_path;  // empty: not written
  long long train_limit = 0, test_limit = 0;
  bool no_allreduce = false, no_projection = false, no_trace = false;
  std::vector<int> allreduce_replicas = {2, 4, 8};
  std::vector<std::string> peers;
};

std::unique_ptr<engine::Backend> make_backend(const std::string& mode, int replicas, [[maybe_unused]] int num_gpus,
                                              [[maybe_unused]] const io::FashionMnist& data, const Options& o) {
  const std::vector<float> start = model::init_parameters<float>(o.seed);
  if (mode == "cpu") return std::make_unique<engine::CpuBackend>(replicas, start);
#if !LENET_HAVE_CUDA
  throw std::logic_error("lenet-bench: " + mode + " mode in a build without CUDA");
#else
  const engine::CudaPlacement p = engine::place(num_gpus, replicas, data.train.size(), data.test.size(), o.batch_size);
  if (mode == "naive") return std::make_unique<engine::CudaNaiveBackend>(p, start);
  return std::make_unique<engine::CudaGraphBackend>(p, start);
#endif
}

struct EpochRun {
  double seconds = 0, host_seconds = 0;
  size_t steps = 0;
};

// `step_starts`, when given, receives the CUPTI time at the start of every step's host call.
EpochRun run_epoch(engine::Backend& backend, const io::FashionMnist& data, const io::EpochSampler& sampler, int epoch,
                   float lr, std::vector<uint64_t>* step_starts = nullptr) {
  const std::vector<uint32_t> order = sampler.epoch_order(uint64_t(epoch));
  EpochRun r;
  const Clock::time_point t0 = Clock::now();
  for (size_t k = 0; k < sampler.num_batches(); ++k) {
    if (g_stop.signal != 0 && step_starts == nullptr) throw Stopped{};  // a traced epoch runs on, to stop CUPTI
    const io::BatchRange batch = sampler.batch(k);
    if (step_starts) step_starts->push_back(profiling::CuptiTrace::now());
    const Clock::time_point h0 = Clock::now();
    backend.train_step(data.train, order.data() + batch.first, int(batch.rows), lr);
    r.host_seconds += seconds(Clock::now() - h0);
    ++r.steps;
  }
  backend.synchronize();
  r.seconds = seconds(Clock::now() - t0);
  return r;
}

profiling::BenchRow bench_config(const std::string& mode, int replicas, int num_gpus, const io::FashionMnist& data,
                                 const Options& o, nlohmann::json* timeline = nullptr) {
  std::unique_ptr<engine::Backend> backend = make_backend(mode, replicas, num_gpus, data, o);
  const io::EpochSampler sampler(data.train.size(), size_t(o.batch_size), o.seed, true);
  profiling::BenchRow row;
  row.name = profiling::row_name(mode, replicas);
  row.impl = "lenet-dp";
  row.mode = mode;
  row.replicas = replicas;
  row.devices = backend->devices();
  row.batch_size = o.batch_size;
  row.lr = o.lr;
  row.train_examples = int64_t(data.train.size());
  const bool traced = !o.no_trace && mode != "cpu";  // no_trace is set where CUPTI is unavailable
  int epoch = 0;  // epochs trained
  // After every epoch: a diverged run's times and accuracy would mean nothing.
  auto evaluate = [&] {
    if (!engine::all_finite(backend->parameters(0)))
      throw std::runtime_error("the parameters became non-finite in epoch " + std::to_string(epoch) +
                               "; try a smaller --lr");
    row.test_acc_per_epoch.push_back(double(backend->count_correct(data.test, o.batch_size)) / double(data.test.size()));
  };
  // epoch_seconds and test_acc_per_epoch have every epoch that ran (warm-up, timed, traced), as a peer's do.
  row.epoch_seconds.push_back(run_epoch(*backend, data, sampler, epoch++, float(o.lr)).seconds);  // warm-up:
  evaluate();  // first-touch, lazy library set-up
  double total = 0, host = 0;
  size_t steps = 0;
  for (int e = 0; e < o.timed_epochs; ++e) {
    const EpochRun r = run_epoch(*backend, data, sampler, epoch++, float(o.lr));
    row.epoch_seconds.push_back(r.seconds);
    total += r.seconds;
    host += r.host_seconds;
    steps += r.steps;
    evaluate();
  }
  row.seconds_per_epoch = total / o.timed_epochs;
  row.seconds_per_epoch_spread = profiling::epoch_spread({row.epoch_seconds.begin() + 1, row.epoch_seconds.end()});
  row.examples_per_second = double(data.train.size()) / *row.seconds_per_epoch;
  row.host_enqueue_ms_per_step = host / double(steps) * 1e3;
  // One more epoch traced with CUPTI, for the columns it fills; a failure leaves them empty.
  if (traced) [&] {
    auto untraced = [&](const std::string& why) {
      say(why + "; the traced columns of " + row.name + " stay empty");
    };
    profiling::CuptiTrace trace;
    std::vector<uint64_t> step_starts;
    try {
      trace.start();
    } catch (const std::exception& e) {
      return untraced(std::string("CUPTI refused (") + e.what() + ")");
    }
    const EpochRun r = [&] {
      try {
        return run_epoch(*backend, data, sampler, epoch++, float(o.lr), &step_starts);
      } catch (...) {  // a failure (a traced epoch is not stopped by a signal): the tracing ends too
        try {
          trace.stop();
        } catch (const std::exception&) {
        }
        throw;
      }
    }();
    row.epoch_seconds.push_back(r.seconds);
    profiling::Activity a;
    std::string failure;
    try {
      a = trace.stop();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    evaluate();
    if (!failure.empty()) return untraced("CUPTI failed (" + failure + ")");
    // E.g. a graph's kernels not traced: empty columns rather than zeros that mislead.
    if (a.kernels.empty()) return untraced("CUPTI recorded no kernels");
    std::string lost;
    for (const auto& [count, what] : {std::pair{a.dropped_records, " records dropped"},
                                      std::pair{a.untimed_records, " records without valid times"},
                                      std::pair{a.unread_buffers, " buffers not read to the end"},
                                      std::pair{a.unplaced_kernels, " kernels without their launch (not in the timeline)"}})
      if (count > 0) lost += (lost.empty() ? "" : ", ") + std::to_string(count) + what;
    if (!lost.empty()) say("CUPTI: " + lost + "; " + row.name + "'s traced numbers leave these out");
    if (timeline != nullptr) {
      try {  // per step: busy time (overlapping kernels count once) and idle time, for plot.py
        nlohmann::json steps = nlohmann::json::array();
        const std::vector<profiling::BusyIdle> per_step = profiling::per_step_busy_idle(a.launched, step_starts);
        for (size_t k = 0; k < per_step.size(); ++k)
          steps.push_back({{"step", k}, {"busy_ms", per_step[k].busy_seconds * 1e3},
                           {"idle_ms", per_step[k].idle_seconds * 1e3}});
        *timeline = {{"mode", mode}, {"replicas", replicas}, {"batch_size", o.batch_size}, {"steps", steps}};
      } catch (const std::runtime_error& e) {
        say("no timeline for " + row.name + ": " + e.what());
      }
    }
    const profiling::BusyIdle bi = profiling::busy_and_idle(a.kernels);
    const double n = double(r.steps);
    row.kernel_ms_per_step = bi.kernel_seconds / n * 1e3;
    row.idle_ms_per_step = bi.idle_seconds / n * 1e3;
    row.kernel_launches_per_step = double(a.host_launched_kernels) / n;
    row.graph_launches_per_step = double(a.graph_launches) / n;
    // Copies and add kernels running at once (the ring's replicas, on one GPU or several) count once.
    row.allreduce_ms_per_step = profiling::union_seconds(a.allreduce) / n * 1e3;
  }();
  row.epochs = int(row.test_acc_per_epoch.size());  // every epoch that ran: warm-up, timed, traced
  row.test_acc = row.test_acc_per_epoch.back();
  return row;
}

#if LENET_HAVE_CUDA
// The allreduce alone: R members sharing the visible GPUs, ring (captured, as graph mode runs it) and
// textbook (synchronous gather to member 0 and copy back, as naive mode runs it). Each row goes to `out`
// and `rows` as it is measured, so that the rows before a failure are kept in both.
void bench_allreduce(const Options& o, int num_gpus, std::ostream& out, nlohmann::json& rows) {
  std::vector<size_t> sizes;
  for (size_t bytes = 4096; bytes <= (size_t{64} << 20); bytes *= 4) sizes.push_back(bytes);
  sizes.push_back(model::kNumParameters * sizeof(float));
  std::sort(sizes.begin(), sizes.end());
  auto synchronize_gpus = [num_gpus] {
    for (int g = 0; g < num_gpus; ++g) {
      cuda::DeviceGuard guard(g);
      LENET_CUDA_CHECK(cudaDeviceSynchronize());
    }
  };
  rows = nlohmann::json::array();
  out << "\nAllreduce alone (" << num_gpus << " GPU" << (num_gpus == 1 ? "" : "s")
      << "; members share them round-robin; busbw = algbw * 2(R-1)/R as in nccl-tests)\n\n"
      << "| R | bytes | ring us | ring algbw GB/s | ring busbw GB/s | textbook us | textbook busbw GB/s |\n"
      << "|---|---|---|---|---|---|---|\n";
  std::string unmeasured;  // the replica counts whose ring had no peer access
  for (int r : o.allreduce_replicas) {
    std::vector<int> devices;
    for (int i = 0; i < r; ++i) devices.push_back(i % num_gpus);
    // The rows before may not have enabled peer access for this placement's pairs (cuda:7 and cuda:0 for
    // R = 8 on 8 GPUs), so it is enabled here.
    const std::string no_peer = engine::enable_ring_peer_access(devices);
    if (!no_peer.empty())
      unmeasured += (unmeasured.empty() ? "" : "; ") + ("R = " + std::to_string(r) + ": no peer access between " + no_peer);
    for (size_t bytes : sizes) {
      const size_t count = bytes / sizeof(float);
      std::vector<cuda::DeviceBuffer<float>> buffers, receives;
      std::vector<cuda::Stream> streams;
      std::vector<cuda::Event> events, joins;
      std::vector<engine::RingMember> members;
      for (const int dev : devices) {
        buffers.emplace_back(dev, count);
        receives.emplace_back(dev, count);
        streams.emplace_back(dev);
        events.emplace_back(dev);
        joins.emplace_back(dev);
        cuda::DeviceGuard guard(dev);
        LENET_CUDA_CHECK(cudaMemset(buffers.back().get(), 0, bytes));
      }
      synchronize_gpus();  // the memsets ran on the legacy streams, the ring runs on ours
      for (int i = 0; i < r; ++i)
        members.push_back({devices[size_t(i)], buffers[size_t(i)].get(), receives[size_t(i)].get(), streams[size_t(i)].get(),
                           events[size_t(i)].get()});
      const int reps = bytes >= (size_t{16} << 20) ? 5 : 50;
      nlohmann::json ring_s, ring_alg, ring_bus;  // null where the ring is not measured
      char ring_cells[96] = "| - | - | - ";  // as the main table's empty cells
      if (no_peer.empty()) {
        const engine::RingSchedule schedule(r, count);
        cuda::Event fork(0);
        cuda::GraphExec ring;
        {
          cuda::Capture capture(streams[0]);
          fork.record(streams[0].get());
          for (int i = 1; i < r; ++i) fork.wait_on(streams[size_t(i)].get());
          for (int i = 0; i < r; ++i) events[size_t(i)].record(streams[size_t(i)].get());
          engine::enqueue_ring_allreduce(schedule, members);
          for (int i = 1; i < r; ++i) {
            joins[size_t(i)].record(streams[size_t(i)].get());
            joins[size_t(i)].wait_on(streams[0].get());
          }
          ring = capture.finish();
        }
        ring.launch(streams[0].get());  // warm-up
        LENET_CUDA_CHECK(cudaStreamSynchronize(streams[0].get()));
        const Clock::time_point t0 = Clock::now();
        for (int k = 0; k < reps; ++k) ring.launch(streams[0].get());
        LENET_CUDA_CHECK(cudaStreamSynchronize(streams[0].get()));
        const double secs = seconds(Clock::now() - t0) / reps, alg = profiling::algbw(double(bytes), secs),
                     bus = profiling::allreduce_busbw(alg, r);
        std::snprintf(ring_cells, sizeof ring_cells, "| %.1f | %.2f | %.2f ", secs * 1e6, alg * 1e-9, bus * 1e-9);
        ring_s = secs;
        ring_alg = alg;
        ring_bus = bus;
      }
      engine::textbook_allreduce(members, 0, count);  // warm-up
      synchronize_gpus();
      const Clock::time_point t0 = Clock::now();
      for (int k = 0; k < reps; ++k) engine::textbook_allreduce(members, 0, count);
      synchronize_gpus();
      const double book_s = seconds(Clock::now() - t0) / reps;
      const double book_alg = profiling::algbw(double(bytes), book_s);
      rows.push_back({{"replicas", r}, {"bytes", bytes}, {"ring_seconds", ring_s}, {"ring_algbw", ring_alg},
                      {"ring_busbw", ring_bus}, {"textbook_seconds", book_s},
                      {"textbook_algbw", book_alg}, {"textbook_busbw", profiling::allreduce_busbw(book_alg, r)}});
      char line[256];
      std::snprintf(line, sizeof line, "| %d | %zu %s| %.1f | %.2f |\n", r, bytes, ring_cells, book_s * 1e6,
                    profiling::allreduce_busbw(book_alg, r) * 1e-9);
      out << line;
    }
  }
  if (!unmeasured.empty())  // the textbook's copies go through the host where peers cannot reach
    out << "\nRing not measured (graph mode refuses such a ring): " << unmeasured << ".\n";
}

// Seconds of one graph-mode step of a single replica with `rows` rows: the per-GPU compute of a
// multi-GPU step, measured on this GPU.
double graph_step_seconds(int rows, const io::FashionMnist& data, const Options& o) {
  Options one = o;
  one.batch_size = rows;
  one.timed_epochs = 1;
  one.no_trace = true;
  const profiling::BenchRow r = bench_config("graph", 1, 1, data, one);
  const double steps = std::ceil(double(data.train.size()) / rows);
  return *r.seconds_per_epoch / steps;
}

// Links of the projection, with where their figures come from (printed with the table).
struct Link {
  const char* name;
  double alpha, beta;  // seconds, bytes per second
  const char* source;
};
constexpr Link kLinks[] = {
    {"NVLink (H100/H200)", 2e-6, 370e9, "one-way peer writes and peer latency measured by others on H100"},
    {"PCIe 5.0 x16", 5e-6, 50e9,
     "64 GB/s per direction by the specification, about 50 achieved; latency through the root complex, "
     "as typically published"}};

// measured_step_latency: none where no ring of two members was measured (the sweep skipped by
// --no-allreduce or a stop, --allreduce-replicas without 2, two GPUs without peer access); it is then
// taken as 0 and the text says so.
nlohmann::json project(const io::FashionMnist& data, const Options& o, std::optional<double> measured_step_latency,
                       std::ostream& md) {
  const double bytes = double(model::kNumParameters * sizeof(float));
  const double n = double(data.train.size());
  // The largest share of a minibatch split over r GPUs, as the engine splits it (every GPU waits for it).
  auto rows_per_gpu = [&o](int r) { return std::max(1, engine::split_rows(o.batch_size, r)[0].rows); };
  std::map<int, double> step;  // rows per GPU -> measured seconds per step
  for (int r : {1, 2, 4, 8})
    if (const int share = rows_per_gpu(r); !step.count(share)) step[share] = graph_step_seconds(share, data, o);
  nlohmann::json rows = nlohmann::json::array();
  md << "\nProjection to several GPUs (a model, not a measurement): per-GPU step compute measured here in graph "
        "mode on one GPU, plus a ring allreduce of " << size_t(bytes) << " bytes by the alpha-beta model "
        "2(R-1)*alpha + 2(R-1)/R*bytes/beta, alpha = link latency + the ring's per-step latency (";
  if (measured_step_latency)
    md << "measured here: " << *measured_step_latency * 1e6 << " us";
  else
    md << "not measured: no ring of two members was measured; taken as 0";
  md << "); no overlap of compute and allreduce, as in the graph mode. Links:";
  for (const Link& link : kLinks)
    md << (&link == kLinks ? " " : "; ") << link.name << ", latency " << link.alpha * 1e6 << " us, "
       << link.beta / 1e9 << " GB/s (" << link.source << ")";
  md << ".\n\n"
     << "| link | R | s/epoch, batch " << o.batch_size << " per step | s/epoch, batch " << o.batch_size
     << " per GPU |\n|---|---|---|---|\n";
  for (const Link& link : kLinks) {
    for (int r : {1, 2, 4, 8}) {
      const double alpha = link.alpha + measured_step_latency.value_or(0);
      const double per_step = profiling::projected_epoch_seconds(std::ceil(n / o.batch_size), step[rows_per_gpu(r)], r,
                                                                 bytes, alpha, link.beta);
      const double per_gpu = profiling::projected_epoch_seconds(std::ceil(n / (double(o.batch_size) * r)),
                                                                step[o.batch_size], r, bytes, alpha, link.beta);
      rows.push_back({{"link", link.name}, {"link_source", link.source}, {"alpha", alpha}, {"beta", link.beta},
                      {"replicas", r}, {"seconds_per_epoch_fixed_global_batch", per_step},
                      {"seconds_per_epoch_fixed_batch_per_gpu", per_gpu}});
      char line[200];
      std::snprintf(line, sizeof line, "| %s | %d | %.3f | %.3f |\n", link.name, r, per_step, per_gpu);
      md << line;
    }
  }
  return rows;
}
#endif  // LENET_HAVE_CUDA

}  // namespace

int main(int argc, char** argv) {
  engine::use_gemm_kernels_fitting_this_cpu(argv);
  engine::prepare_output();
  Options o;
  CLI::App app{"lenet-bench: naive and graph modes (and the CPU backend) side by side, with CUPTI counts", "lenet-bench"};
  app.add_option("--modes", o.modes, "Any of naive, graph, cpu")
      ->delimiter(',')->check(CLI::IsMember({"naive", "graph", "cpu"}))->capture_default_str();
  app.add_option("--replicas", o.replicas, "Replica counts, e.g. 1,2,4")
      ->delimiter(',')->check(engine::decimal(1, 64))->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Global minibatch size")
      ->check(engine::decimal(1, 1 << 20))->capture_default_str();
  app.add_option("--lr", o.lr_text, "SGD learning rate (> 0, a float32)")->capture_default_str()->type_name("FLOAT");
  app.add_option("--epochs", o.timed_epochs,
                 "Timed epochs per configuration, after one warm-up epoch (a row's \"epochs\" counts every epoch trained)")
      ->check(engine::decimal(1, 1000))->capture_default_str();
  app.add_option("--seed", o.seed_text, "Seed of the parameters and the shuffles (0..2^64-1)")
      ->capture_default_str()->type_name("INT");
  app.add_option("--num-gpus", o.num_gpus, "GPUs 0..N-1 to place replicas on (default: all visible)")
      ->check(engine::decimal(1, 64));
  app.add_option("--data-dir", o.data_dir, std::string("Fashion-MNIST folder (default: $LENET_DATA_DIR, else ") +
                                               io::kDefaultDataDir + ")")->type_name("DIR");
  app.add_option("--train-limit", o.train_limit, "First N training examples")
      ->check(engine::decimal(1LL, 60000LL));
  app.add_option("--test-limit", o.test_limit, "First N test examples")
      ->check(engine::decimal(1LL, 10000LL));
  app.add_option("--json", o.json_path, "Write the results as JSON to FILE, and each traced configuration's per-step "
                                        "timeline beside it (timeline-MODE-rR.json; not for a pipe or device; -: stdout)")
      ->type_name("FILE");
  app.add_option("--markdown", o.markdown_path, "Write the tables as Markdown to FILE (-: stdout)")->type_name("FILE");
  app.add_option("--allreduce-replicas", o.allreduce_replicas, "Replica counts of the allreduce sweep")
      ->delimiter(',')->check(engine::decimal(2, 64))->capture_default_str();
  app.add_flag("--no-allreduce", o.no_allreduce, "Skip the allreduce sweep");
  app.add_flag("--no-projection", o.no_projection, "Skip the multi-GPU projection");
  app.add_flag("--no-trace", o.no_trace, "No CUPTI epoch (kernel, idle, launch and allreduce columns stay empty)");
  app.add_option("--peers", o.peers, "JSON rows of the PyTorch peers (profiling/peers) to add to the table")
      ->type_name("FILE");
  app.set_version_flag("--version", [] {  // a function: cuBLAS is opened only for --version
    return std::string("lenet-bench ") + LENET_VERSION + " (" + engine::cuda_library_versions() + "; " +
           model::gemm_description() + ")";
  });
  if (const std::string problem = engine::option_without_value(app, argc, argv); !problem.empty()) {
    say(problem);
    return 2;
  }
  std::string parse_error;  // said after an empty value, which a check may have refused first
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    const std::string failed = engine::print_help_or_version(app, e);
    if (!failed.empty()) say("error: " + failed);
    return failed.empty() ? 0 : 1;
  } catch (const CLI::ParseError& e) {
    parse_error = engine::parse_error_text(e, argc, argv);
  }
  if (const std::string flag = engine::option_with_empty_value(app); !flag.empty() || !parse_error.empty()) {
    say(flag.empty() ? parse_error + " (see --help)" : flag + ": empty value");
    return 2;
  }
  engine::dash_is_stdout(o.json_path);
  engine::dash_is_stdout(o.markdown_path);
  // A configuration or peer named twice (a repeated flag adds to the list) is measured and shown once.
  auto unique = [](auto& list) {
    for (auto it = list.begin(); it != list.end();)
      it = std::find(list.begin(), it, *it) != it ? list.erase(it) : it + 1;
  };
  unique(o.modes);
  unique(o.replicas);
  unique(o.allreduce_replicas);
  unique(o.peers);
  // The same file under two names (peer.json, ./peer.json) too.
  for (auto it = o.peers.begin(); it != o.peers.end();)
    it = std::any_of(o.peers.begin(), it, [&](const std::string& p) { return engine::same_file(p, *it); }) ? o.peers.erase(it)
                                                                                                      : it + 1;
  if (!engine::parse_seed(o.seed_text, o.seed)) {
    say("--seed " + o.seed_text + ": " + engine::kU64Rule);
    return 2;
  }
  if (!engine::parse_lr(o.lr_text, o.lr)) {
    say("--lr " + o.lr_text + ": " + engine::kFloat32PositiveRule);
    return 2;
  }
  if (!o.json_path.empty() && !o.markdown_path.empty() && engine::same_file(o.json_path, o.markdown_path)) {
    say("--json and --markdown name the same file " + o.json_path);
    return 2;
  }
  using Output = std::pair<const char*, const std::string&>;  // a flag and its file ("": not given)
  const Output outputs[] = {{"--json", o.json_path}, {"--markdown", o.markdown_path}};
  // A peer's row may be all that is left of a long GPU run: the results are not written over it.
  for (const auto& [flag, path] : outputs)
    for (const std::string& peer : o.peers)
      if (!path.empty() && engine::same_file(path, peer)) {
        say(std::string(flag) + " " + path + " names the --peers file " + peer);
        return 2;
      }
  if (o.no_allreduce && app.count("--allreduce-replicas") > 0) {
    say("--allreduce-replicas: the allreduce sweep is skipped by --no-allreduce");
    return 2;
  }
  for (int r : o.replicas)
    if (r > o.batch_size) {
      say("--replicas " + std::to_string(r) + " is larger than --batch-size " + std::to_string(o.batch_size));
      return 2;
    }
  try {
    const bool wants_gpu = std::any_of(o.modes.begin(), o.modes.end(), [](const std::string& m) { return m != "cpu"; });
    const engine::CudaProbe probe = engine::probe_cuda();
    if (wants_gpu && !probe.ok()) {
      say("no CUDA device answers (" + probe.describe() + "); use --modes cpu");
      return 2;
    }
    if (o.num_gpus > 0 && !wants_gpu) {
      say("--num-gpus " + std::to_string(o.num_gpus) + ": only the GPU modes place replicas on GPUs, and --modes has none");
      return 2;
    }
    if (app.count("--allreduce-replicas") > 0 && !wants_gpu) {
      say("--allreduce-replicas: the allreduce sweep runs on GPUs, and --modes has no GPU mode");
      return 2;
    }
    const int num_gpus = o.num_gpus > 0 ? o.num_gpus : std::max(1, probe.devices);
    if (const std::string error = wants_gpu ? engine::num_gpus_error(num_gpus, probe.devices) : ""; !error.empty()) {
      say(error);
      return 2;
    }
    // What could fail after the benchmark's minutes fails now: the output folders, a named pipe with no
    // reader (whose write ends stay open until the tables are written), the peers' rows.
    const auto output_error = [](const std::string& problem, const char* flag) {
      return std::runtime_error(problem + " (" + flag + ")");
    };
    std::vector<std::unique_ptr<engine::PipeWriteEnd>> pipes;
    for (const auto& [flag, path] : outputs) {
      if (path.empty()) continue;
      if (const std::string problem = output_problem(path); !problem.empty()) throw output_error(problem, flag);
      pipes.push_back(std::make_unique<engine::PipeWriteEnd>(path));
      if (!pipes.back()->problem().empty()) throw output_error(pipes.back()->problem(), flag);
    }
    const std::filesystem::path timeline_folder = engine::folder_beside(o.json_path);  // empty: none written
    const auto timeline_path = [&](const std::string& mode, int r) {
      return (timeline_folder / ("timeline-" + mode + "-r" + std::to_string(r) + ".json")).string();
    };
    if (!o.no_trace && !timeline_folder.empty())
      for (const std::string& mode : o.modes)
        for (int r : o.replicas)
          if (mode != "cpu")  // traced: a GPU mode's row
            if (const std::string problem = output_problem(timeline_path(mode, r)); !problem.empty())
              throw output_error(problem + ", a timeline beside the results", "--json");
    std::vector<profiling::BenchRow> peer_rows;
    std::vector<std::string> names;  // two rows of one name could not be told apart in the table
    for (const std::string& mode : o.modes)
      for (int r : o.replicas) names.push_back(profiling::row_name(mode, r));
    for (const std::string& file : o.peers) {
      constexpr size_t kLimit = size_t{1} << 20;  // a row is a few kilobytes
      const std::vector<uint8_t> bytes =
          engine::read_without_waiting<std::runtime_error>(file, kLimit + 1, "the --peers file");
      if (bytes.size() > kLimit) throw std::runtime_error(file + ": larger than a peer row (over 1 MiB)");
      try {
        const nlohmann::json j = engine::parse_strict_json(
            bytes.begin(), bytes.end(), std::numeric_limits<int>::max(),
            [](const std::string& key) { throw std::runtime_error("the field " + key + " is given twice"); });
        if (j.is_object() && j.contains("rows") && !j.contains("name"))
          throw std::runtime_error("a whole lenet-bench result, not one row; profiling/peers/lenet_peer.py --json writes a row");
        peer_rows.push_back(profiling::row_from_json(j));
      } catch (const std::exception& e) {  // unreadable JSON, or a row without a field the table needs
        throw std::runtime_error(file + ": not a peer row (" + e.what() + ")");
      }
      if (std::find(names.begin(), names.end(), peer_rows.back().name) != names.end())
        throw std::runtime_error(file + ": its row is named \"" + peer_rows.back().name + "\" as another row is");
      names.push_back(peer_rows.back().name);
    }
    engine::install_stop_handlers(on_stop_signal);  // a stop while the data loads comes to the rows' loop
    const io::FashionMnist data = io::load_fashion_mnist(io::resolve_data_dir(o.data_dir), size_t(o.train_limit),
                                                         size_t(o.test_limit));
    if (const std::string problem =
            engine::output_over_data_file({{"--json", o.json_path}, {"--markdown", o.markdown_path}}, data.files);
        !problem.empty()) {
      say(problem);
      return 2;
    }
    if (!o.no_trace && wants_gpu && !profiling::CuptiTrace::available()) {
      say(profiling::CuptiTrace::unavailable_reason() + "; CUPTI columns stay empty");
      o.no_trace = true;
    } else if (!o.no_trace && wants_gpu) {
      try {
        profiling::CuptiTrace::prepare();  // before any graph is captured
      } catch (const std::exception& e) {
        say(std::string("CUPTI refused (") + e.what() + "); CUPTI columns stay empty");
        o.no_trace = true;
      }
    }

    std::vector<profiling::BenchRow> rows;
    std::string left_out;  // what a stop or a failure left out
    // The first failure ends the measuring (a CUDA error may have left the device unusable); the rows
    // measured before it are still written, with the failure named, and the status is 1.
    std::string failure;
    for (const std::string& mode : o.modes)
      for (int r : o.replicas) {
        const std::string name = profiling::row_name(mode, r), from_here = "the rows from " + name + " on";
        if (g_stop.signal != 0 && left_out.empty()) left_out = from_here;
        if (!left_out.empty()) continue;
        say(name);
        nlohmann::json timeline;
        try {
          rows.push_back(bench_config(mode, r, num_gpus, data, o, &timeline));
        } catch (const Stopped&) {
          left_out = from_here;
          continue;
        } catch (const std::exception& e) {
          failure = name + ": " + e.what();
          if (rows.empty()) throw std::runtime_error(failure);  // nothing measured: the error alone
          left_out = from_here;
          continue;
        }
        // Per-step kernel and idle time, for profiling/plot.py. A write that fails (a full disk) leaves
        // that timeline out, not the rows measured.
        if (!timeline.is_null() && !timeline_folder.empty())
          if (const std::string failed = write_output(timeline_path(mode, r), timeline.dump() + "\n"); !failed.empty())
            say(failed + "; that timeline is left out");
      }
    if (g_stop.signal != 0 && rows.empty()) {
      say("stopped by signal " + std::to_string(g_stop.signal) + " before a row was measured; nothing written");
      return 128 + g_stop.signal;
    }
    rows.insert(rows.end(), peer_rows.begin(), peer_rows.end());
    std::string peer_notes;
    for (const profiling::BenchRow& p : peer_rows)
      peer_notes += profiling::peer_mismatch(p, int64_t(data.train.size()), o.batch_size, o.lr);
    std::ostringstream md;
    md << "# lenet-bench\n\n" << data.train.size() << " training examples, batch " << o.batch_size << ", lr "
       << engine::format_double(o.lr) << ", seed " << o.seed << "; seconds per epoch are the training pass only, mean of " << o.timed_epochs
       << " epoch(s) after a warm-up epoch, '±' half their range as a share of the mean; 'host ms/step' is the "
          "host's time in a training-step call (the whole step on the CPU and in naive mode; in graph mode staging "
          "and launching it, with any wait for a free staging slot; a peer's as profiling/peers/README.md says); "
          "'test acc' is after a row's last epoch (a peer's own epoch count)"
       << (wants_gpu && !o.no_trace ? "; CUPTI columns from one further traced epoch: 'kernel' is the sum of the "
                                      "kernels' durations (kernels running at once each count), 'idle' is time "
                                      "between a device's first and last kernel with no kernel running (copies count "
                                      "as idle), 'kernels/step' counts kernels launched by the host (not by a graph), "
                                      "'allreduce' is time with some copy or add kernel of the allreduce running "
                                      "on some device"
                                    : "")
       << ".\n\n"
       << profiling::markdown_table(rows, rows.empty() ? "" : rows.front().name)
       << (peer_notes.empty() ? "" : "\n" + peer_notes);

    nlohmann::json out;
    out["rows"] = nlohmann::json::array();
    for (const auto& r : rows) out["rows"].push_back(profiling::to_json(r));
    const double flops = model::train_flops_per_example() * double(data.train.size());
    out["floor"] = {{"flops_per_epoch", flops}};
    out["cpu_gemm"] = model::gemm_description();  // CPU rows' times depend on it (README: 3.2x to 4.6x)
    md << "\nArithmetic floor: " << flops / 1e12 << " TFLOP per epoch (forward and backward, a multiply-add as two)";
#if LENET_HAVE_CUDA  // else no GPU mode got this far
    if (wants_gpu) try {
      cudaDeviceProp prop{};
      int clock_khz = 0;
      LENET_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
      LENET_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
      const int lanes = profiling::fp32_lanes_per_sm(prop.major, prop.minor);
      const double peak = profiling::peak_fp32_flops(prop.multiProcessorCount, lanes, clock_khz * 1e3);
      out["device"] = {{"name", prop.name}, {"sms", prop.multiProcessorCount}, {"clock_khz", clock_khz},
                       {"fp32_lanes_per_sm", lanes}, {"peak_fp32_flops", peak}};
      if (peak > 0) {
        out["floor"]["seconds_at_peak_fp32"] = flops / peak;
        md << ": " << flops / peak * 1e3 << " ms at " << prop.name << "'s FP32 peak of " << peak / 1e12
           << " TFLOP/s (" << prop.multiProcessorCount << " SMs x " << lanes << " lanes x 2 x " << clock_khz / 1e6
           << " GHz)";
      }
    } catch (const std::exception& e) {  // after a failed row, say, with the device unusable
      md << " (the GPU's peak not read: " << e.what() << ")";
    }
#endif
    md << ".\n";
#if LENET_HAVE_CUDA
    std::optional<double> step_latency;
    // A stop or a failure skips the sections not begun; under a stop, the allreduce sweep completes
    // (seconds), and the projection's measurements stop.
    auto leave_out = [&](const char* section) { left_out += (left_out.empty() ? "" : ", ") + std::string(section); };
    auto skip_when_stopped = [&](const char* section) {
      if (g_stop.signal == 0 && failure.empty()) return false;
      leave_out(section);
      return true;
    };
    // A section that fails is left out like the sections after it.
    auto section_failed = [&](const char* section, const std::exception& e) {
      failure = section + std::string(": ") + e.what();
      leave_out(section);
    };
    if (!o.no_allreduce && wants_gpu && !skip_when_stopped("the allreduce sweep")) try {
      bench_allreduce(o, num_gpus, md, out["allreduce"]);
      // Two members, the smallest message: two ring steps of almost no data, so half its time is the
      // latency of one step (copy and add kernel launched from a graph).
      for (const auto& a : out["allreduce"])
        if (a["replicas"] == 2 && a["ring_seconds"].is_number()) {
          step_latency = a["ring_seconds"].get<double>() / 2;
          break;
        }
    } catch (const std::exception& e) {
      section_failed("the allreduce sweep", e);
    }
    if (!o.no_projection && wants_gpu && !skip_when_stopped("the projection")) {
      try {
        out["projection"] = project(data, o, step_latency, md);  // measures before it writes a line
      } catch (const Stopped&) {
        skip_when_stopped("the projection");
      } catch (const std::exception& e) {
        section_failed("the projection", e);
      }
    }
#endif
    auto stop_note = [&] {
      return "stopped by signal " + std::to_string(g_stop.signal) +
             (left_out.empty() ? " once the tables were complete" : "; left out: " + left_out);
    };
    const std::string failure_note = failure + "; left out: " + left_out;
    if (!failure.empty()) {
      md << "\nfailed: " << failure_note << ".\n";
      out["failed"] = failure_note;
    }
    if (g_stop.signal != 0) {  // with a failure too: the signal came all the same
      md << "\n" << stop_note() << ".\n";
      out["stopped"] = stop_note();
    }
    // On stdout, unless --json or --markdown writes there: stdout then holds that file's text alone.
    const bool stdout_taken = engine::standard_stream_of(o.json_path) == &std::cout ||
                              engine::standard_stream_of(o.markdown_path) == &std::cout;
    if (stdout_taken) std::cerr << md.str() << std::flush;  // to be seen; the result is in the files
    else if (const std::string failed = engine::write_all(std::cout, md.str(), "stdout"); !failed.empty())
      throw std::runtime_error(failed);
    // The peers' notes, which the table ends with, also on stderr where that is not where the table went
    // (a terminal both write, `2>&1 | tee`).
    struct stat out_st {}, err_st {};
    const bool one_place = ::fstat(STDOUT_FILENO, &out_st) == 0 && ::fstat(STDERR_FILENO, &err_st) == 0 &&
                           out_st.st_dev == err_st.st_dev && out_st.st_ino == err_st.st_ino;
    if (!stdout_taken && !one_place) std::cerr << peer_notes << std::flush;
    for (const auto& [flag, path, text] :
         {std::tuple<const char*, const std::string&, std::string>{"--markdown", o.markdown_path, md.str()},
          {"--json", o.json_path, out.dump(2) + "\n"}}) {
      if (path.empty()) continue;
      if (const std::string failed = write_output(path, text); !failed.empty()) throw output_error(failed, flag);
    }
    if (!failure.empty()) {
      say("error: " + failure_note + " (the rows measured before it are written)");
      return 1;
    }
    if (g_stop.signal == 0) return 0;
    say(stop_note());  // a signal while writing too: the status says it came
    return 128 + g_stop.signal;
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return 1;
  }
}
