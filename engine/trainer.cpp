#include "engine/trainer.hpp"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ostream>
#include <stdexcept>

#include <sys/ioctl.h>
#include <unistd.h>

#include "engine/numbers.hpp"
#include "engine/output_file.hpp"
#include "io/sampler.hpp"
#include "profiling/nvtx.hpp"

namespace lenet::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// A loss to 4 decimals, or in scientific notation from 1e6 on (a run with too large an lr reaches 1e33
// without diverging: 34 digits before the point would say nothing more).
std::string loss_text(double x) {
  if (!(std::fabs(x) >= 1e6)) return fixed(x, 4);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4e", x);
  return buf;
}

// A live line on a terminal (redrawn at most 4 times a second), plain per-epoch lines otherwise.
class Progress {
 public:
  Progress(std::ostream& out, bool terminal, bool quiet, int epochs)
      : out_(out), terminal_(terminal), quiet_(quiet), epochs_(epochs) {}
  // A stop or an error leaving the loop must not print its message onto the live line.
  ~Progress() {
    if (line_open_) out_ << "\r\x1b[2K" << std::flush;
  }

  void step(int epoch, size_t done, size_t total, size_t examples, double seconds) {
    if (quiet_ || !terminal_) return;
    const Clock::time_point now = Clock::now();
    if (done != total && now - last_draw_ < std::chrono::milliseconds(250)) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    std::string line = "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs_) + " [" +
                       std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kWidth - filled), '.') +
                       "] " + std::to_string(done) + "/" + std::to_string(total) + " steps, " +
                       fixed(seconds > 0 ? examples / seconds : 0.0, 0) + " examples/s";
    // Within the terminal's width, read at every draw: "\x1b[2K" clears only the row the cursor is on,
    // so the rows of a line that wrapped would stay behind.
    struct winsize size {};
    if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1 && line.size() >= size.ws_col)
      line.resize(size.ws_col - 1u);
    line_open_ = true;
    write("\r\x1b[2K" + line);
  }

  void epoch_done(const EpochMetrics& m) {
    if (quiet_) return;
    const std::string clear = line_open_ ? "\r\x1b[2K" : "";
    line_open_ = false;
    write(clear + "epoch " + std::to_string(m.epoch) + "/" + std::to_string(epochs_) + ": train loss " +
          loss_text(m.train_loss) + ", train acc " + fixed(m.train_acc, 3) + ", test acc " + fixed(m.test_acc, 3) + ", " +
          three_significant(m.epoch_seconds) + " s (" + fixed(m.examples_per_second, 0) + " examples/s)\n");
  }

 private:
  // A pipe whose reader has gone (`2>&1 | head -n 1`) ends the run, which would go on unseen (SIGPIPE is
  // ignored); a stderr the caller closed does not.
  void write(const std::string& text) {
    errno = 0;
    out_ << text << std::flush;
    if (!out_ && errno == EPIPE) throw io::DataError("stderr: write failed (Broken pipe): the progress output's reader has gone");
  }

  std::ostream& out_;
  bool terminal_, quiet_;
  bool line_open_ = false;
  int epochs_;
  Clock::time_point last_draw_{};
};

}  // namespace

std::string three_significant(double x) {
  if (!std::isfinite(x) || x == 0) return fixed(x, 0);
  if (std::fabs(x) >= 999.5e3) {  // a million or more (a checkpoint's hand-edited seconds): not 300 digits
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", x);
    return text;
  }
  const int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(x))));
  const double scale = std::pow(10.0, 2 - magnitude);
  const double rounded = std::round(x * scale) / scale;  // 9.996 -> 10.0 needs one digit fewer
  const int rounded_magnitude = static_cast<int>(std::floor(std::log10(std::fabs(rounded))));
  return fixed(rounded, std::max(0, 2 - rounded_magnitude));
}

std::string final_line(double test_acc, double seconds_per_epoch, const std::vector<std::string>& devices) {
  std::string list;
  for (size_t i = 0; i < devices.size(); ++i) list += (i ? ", " : "") + devices[i];
  const std::string timing = seconds_per_epoch < 0 ? "no training" : three_significant(seconds_per_epoch) + " sec/epoch";
  return "test acc: " + fixed(test_acc, 2) + ", " + timing + " on [" + list + "]";
}

nlohmann::json epoch_record(const EpochMetrics& m, const Backend& backend, const TrainOptions& options) {
  nlohmann::json record = {{"epoch", m.epoch},
          {"epochs", options.epochs},
          {"train_loss", m.train_loss},
          {"train_acc", m.train_acc},
          {"test_acc", m.test_acc},
          {"epoch_seconds", m.epoch_seconds},
          {"examples_per_second", m.examples_per_second},
          {"backend", backend.name()},
          {"mode", backend.mode()},
          {"replicas", backend.devices().size()},
          {"devices", backend.devices()},
          {"batch_size", options.batch_size},
          {"lr", options.lr},
          {"seed", options.seed}};
  for (const auto& [name, value] : backend.counters()) record[name] = value;
  return record;
}

TrainResult train(Backend& backend, const io::FashionMnist& data, const TrainOptions& options, std::ostream& progress,
                  bool progress_is_terminal) {
  std::ofstream metrics_file;
  std::ostream* metrics = nullptr;
  if (!options.metrics_path.empty() && !(metrics = standard_stream_of(options.metrics_path))) {
    const PipeWriteEnd pipe(options.metrics_path);
    if (!pipe.problem().empty()) throw io::DataError("--metrics " + pipe.problem());
    errno = 0;
    metrics_file.open(options.metrics_path, std::ios::out | (options.start_step > 0 ? std::ios::app : std::ios::trunc));
    if (const int err = errno; !metrics_file)
      throw io::DataError(options.metrics_path + ": cannot open the --metrics file for writing" + reason(err));
    metrics = &metrics_file;
  }
  const io::EpochSampler sampler(data.train.size(), static_cast<size_t>(options.batch_size), options.seed, true);
  const uint64_t batches = sampler.num_batches();
  if (batches == 0) throw std::invalid_argument("train: the training set is empty");
  Progress bar(progress, progress_is_terminal, options.quiet, options.epochs);
  const float lr = static_cast<float>(options.lr);
  uint64_t step = options.start_step;
  auto stop_signal = [&] { return options.stop_requested ? options.stop_requested() : 0; };
  TrainResult result;
  backend.take_train_stats();  // the counts start at zero; each epoch's end takes its own
  for (int e = static_cast<int>(step / batches); e < options.epochs; ++e) {
    profiling::Range epoch_range("epoch");
    const std::vector<uint32_t> order = sampler.epoch_order(static_cast<uint64_t>(e));
    const uint64_t first_step = step;
    // Only a resumed run's first epoch can start mid-way; the steps before the stop are full minibatches.
    const EpochSoFar before = step % batches == 0 ? EpochSoFar{} : options.start_so_far;
    const size_t rows_before = sampler.batch(static_cast<size_t>(step % batches)).first;
    size_t examples = 0;
    // Steps are numbered from 1 in their epoch: "step 7 of 79 (step 86 of the run)".
    const uint64_t epoch_start = uint64_t(e) * batches;
    auto in_epoch = [&](uint64_t run_step) { return std::to_string(run_step - epoch_start); };
    auto step_text = [&](uint64_t run_step) {
      return "step " + in_epoch(run_step) + " of " + std::to_string(batches) + " (step " + std::to_string(run_step) +
             " of the run)";
    };
    const Clock::time_point t0 = Clock::now();
    // The epoch's training up to now (before a resume point too), once the enqueued work is done. Checked
    // here, at the pass's end (the GPU modes keep the loss on the device) or at the step whose loss the
    // host saw diverge: a step that diverged leaves a non-finite loss sum or non-finite parameters
    // behind, which must never replace the last good checkpoint.
    auto epoch_so_far = [&] {
      backend.synchronize();
      const double seconds = seconds_since(t0);
      const TrainStats st = backend.take_train_stats();
      if (!std::isfinite(st.loss_sum) || !all_finite(backend.parameters(0))) {
        const int64_t bad_step = st.first_nonfinite_step;
        const std::string where = bad_step >= 0             ? "at " + step_text(first_step + uint64_t(bad_step) + 1)
                                  : first_step + 1 == step ? "at " + step_text(step)  // the epoch's only step
                                                           : "between steps " + in_epoch(first_step + 1) + " and " +
                                                                 in_epoch(step) + " of " + std::to_string(batches);
        throw TrainingDiverged("non-finite " + std::string(std::isfinite(st.loss_sum) ? "parameters" : "training loss") +
                               " in epoch " + std::to_string(e + 1) + ", " + where +
                               (options.start_step > 0 ? "; start again with a smaller --lr (a resumed run keeps its own)"
                                                       : "; try a smaller --lr"));
      }
      return EpochSoFar{before.loss_sum + st.loss_sum, before.correct + uint64_t(st.correct), before.seconds + seconds};
    };
    for (size_t b = static_cast<size_t>(step % batches); b < batches; ++b) {
      profiling::Range step_range("step");
      const io::BatchRange batch = sampler.batch(b);
      backend.train_step(data.train, order.data() + batch.first, static_cast<int>(batch.rows), lr);
      ++step;
      examples += batch.rows;
      bar.step(e + 1, b + 1, batches, examples, seconds_since(t0));
      if (backend.diverged_without_waiting()) epoch_so_far();  // throws TrainingDiverged at once
      // A stop after an epoch's last step waits for the epoch's evaluation, metrics and checkpoint below.
      if (const int signal = b + 1 < batches ? stop_signal() : 0; signal != 0) {
        const EpochSoFar so_far = epoch_so_far();
        if (options.checkpoint) options.checkpoint(e, step, so_far);
        throw TrainingStopped(signal, "in epoch " + std::to_string(e + 1) + " after " + step_text(step));
      }
    }
    const EpochSoFar whole = epoch_so_far();
    EpochMetrics m;
    m.epoch = e + 1;
    m.epoch_seconds = whole.seconds;
    const double n = static_cast<double>(rows_before + examples);
    m.train_loss = whole.loss_sum / n;
    m.train_acc = static_cast<double>(whole.correct) / n;
    m.examples_per_second = n / m.epoch_seconds;
    {
      profiling::Range eval_range("eval");
      m.test_acc = static_cast<double>(backend.count_correct(data.test, options.batch_size)) /
                   static_cast<double>(data.test.size());
    }
    bar.epoch_done(m);
    // The checkpoint first: a metrics record never claims an epoch that a resumed run would train again.
    if (options.checkpoint) options.checkpoint(e + 1, step, EpochSoFar{});
    if (metrics != nullptr) {
      if (const std::string failed = write_all(*metrics, epoch_record(m, backend, options).dump() + "\n",
                                               options.metrics_path);
          !failed.empty())
        throw io::DataError(failed + " (--metrics)");
    }
    result.epochs.push_back(m);
    if (const int signal = e + 1 < options.epochs ? stop_signal() : 0; signal != 0)
      throw TrainingStopped(signal, "after epoch " + std::to_string(e + 1));
  }
  double total = 0;
  for (const EpochMetrics& m : result.epochs) total += m.epoch_seconds;
  if (!result.epochs.empty()) result.mean_epoch_seconds = total / static_cast<double>(result.epochs.size());
  return result;
}

}  // namespace lenet::engine
