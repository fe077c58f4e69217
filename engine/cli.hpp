// lenet-train's command line: flags to options, backend choice, checkpoints, signals, exit statuses
// (0 done, 1 runtime error, 2 usage error, 128 + signal when stopped by SIGINT, SIGTERM or SIGHUP).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "engine/trainer.hpp"

namespace lenet::engine {

struct CliOptions {
  TrainOptions train;
  std::optional<int> num_gpus;
  std::optional<int> replicas;
  std::string backend = "auto";  // auto | cuda | cpu
  std::string mode = "graph";     // naive | graph (CUDA only)
  std::string data_dir;
  size_t train_limit = 0;  // 0: all
  size_t test_limit = 0;
  std::string save_path;    // --save: checkpoint after every epoch and when stopped
  std::string load_path;    // --load: start from a checkpoint's parameters
  std::string resume_path;  // --resume: continue a checkpointed run where it stopped
  // Which of the flags a checkpoint also records were given (a resumed run must not contradict them,
  // but for the mode, which it takes only as a default).
  bool epochs_given = false, seed_given = false, lr_given = false, batch_given = false, mode_given = false;
};

// Parses and validates argv. Throws UsageError with a one-line message; returns nullopt when --help or
// --version printed what was asked and the program should exit with status 0.
std::optional<CliOptions> parse_cli(int argc, const char* const* argv);

// The whole program; returns the exit status.
int run_cli(int argc, const char* const* argv);

}  // namespace lenet::engine
