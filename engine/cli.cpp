#include "engine/cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/checkpoint.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/cli_checks.hpp"
#include "engine/cuda_probe.hpp"
#include "engine/numbers.hpp"
#include "engine/output_file.hpp"
#include "engine/replace_file.hpp"
#include "engine/stop_signals.hpp"
#include "graphs/cuda_error.hpp"
#include "graphs/have_cuda.hpp"
#include "io/dataset.hpp"
#include "io/sampler.hpp"
#include "model/gemm.hpp"
#include "model/lenet.hpp"

#if LENET_HAVE_CUDA
#include "engine/cuda_graph_backend.hpp"
#include "engine/cuda_naive_backend.hpp"
#endif

namespace lenet::engine {
namespace {

constexpr const char* kProgram = "lenet-train";

std::string version_text() {
  return std::string(kProgram) + " " + LENET_VERSION + " (" + cuda_library_versions() + "; " +
         model::gemm_description() + ")";
}

void validate(const CliOptions& o) {
  const TrainOptions& t = o.train;
  if (t.epochs == 0 && o.load_path.empty())  // a negative count is the flag's range error
    throw UsageError("--epochs 0: must be at least 1 (0 only with --load, to evaluate)");
  if (!o.load_path.empty() && !o.resume_path.empty()) throw UsageError("--load and --resume: give one of them");
  if (t.epochs == 0) {
    if (!o.save_path.empty()) throw UsageError("--save: nothing to save with --epochs 0 (evaluation only)");
    if (!t.metrics_path.empty()) throw UsageError("--metrics: no epochs to record with --epochs 0 (evaluation only)");
  }
  if (o.replicas && *o.replicas > t.batch_size) {
    throw UsageError("--replicas " + std::to_string(*o.replicas) + " is larger than --batch-size " +
                     std::to_string(t.batch_size) + ": every replica needs a row of a full minibatch");
  }
  // --num-gpus without --replicas sets the replica count; checked once the backend is known.
}

// The replica count that --num-gpus, or the visible GPUs, gave where --replicas did not.
void check_replicas(const CliOptions& o, int replicas) {
  if (replicas <= o.train.batch_size) return;
  const std::string from = o.num_gpus ? "--num-gpus " + std::to_string(*o.num_gpus) + " sets " : "one per visible GPU: ";
  throw UsageError(from + std::to_string(replicas) + " replicas, more than --batch-size " +
                   std::to_string(o.train.batch_size) + ": every replica needs a row of a full minibatch (set --replicas)");
}

std::unique_ptr<Backend> make_cpu_backend(const CliOptions& o, const std::vector<float>& start) {
  // Replica count already checked against the batch size before the data was loaded.
  return std::make_unique<CpuBackend>(o.replicas.value_or(o.num_gpus.value_or(1)), start);
}

#if LENET_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(const CliOptions& o, const CudaProbe& probe, const io::FashionMnist& data,
                                           const std::vector<float>& start, std::ostream& notice) {
  const int visible = probe.devices;
  const int num_gpus = o.num_gpus.value_or(visible);
  if (const std::string error = num_gpus_error(num_gpus, visible); !error.empty()) {
    throw UsageError(error + "; use --replicas " + std::to_string(num_gpus) +
                     " to place several replicas on the visible GPUs");
  }
  const int replicas = o.replicas.value_or(num_gpus);
  check_replicas(o, replicas);
  const CudaPlacement placement = place(num_gpus, replicas, data.train.size(), data.test.size(), o.train.batch_size);
  std::vector<std::string> report;
  std::unique_ptr<Backend> backend;
  if (o.mode == "naive") {
    auto naive = std::make_unique<CudaNaiveBackend>(placement, start);
    report = naive->algorithm_report();
    backend = std::move(naive);
  } else {
    auto graph = std::make_unique<CudaGraphBackend>(placement, start);
    report = graph->algorithm_report();
    backend = std::move(graph);
  }
  if (!o.train.quiet)
    for (const std::string& line : report) notice << kProgram << ": " << line << std::endl;
  return backend;
}
#else
std::unique_ptr<Backend> make_cuda_backend(const CliOptions&, const CudaProbe&, const io::FashionMnist&,
                                           const std::vector<float>&, std::ostream&) {
  throw std::logic_error("make_cuda_backend in a build without CUDA, whose probe finds no device");
}
#endif

}  // namespace

std::optional<CliOptions> parse_cli(int argc, const char* const* argv) {
  CliOptions o;
  CLI::App app{"Synchronous data-parallel training of LeNet on Fashion-MNIST (Dive into Deep Learning, "
               "\"Training on Multiple GPUs\").",
               kProgram};
  int num_gpus = 0, replicas = 0;
  long long train_limit = 0, test_limit = 0;
  std::string seed = std::to_string(o.train.seed), lr = format_double(o.train.lr);
  app.add_option("--num-gpus", num_gpus, "Use GPUs 0..N-1 (default: all visible). On the CPU backend: the default --replicas")
      ->check(decimal(1));
  app.add_option("--replicas", replicas, "Data-parallel replicas (default: the number of GPUs used; on the CPU, --num-gpus or 1)")
      ->check(decimal(1));
  app.add_option("--batch-size", o.train.batch_size, "Global minibatch size, split over the replicas")
      ->check(decimal(1))
      ->capture_default_str();
  app.add_option("--lr", lr, "SGD learning rate")->capture_default_str()->type_name("FLOAT");
  app.add_option("--epochs", o.train.epochs,
                 "Passes over the training set (with --resume, in all; default: the interrupted run's)")
      ->check(decimal(0))
      ->capture_default_str();
  app.add_option("--backend", o.backend, "auto: CUDA when a device answers, else the CPU")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))->capture_default_str();
  app.add_option("--mode", o.mode,
                 "CUDA mode: naive (the textbook algorithm) or graph (CUDA graphs, ring allreduce); with --resume, "
                 "default: a CUDA run's")
      ->check(CLI::IsMember({"naive", "graph"}))->capture_default_str();
  app.add_option("--seed", seed, "Seed of the initial parameters and of every epoch's shuffle (0..2^64-1)")
      ->capture_default_str()
      ->type_name("INT");
  app.add_option("--data-dir", o.data_dir, std::string("Fashion-MNIST folder (default: $LENET_DATA_DIR, else ") +
                                               io::kDefaultDataDir + ")")
      ->type_name("DIR");
  app.add_option("--train-limit", train_limit, "Use only the first N training examples")->check(decimal(1LL));
  app.add_option("--test-limit", test_limit, "Use only the first N test examples")->check(decimal(1LL));
  app.add_option("--metrics", o.train.metrics_path, "Write one JSON object per epoch to FILE (JSON Lines; -: stdout)")
      ->type_name("FILE");
  app.add_flag("--quiet", o.train.quiet, "No progress display");
  app.add_option("--save", o.save_path, "Write the parameters and training state to FILE (safetensors) after every epoch")
      ->type_name("FILE");
  app.add_option("--load", o.load_path, "Start from the parameters in FILE; with --epochs 0 only evaluate them")->type_name("FILE");
  app.add_option("--resume", o.resume_path,
                 "Continue the run checkpointed in FILE up to --epochs in total, checkpointing to FILE unless --save is given")
      ->type_name("FILE");
  app.set_version_flag("--version", version_text);  // a function: cuBLAS is opened only for --version
  if (const std::string problem = option_without_value(app, argc, argv); !problem.empty()) throw UsageError(problem);
  std::string parse_error;  // said after an empty value, which a check may have refused first
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    if (const std::string failed = print_help_or_version(app, e); !failed.empty()) throw std::runtime_error(failed);
    return std::nullopt;
  } catch (const CLI::ArgumentMismatch& e) {
    throw UsageError(parse_error_text(e, argc, argv) + " (see --help)");
  } catch (const CLI::ParseError& e) {
    parse_error = e.what();
  }
  if (const std::string flag = option_with_empty_value(app); !flag.empty()) throw UsageError(flag + ": empty value");
  if (!parse_error.empty()) throw UsageError(parse_error + " (see --help)");
  if (!parse_seed(seed, o.train.seed)) throw UsageError("--seed " + seed + ": " + kU64Rule);
  if (!parse_lr(lr, o.train.lr)) throw UsageError("--lr " + lr + ": " + kFloat32PositiveRule);
  dash_is_stdout(o.train.metrics_path);
  // "-" is a stream elsewhere; a checkpoint is a file (read whole, or replaced by a rename).
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--save", o.save_path},
                                   {"--load", o.load_path}, {"--resume", o.resume_path}})
    if (path == "-") throw UsageError(std::string(flag) + " -: a checkpoint is a file, not a stream; for a file named -, give ./-");
  if (app.count("--num-gpus")) o.num_gpus = num_gpus;
  o.epochs_given = app.count("--epochs") > 0;
  o.seed_given = app.count("--seed") > 0;
  o.lr_given = app.count("--lr") > 0;
  o.batch_given = app.count("--batch-size") > 0;
  o.mode_given = app.count("--mode") > 0;
  if (app.count("--replicas")) o.replicas = replicas;
  o.train_limit = static_cast<size_t>(train_limit);
  o.test_limit = static_cast<size_t>(test_limit);
  validate(o);
  return o;
}

namespace {

// The first SIGINT/SIGTERM/SIGHUP (a closed terminal or ssh session) asks the training loop to stop after
// its current step; a second one (engine::take_stop) ends the process at once. Only
// async-signal-safe work happens in the handler.
StopRecord g_stop;  // written by the handler of any thread (take_stop)
std::atomic<bool> g_stop_reported{false};
static_assert(std::atomic<bool>::is_always_lock_free);
volatile std::sig_atomic_t g_stderr_terminal = 0;  // the progress display may hold a live line there

extern "C" void on_stop_signal(int signal) {
  if (g_stop_reported) return;
  if (take_stop(g_stop, signal)) {
    // The second signal: at once, leaving no half-written temporary checkpoint.
    remove_replacement_in_progress();
    char line[] = "\r\x1b[2Klenet-train: stopped at once by a second signal NN\n";
    char* digits = line + sizeof line - 4;  // "NN": the signal number, 1 to 64
    if (signal >= 10) *digits++ = static_cast<char>('0' + signal / 10 % 10);
    *digits++ = static_cast<char>('0' + signal % 10);
    *digits++ = '\n';
    const size_t clear = g_stderr_terminal != 0 ? 0 : 5;  // "\r\x1b[2K" clears a live line, on a terminal only
    [[maybe_unused]] const ssize_t ignored =
        ::write(STDERR_FILENO, line + clear, static_cast<size_t>(digits - line) - clear);
    _exit(128 + signal);
  }
}

// Once a stop's line is being written, a second signal would add a line of its own: from then to the
// exit, which has the status the first signal set, the handler does nothing (a flag, not a signal mask,
// which would hold only for the thread that set it).
void block_stop_signals() { g_stop_reported = true; }


// Parameters to start from must be finite: NaN or infinity would only resurface as a "diverged" run.
void check_finite_parameters(const std::vector<float>& p, const std::string& path) {
  for (const model::TensorSpec& t : model::tensor_specs()) {
    for (size_t i = 0; i < t.size; ++i) {
      if (!std::isfinite(p[t.offset + i])) {
        throw CheckpointError(path + ": " + t.name + "[" + std::to_string(i) + "] is " +
                              format_double(p[t.offset + i]) + "; cannot start from non-finite parameters");
      }
    }
  }
}

// A word as a POSIX shell reads it back: as it is when it holds nothing the shell treats specially, else
// in single quotes.
std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                              "0123456789_./:=+,@%-") == std::string::npos;
  if (plain) return word;
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// "on the CPU", "on CUDA in graph mode": a backend and mode as Backend::name() and mode() give them.
std::string engine_text(const std::string& backend, const std::string& mode) {
  return backend == "cpu" ? "on the CPU" : "on CUDA in " + mode + " mode";
}

// The command that continues a stopped run: --resume and the flags given that the checkpoint does not
// record (where the data is, always: LENET_DATA_DIR may say otherwise where the command is pasted; which
// backend and mode, as a checkpoint records only what trained, the CPU after a fallback; how many GPUs;
// where the metrics and the display go). On the CPU --num-gpus only set the replica count, which the
// checkpoint records. Paths are absolute, so that the command works from any folder. Empty where a word
// holds a control character: a message shows it escaped, and the command would no longer name the same
// file.
std::string resume_command(const char* program, const CliOptions& o, bool cuda) {
  const CliOptions defaults;
  auto absolute = [](const std::string& path) {
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::absolute(path, ec);
    return ec ? path : p.string();
  };
  // A program found through PATH stays a name; one started by a path gets an absolute one.
  const std::string started = program;
  std::string command = shell_word(started.find('/') == std::string::npos ? started : absolute(started)) + " --resume " +
                        shell_word(absolute(o.save_path));
  auto add = [&](bool given, const char* flag, const std::string& value) {
    if (given) command += std::string(" ") + flag + (value.empty() ? "" : " " + shell_word(value));
  };
  add(true, "--data-dir", absolute(io::resolve_data_dir(o.data_dir)));
  add(o.backend != defaults.backend, "--backend", o.backend);
  add(o.mode != defaults.mode, "--mode", o.mode);
  add(cuda && o.num_gpus.has_value(), "--num-gpus", std::to_string(o.num_gpus.value_or(0)));
  add(!o.train.metrics_path.empty(), "--metrics", absolute(o.train.metrics_path));
  add(o.train.quiet, "--quiet", "");
  return one_line(command) == command ? command : "";
}

// A resumed run takes its settings from the checkpoint; a flag that contradicts them is a usage error.
void apply_resume_state(CliOptions& o, const TrainingState& st) {
  auto conflict = [&](bool given, bool differs, const std::string& flag, const std::string& saved) {
    if (given && differs) throw UsageError(flag + " differs from the value " + saved + " saved in --resume " + o.resume_path);
  };
  conflict(o.seed_given, o.train.seed != st.seed, "--seed", std::to_string(st.seed));
  // Training steps with the float32 nearest the rate, so a value that rounds to the saved one's is the same run.
  conflict(o.lr_given, static_cast<float>(o.train.lr) != static_cast<float>(st.lr), "--lr", format_double(st.lr));
  conflict(o.batch_given, o.train.batch_size != st.batch_size, "--batch-size", std::to_string(st.batch_size));
  conflict(o.replicas.has_value(), o.replicas.value_or(st.replicas) != st.replicas, "--replicas",
           std::to_string(st.replicas));
  o.train.seed = st.seed;
  o.train.lr = st.lr;
  o.train.batch_size = st.batch_size;
  o.replicas = st.replicas;
  if (!o.epochs_given) o.train.epochs = st.epochs;
  // A CUDA run's mode too, unless --mode says otherwise (the modes' sums round differently). The backend
  // stays --backend's: auto still means a GPU where one answers.
  if (st.backend == "cuda" && !o.mode_given) o.mode = st.mode;
  // The first train_examples and test_examples examples, as the interrupted run had: another
  // --train-limit would give other minibatches than the saved step count means, another --test-limit
  // metrics that do not compare; a checkpoint that does not record the test set's size takes the flag
  // as it is. A data set smaller than these sizes is refused when it loads.
  conflict(o.train_limit != 0, o.train_limit != st.train_examples, "--train-limit", std::to_string(st.train_examples));
  conflict(o.test_limit != 0 && st.test_examples != 0, o.test_limit != st.test_examples, "--test-limit",
           std::to_string(st.test_examples));
  if (o.train_limit == 0) o.train_limit = st.train_examples;
  if (o.test_limit == 0) o.test_limit = st.test_examples;
  o.train.start_step = st.step;
  o.train.start_so_far = st.epoch_so_far;
}

// A metrics file that a failed write left with a record cut short ends without a newline: a resumed run
// appending to it would glue its first record to that fragment. Only the file's end is read. A last line
// that is a whole JSON object (only its newline missing) gets its newline; the start of one that does not
// parse is cut off (its epoch's record is lost either way); anything else is not ours to cut, and the
// run is refused. Says what it did, or nothing.
std::string mend_last_line(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";  // a file that may be written but not read (mode 200) is appended to unchecked
  const std::streamoff size = in.tellg();
  if (size <= 0) return "";
  in.seekg(size - 1);
  if (in.get() == '\n') return "";
  // The last line, read backwards in pieces; the records are a few hundred bytes, so the reading stops
  // past 1 MiB: a longer last line is not one of them.
  constexpr std::streamoff kChunk = 1 << 16;
  constexpr size_t kMost = 1 << 20;
  std::string last;
  for (std::streamoff end = size; end > 0 && last.size() <= kMost;) {
    const std::streamoff from = std::max<std::streamoff>(0, end - kChunk);
    std::string chunk(static_cast<size_t>(end - from), '\0');
    in.seekg(from);
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (!in) throw io::DataError(path + ": cannot read the --metrics file to append to it");
    const size_t newline = chunk.rfind('\n');
    last.insert(0, newline == std::string::npos ? chunk : chunk.substr(newline + 1));
    end = newline == std::string::npos ? from : 0;
  }
  const auto refused = io::DataError(path + ": its last line, without a newline, is not a metrics record; end that line or "
                                            "name another --metrics file");
  if (last.size() > kMost) throw refused;
  const std::streamoff start = size - static_cast<std::streamoff>(last.size());
  const nlohmann::json parsed = nlohmann::json::parse(last, nullptr, false);
  if (parsed.is_object()) {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    if (!(out << '\n' << std::flush)) throw io::DataError(path + ": cannot add the newline its last record lacks (--metrics)");
    return "its last record lacked its newline; added it";
  }
  if (last[0] != '{' || !parsed.is_discarded()) throw refused;
  std::filesystem::resize_file(path, static_cast<uintmax_t>(start), ec);
  if (ec) throw io::DataError(path + ": cannot cut off the record cut short at its end (" + ec.message() + ") (--metrics)");
  return "its last line was a record cut short (a failed write); removed it (that epoch keeps no record where the "
         "checkpoint has it as done: the resumed run does not train it again)";
}

void say(const std::string& message) { engine::say(kProgram, message); }

}  // namespace

int run_cli(int argc, const char* const* argv) {
  // A signal outside the training loop (while loading, setting up or evaluating) ends the run there.
  auto stopped = [](const char* when) {
    block_stop_signals();
    say("stopped by signal " + std::to_string(g_stop.signal) + " " + when);
    return 128 + static_cast<int>(g_stop.signal);
  };
  prepare_output();
  g_stderr_terminal = ::isatty(STDERR_FILENO) == 1 ? 1 : 0;
  install_stop_handlers(on_stop_signal);  // first: a signal at any point after start-up gets its line and status
  // The source text's final line is the run's result: a stdout that cannot take it is an error.
  bool resuming = false;  // for the advice on running out of memory
  auto print_final = [](std::ostream& out, const std::string& line) {
    const std::string failed = write_all(out, line + "\n", &out == &std::cout ? "stdout" : "stderr");
    if (!failed.empty()) say("error: " + failed);
    return failed.empty();
  };
  try {
    const std::optional<CliOptions> parsed = parse_cli(argc, argv);
    if (!parsed) return g_stop.signal != 0 ? stopped("while reading the command line") : 0;  // --help, --version
    CliOptions o = *parsed;
    resuming = !o.resume_path.empty();
    if (o.train.epochs == 0) {  // flags that only training reads, from a command shared with training runs
      std::string ignored;
      for (const auto& [flag, given] : {std::pair<const char*, bool>{"--lr", o.lr_given}, {"--seed", o.seed_given},
                                        {"--train-limit", o.train_limit != 0}})
        if (given) ignored += (ignored.empty() ? "" : ", ") + std::string(flag);
      if (!ignored.empty()) say(ignored + ": nothing trains with --epochs 0; ignored");
    }
    std::optional<Checkpoint> checkpoint;
    // --load and --resume exclude each other (validate() refused both).
    if (const std::string& from = o.load_path.empty() ? o.resume_path : o.load_path; !from.empty()) {
      checkpoint = load_checkpoint(from);
      check_finite_parameters(checkpoint->parameters, from);
    }
    // What the flags gave before a resumed run fills in the rest from its checkpoint.
    const bool replicas_given = o.replicas.has_value();
    const bool train_limit_given = o.train_limit != 0, test_limit_given = o.test_limit != 0;
    if (!o.resume_path.empty()) {
      if (!checkpoint->state) {
        throw UsageError("--resume " + o.resume_path +
                         ": parameters only, no training state this lenet-dp can resume (a PyTorch file, or a checkpoint "
                         "of an older lenet-dp); start from them with --load");
      }
      apply_resume_state(o, *checkpoint->state);
    }
    // The resumed run goes on checkpointing where the interrupted one did, unless --save says otherwise.
    const bool save_implied = o.save_path.empty() && !o.resume_path.empty();
    if (save_implied) o.save_path = o.resume_path;
    // The metrics file is truncated or appended to while checkpoints are read and replaced: one file
    // cannot be both.
    const std::string& metrics = o.train.metrics_path;
    for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--load", o.load_path},
                                     {"--resume", o.resume_path}, {"--save", o.save_path}}) {
      if (!metrics.empty() && !path.empty() && same_file(metrics, path))
        throw UsageError(std::string("--metrics and ") + flag + " name the same file " + metrics);
    }
    // Fail now, not after the first epoch's minutes.
    if (const std::string problem = o.save_path.empty() ? "" : replaced_file_problem(o.save_path); !problem.empty())
      throw CheckpointError(problem + (save_implied ? " (--resume saves there; name another file with --save)" : " (--save)"));
    if (const std::string problem = o.train.metrics_path.empty() ? "" : output_file_problem(o.train.metrics_path);
        !problem.empty())
      throw io::DataError(problem + " (--metrics)");
    // --backend auto: CUDA when a device answers, else the CPU with a one-line notice. An error other
    // than "no driver" or "no device" is a broken installation, not an absent GPU.
    const CudaProbe probe = o.backend == "cpu" ? CudaProbe{} : probe_cuda();
    if (o.backend != "cpu" && !probe.ok() && !probe.no_device())
      throw cuda::CudaError("the CUDA runtime answered " + probe.describe() + "; fix the installation or use --backend cpu");
    if (o.backend == "cuda" && !probe.ok())
      throw UsageError("--backend cuda: no CUDA device answers (" + probe.describe() + "); --backend cpu trains on the CPU");
    const bool use_cuda = o.backend != "cpu" && probe.ok();
    if (!use_cuda) {
      // On the CPU --num-gpus means the replica count, which a resumed run takes from its checkpoint.
      if (!o.resume_path.empty() && o.num_gpus && !replicas_given && *o.num_gpus != *o.replicas) {
        throw UsageError("--num-gpus " + std::to_string(*o.num_gpus) + " sets the CPU's replica count, which differs from " +
                         std::to_string(*o.replicas) + " saved in --resume " + o.resume_path);
      }
      check_replicas(o, o.replicas.value_or(o.num_gpus.value_or(1)));
    }
    const io::FashionMnist data = [&] {
      try {
        return io::load_fashion_mnist(io::resolve_data_dir(o.data_dir), o.train_limit, o.test_limit);
      } catch (const io::LimitError& e) {
        const bool given = e.flag == "--train-limit" ? train_limit_given : test_limit_given;
        if (given) throw UsageError(e.what());  // without --resume a limit is always the flag's
        throw UsageError("--resume " + o.resume_path + ": the interrupted run's data set was larger (" + e.what() + ")");
      }
    }();
    if (g_stop.signal != 0) return stopped("while loading the data");
    if (const std::string problem = output_over_data_file({{"--save", o.save_path}, {"--metrics", metrics}}, data.files);
        !problem.empty())
      throw UsageError(problem);
    const uint64_t batches = io::num_batches(data.train.size(), uint64_t(o.train.batch_size));
    // Which examples the run trains on, for its checkpoints (a resumed run has one: --resume implies --save).
    const uint64_t fingerprint = o.save_path.empty() ? 0 : data.train.fingerprint();
    if (!o.resume_path.empty()) {
      // The checkpoint's step, epoch and partial-epoch fields fit its own training-set size and batch
      // size (load_checkpoint checked), which this run has too.
      const TrainingState& st = *checkpoint->state;
      // Other examples (another --data-dir, other files) would continue another run, not this one.
      if (st.train_fingerprint && *st.train_fingerprint != fingerprint) {
        throw UsageError("--resume " + o.resume_path + ": the training examples differ from the interrupted run's (fingerprint " +
                         std::to_string(fingerprint) + ", saved " + std::to_string(*st.train_fingerprint) +
                         "); give the --data-dir it had");
      }
      if (!st.train_fingerprint)
        say("--resume " + o.resume_path + ": an older lenet-dp wrote it without a fingerprint of the training "
            "examples, so they are not checked against the interrupted run's");
      if (const uint64_t asked = batches * uint64_t(o.train.epochs); st.step >= asked) {
        throw UsageError("--resume " + o.resume_path + ": the run already did " + std::to_string(st.step) + " steps, " +
                         (st.step == asked ? "all " : "more than the ") + std::to_string(asked) + " of " +
                         (o.epochs_given ? "" : "its ") + "--epochs " + std::to_string(o.train.epochs) +
                         "; raise --epochs to go on");
      }
    }
    const std::vector<float> start = checkpoint ? checkpoint->parameters : model::init_parameters<float>(o.train.seed);
    const std::unique_ptr<Backend> backend =
        use_cuda ? make_cuda_backend(o, probe, data, start, std::cerr) : make_cpu_backend(o, start);
    if (g_stop.signal != 0) return stopped("while setting up");
    // Also where stdout or stderr append to the file (`--metrics /dev/stdout >> m.jsonl`).
    if (o.train.start_step > 0 && !metrics.empty()) {
      if (const std::string mended = mend_last_line(metrics); !mended.empty()) say("--metrics " + metrics + ": " + mended);
    }
    // After the checks before training, so that their refusals are one line (train() still opens the
    // metrics file, and refuses a named pipe without a reader, after it).
    if (o.backend == "auto" && !use_cuda)
      say("no CUDA device answers (" + probe.describe() + "); training on the CPU");
    if (const TrainingState* st = o.resume_path.empty() ? nullptr : &*checkpoint->state;
        st && !st->backend.empty() && (st->backend != backend->name() || st->mode != backend->mode())) {
      // The flag that would train as the interrupted run did, where this machine can.
      const std::string exactly = st->backend == "cpu"         ? "--backend cpu"
                                  : backend->name() == "cuda" ? "--mode " + st->mode
                                                              : "";
      say("--resume " + o.resume_path + ": the interrupted run trained " + engine_text(st->backend, st->mode) +
          " and this one trains " + engine_text(backend->name(), backend->mode()) +
          "; the sums round differently, so the final parameters will not be bitwise identical to an uninterrupted run's" +
          (exactly.empty() ? "" : " (" + exactly + " would continue it exactly)"));
    }

    if (o.train.epochs == 0) {  // --epochs 0 --load FILE: evaluate only
      const double acc = static_cast<double>(backend->count_correct(data.test, o.train.batch_size)) /
                         static_cast<double>(data.test.size());
      if (g_stop.signal != 0) return stopped("while evaluating");
      return print_final(std::cout, final_line(acc, -1, backend->devices())) ? 0 : 1;
    }
    bool saved = false;
    if (!o.save_path.empty()) {
      const int replicas = static_cast<int>(backend->devices().size());
      o.train.checkpoint = [&, replicas](int completed_epochs, uint64_t steps, const EpochSoFar& so_far) {
        save_checkpoint(o.save_path, backend->parameters(0),
                        {completed_epochs, o.train.epochs, o.train.seed, steps, o.train.lr, o.train.batch_size, replicas,
                         data.train.size(), so_far, data.test.size(), fingerprint, backend->name(), backend->mode()});
        saved = true;
      };
    }
    o.train.stop_requested = [] { return static_cast<int>(g_stop.signal); };
    const bool terminal = ::isatty(STDERR_FILENO) == 1;
    try {
      const TrainResult result = train(*backend, data, o.train, std::cerr, terminal);
      // On stdout, unless --metrics writes there: stdout then holds the JSON Lines alone.
      if (!print_final(standard_stream_of(o.train.metrics_path) == &std::cout ? std::cerr : std::cout,
                       final_line(result.epochs.back().test_acc, result.mean_epoch_seconds, backend->devices())))
        return 1;
      // A signal during the last step or the last evaluation let the run complete; the status still says
      // it came, so that a script interrupted by it stops too.
      if (g_stop.signal != 0) {
        block_stop_signals();
        say("stopped by signal " + std::to_string(g_stop.signal) + " after the run's last step: the run is complete" +
            (saved ? ", checkpoint written to " + o.save_path : ""));
        return 128 + static_cast<int>(g_stop.signal);
      }
      return 0;
    } catch (const TrainingStopped& e) {
      block_stop_signals();
      const std::string command = resume_command(argc > 0 && argv[0] != nullptr ? argv[0] : kProgram, o, use_cuda);
      say(e.what() + (o.save_path.empty()     ? "; no --save given, nothing written"
                      : "; checkpoint written to " + o.save_path +
                            (command.empty() ? ", go on with --resume " + o.save_path +
                                                   " and the flags given here that it does not record"
                                             : ", go on with: " + command)));
      return 128 + e.signal;
    } catch (const TrainingDiverged& e) {
      // Parameters loaded may themselves be the cause (finite, but too large to train from).
      float largest = 0;
      if (!o.load_path.empty())
        for (const float w : checkpoint->parameters) largest = std::max(largest, std::fabs(w));
      say(std::string("error: ") + e.what() +
          (o.load_path.empty() ? std::string()
                               : "; the run started from --load " + o.load_path +
                                     ", whose largest parameter magnitude is " + format_shortest(largest)) +
          (saved || save_implied ? "; the last good checkpoint stays in " + o.save_path : std::string()));
      return 1;
    }
  } catch (const UsageError& e) {
    say(e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    say(resuming ? "error: out of host memory; a resumed run needs what the interrupted one had (its batch size, replicas "
                   "and data set sizes are the checkpoint's)"
                 : "error: out of host memory; try a smaller --batch-size, fewer --replicas or a --train-limit");
    return 1;
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return 1;
  }
}

}  // namespace lenet::engine
