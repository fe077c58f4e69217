// Runs lenet-train as a user does, in a scratch folder, and captures its exit status, stdout and stderr.
#pragma once
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace lenet::testing {

namespace fs = std::filesystem;

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Put before a command: it then sees no CUDA device, as on a machine without one (the runtime answers 100).
inline constexpr const char* kHideGpus = "CUDA_VISIBLE_DEVICES= ";

// Shell commands for a `then` below, with the run's pid in $pid: send it SIG (INT, TERM, HUP) and wait
// until it has taken it (no signal pending for the process in /proc, for at most 10 s; a fixed 0.3 s
// where /proc shows no pending signals), so that a signal sent next is not merged into this one. A run
// that has already ended makes the shell exit with status 99: what the test was to show would otherwise
// pass untested.
inline std::string send_signal(const std::string& sig) {
  const std::string status = "/proc/$pid/status";
  return "{ [ -e /proc/$pid ] && ! grep -q '^State:.*zombie' " + status + " 2>/dev/null || exit 99; }; kill -" + sig +
         " $pid; if grep -q '^ShdPnd:' " + status + " 2>/dev/null; then n=0; while [ $n -lt 1000 ] && grep -Eq "
         "'^ShdPnd:[[:space:]]*0*[1-9a-f]' " + status + " 2>/dev/null; do sleep 0.01; n=$((n + 1)); done; else sleep 0.3; fi; ";
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lenet-cli-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `prefix`: shell commands before the run (a ulimit, a trap). `then`, when given, starts with "&" and
  // is what the shell does while the run goes on in the background (send it signals), ending with the
  // run's status (`wait $pid; exit $?`). The shell starts such a job with SIGINT ignored; unless
  // `as_script_job_` is set, env gives it the default back, as for a run started from a terminal.
  Result run(const std::string& args, const std::string& prefix = "", const std::string& then = "") {
    const std::string start = then.empty() || as_script_job_ ? "" : "env --default-signal=INT ";
    const std::string cmd = prefix + start + (hide_gpus_ ? kHideGpus : "") + "LENET_DATA_DIR='" + data_dir_ +
                            "' " + launcher_ + "'" LENET_TRAIN_EXE "' " + args +
                            " >'" + (dir_ / "out").string() + "' 2>'" + (dir_ / "err").string() + "' </dev/null" + then;
    const int raw = std::system(cmd.c_str());
    Result r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = slurp(dir_ / "out");
    r.err = slurp(dir_ / "err");
    return r;
  }

  // A usage error: status 2 and one line on stderr that contains `needle`.
  void expect_usage_error(const std::string& args, const std::string& needle) {
    const Result r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << " said: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << " said: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }

  fs::path dir_;
  bool as_script_job_ = false;
  bool hide_gpus_ = false;  // the run sees no CUDA device (kHideGpus)
  std::string data_dir_ = LENET_TEST_DATA_DIR;  // LENET_DATA_DIR for the run
  std::string launcher_;                        // a program that starts lenet-train, with a space after it
};

}  // namespace lenet::testing
