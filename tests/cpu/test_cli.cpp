// lenet-train as a user runs it: usage errors exit 2 with one clear line, runtime errors exit 1, a run
// prints the source text's final line and writes a metrics file with exactly the documented fields.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <regex.h>
#include <sched.h>
#include <spawn.h>
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "byte_files.hpp"
#include "cli_runner.hpp"
#include "engine/checkpoint.hpp"
#include "engine/output_file.hpp"
#include "engine/stop_signals.hpp"
#include "io/dataset.hpp"
#include "io/idx.hpp"
#include "model/gemm.hpp"
#include "model/lenet.hpp"
#include "train_steps.hpp"

namespace {

using lenet::testing::Cli;
using lenet::testing::Result;
using lenet::testing::send_signal;
namespace fs = std::filesystem;

// A checkpoint of the initial parameters, one minibatch of 64 into a two-epoch run on 128 examples, at
// `path`; returns the path.
std::string small_checkpoint(const fs::path& path) {
  lenet::engine::save_checkpoint(path.string(), lenet::model::init_parameters<float>(1),
                                 {1, 2, 1, 2, 0.2, 64, 1, 128, {}});
  return path.string();
}

// Whether `text` holds a match of the POSIX extended regular expression `pattern` (C's regex, not
// <regex>, whose std::function members GCC 12 warns about under the sanitizers' build).
bool has_match(const std::string& text, const std::string& pattern) {
  regex_t re;
  if (::regcomp(&re, pattern.c_str(), REG_EXTENDED | REG_NOSUB) != 0) {
    ADD_FAILURE() << "not a regular expression: " << pattern;
    return false;
  }
  const bool found = ::regexec(&re, text.c_str(), 0, nullptr, 0) == 0;
  ::regfree(&re);
  return found;
}

// A path as a shell word, in double quotes (where only $, `, " and \\ are special).
std::string quoted(const std::string& path) {
  std::string q = "\"";
  for (const char c : path) q += std::string(std::strchr("$`\"\\", c) ? "\\" : "") + c;
  return q + "\"";
}

// What the shell does after starting a run in the background: wait until its first epoch's metrics
// record is written (training is under way, not loading), then go on with the rest (send signals).
std::string once_training(const std::string& metrics) {
  return " & pid=$!; while kill -0 $pid 2>/dev/null && ! [ -s " + quoted(metrics) + " ]; do sleep 0.05; done; ";
}

TEST_F(Cli, UsageErrorsExit2WithOneLine) {
  expect_usage_error("--no-such-flag", "--no-such-flag");
  expect_usage_error("--batch-size 0", "--batch-size: 0 is out of range (1 to 2147483647)");
  expect_usage_error("--batch-size abc", "--batch-size");
  expect_usage_error("--lr 0", "--lr");
  expect_usage_error("--lr -0.1", "--lr");
  expect_usage_error("--lr nan", "--lr");
  expect_usage_error("--lr inf", "--lr");
  expect_usage_error("--replicas 0", "--replicas");
  for (const std::string flag : {"--save", "--load", "--resume"})
    expect_usage_error(flag + " -", flag + " -: a checkpoint is a file, not a stream; for a file named -, give ./-");
  expect_usage_error("--replicas 257", "--replicas");
  expect_usage_error("--batch-size 4 --replicas 5", "--replicas");
  expect_usage_error("--num-gpus 0", "--num-gpus");
  expect_usage_error("--epochs 0", "--epochs");
  expect_usage_error("--quiet --quiet --epochs 2 --epochs=3", "--epochs: given more than once");
  expect_usage_error("--train-limit 0", "--train-limit");
  expect_usage_error("--backend tpu", "--backend");
  expect_usage_error("--mode fast", "--mode");
  expect_usage_error("--seed -1", "--seed");
  expect_usage_error("--seed 18446744073709551616", "--seed");  // 2^64
  expect_usage_error("--seed 010", "--seed 010: must be an integer from 0 to 2^64-1");
  expect_usage_error("--seed 01", "--seed 01: must be an integer from 0 to 2^64-1");
  // Integers are decimal: not CLI11's octal ("010" would be 8) or hex, and not clamped to a range.
  expect_usage_error("--epochs 010", "--epochs: 010 is not a decimal integer");
  expect_usage_error("--batch-size 0x10", "--batch-size: 0x10 is not a decimal integer");
  expect_usage_error("--replicas 1e3", "--replicas: 1e3 is not a decimal integer");
  expect_usage_error("--train-limit 18446744073709551615", "--train-limit: 18446744073709551615 is out of range");
  expect_usage_error("--batch-size 4294967297", "--batch-size: 4294967297 is out of range (1 to 2147483647)");
  expect_usage_error("--epochs -2147483649", "--epochs: -2147483649 is out of range (0 to 2147483647)");
  expect_usage_error("--epochs -1", "--epochs: -1 is out of range (0 to 2147483647)");
  // A learning rate that float32 rounds to 0 or to infinity.
  expect_usage_error("--lr 1e-50", "--lr 1e-50: must be a decimal number that rounds to a finite float32 above 0");
  // The value as typed: beyond a double too, and text that only a lax parse would take.
  for (const char* lr : {"1e39", "1e400", "infinity", "' 0.2'", "'0.2 '", "0x1p-3", "0.2x", "++0.2", "+-0.2"}) {
    std::string shown = lr;
    if (shown[0] == '\'') shown = shown.substr(1, shown.size() - 2);
    expect_usage_error(std::string("--lr ") + lr, "--lr " + shown + ": must be a decimal number that rounds to a finite float32 above 0");
  }
}

TEST_F(Cli, BackendCudaWithoutDeviceIsAUsageError) {
  hide_gpus_ = true;
  expect_usage_error("--backend cuda", "--backend cuda: no CUDA device answers (");
  expect_usage_error("--backend cuda", "); --backend cpu trains on the CPU\n");
}

// cuBLAS is opened only where a GPU path or --version needs it (graphs/cublas_library.hpp): a CPU run, --help
// and a usage error never open it, which saves every such process libcublasLt's start-up (about 0.4 s and
// 200 MB on a 2-core VM). The dynamic loader's own log (LD_DEBUG=files) says which libraries it opened.
TEST_F(Cli, CpuRunsNeverOpenCublas) {
  if (!LENET_HAVE_CUDA) GTEST_SKIP() << "this build has no CUDA";
  const auto opened_cublas = [](const Result& r) { return r.err.find("libcublas") != std::string::npos; };
  const std::string log = "LD_DEBUG=files ";
  EXPECT_TRUE(opened_cublas(run("--version", log)));  // the log would show it
  for (const char* args :
       {"--help", "--epochs x", "--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64"}) {
    const Result r = run(args, log);
    EXPECT_FALSE(opened_cublas(r)) << args;
    EXPECT_NE(r.err.find("file="), std::string::npos) << args << ": no loader log";
  }
}

// A build configured with -DLENET_WITH_CUDA=OFF says so where a user looks: --version, --backend cuda's
// refusal and --backend auto's notice.
TEST_F(Cli, BuildWithoutCudaSaysSo) {
  if (LENET_HAVE_CUDA) GTEST_SKIP() << "this build has CUDA";
  EXPECT_NE(run("--version").out.find("(no CUDA; CPU GEMM "), std::string::npos);
  expect_usage_error("--backend cuda", "--backend cuda: no CUDA device answers (this build has no CUDA: it was "
                                       "configured with -DLENET_WITH_CUDA=OFF)");
  const Result r = run("--quiet --epochs 1 --train-limit 64 --test-limit 64");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("(this build has no CUDA: it was configured with -DLENET_WITH_CUDA=OFF); training on the CPU"),
            std::string::npos) << r.err;
}

// --backend auto without a GPU says it trains on the CPU, once the run is certain: a refused run's
// stderr is its one error line.
TEST_F(Cli, AutoBackendNoticeOnlyWhenTraining) {
  hide_gpus_ = true;
  Result r = run("--quiet --epochs 1 --train-limit 64 --test-limit 64");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("no CUDA device answers"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("training on the CPU"), std::string::npos) << r.err;
  r = run("--quiet --data-dir '" + (dir_ / "no-data").string() + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // Refused once the backend is set up: the metrics file a resume appends to ends in a line that is no record.
  const std::string ckpt = (dir_ / "c.safetensors").string(), metrics = (dir_ / "m.jsonl").string();
  const std::string common = "--quiet --train-limit 64 --test-limit 64 --save '" + ckpt + "' --metrics '" + metrics + "' ";
  ASSERT_EQ(run(common + "--epochs 1").status, 0);
  std::ofstream(metrics, std::ios::app) << "42";
  r = run(common + "--epochs 2 --resume '" + ckpt + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("is not a metrics record"), std::string::npos) << r.err;
}

TEST_F(Cli, HelpAndVersionExit0) {
  Result r = run("--help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--num-gpus", "--replicas", "--batch-size", "--lr", "--epochs", "--backend", "--mode",
                           "--seed", "--data-dir", "--train-limit", "--test-limit", "--metrics", "--quiet"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("lenet-train"), std::string::npos) << r.out;
  // A stdout that cannot take the text is an error, as for a run's final line.
  for (const char* flag : {"--help", "--version"}) {
    const std::string err = (dir_ / "full-err").string();
    const int raw = std::system(("'" LENET_TRAIN_EXE "' " + std::string(flag) + " >/dev/full 2>'" + err + "'").c_str());
    EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 1) << flag << ": " << raw;
    EXPECT_EQ(lenet::testing::slurp(err), "lenet-train: error: stdout: write failed (No space left on device)\n") << flag;
  }
}

// lenet-train (and lenet-bench, the same way) runs the OpenBLAS kernels this CPU runs best where OpenBLAS
// took its generic ones, unless OPENBLAS_CORETYPE says which to take. What OpenBLAS takes by itself is what
// it took in this test, started without OPENBLAS_CORETYPE.
TEST_F(Cli, StartsAgainWithTheGemmKernelsFittingThisCpu) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) GTEST_SKIP() << "OPENBLAS_CORETYPE is set for this test";
  const std::string own = lenet::model::gemm_kernels();
  if (own.empty()) {
    EXPECT_NE(run("--version").out.find("CPU GEMM portable)"), std::string::npos);
    return;
  }
  const char* better = lenet::model::better_gemm_kernels_here();
  Result r = run("--version");
  EXPECT_NE(r.out.find(std::string("CPU GEMM openblas, ") + (better ? better : own.c_str()) + " kernels)"),
            std::string::npos) << r.out;
  r = run("--version", "export OPENBLAS_CORETYPE=Prescott; ");
  EXPECT_NE(r.out.find("CPU GEMM openblas, Prescott kernels)"), std::string::npos) << r.out;
  // Started again, the process keeps its name, which ps and pkill go by (not "exe", the name of the link
  // /proc/self/exe), and, started by the dynamic loader, it keeps its arguments (the loader's file is not
  // the program to start again).
  const std::string metrics = (dir_ / "m.jsonl").string(), comm = (dir_ / "comm").string();
  r = run("--backend cpu --quiet --train-limit 3000 --batch-size 3000 --test-limit 100 --epochs 100 --metrics " + quoted(metrics),
          "", once_training(metrics) + "cat /proc/$pid/comm > " + quoted(comm) + "; kill -TERM $pid; wait $pid; exit $?");
  EXPECT_EQ(r.status, 143) << r.err;
  EXPECT_EQ(lenet::testing::slurp(comm), "lenet-train\n");
  if (const std::string loader = "/lib64/ld-linux-x86-64.so.2"; fs::exists(loader)) {
    launcher_ = loader + " ";
    r = run("--backend cpu --quiet --train-limit 100 --test-limit 100 --epochs 1");
    EXPECT_EQ(r.status, 0) << r.err;
  }
}

TEST_F(Cli, MissingDataExits1AndSaysHowToGetIt) {
  const Result r = run("--backend cpu --data-dir '" + (dir_ / "nowhere").string() + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("apt-get install dataset-fashion-mnist"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("train-images-idx3-ubyte"), std::string::npos) << r.err;
}

// What a message shows of a name: C0 controls, DEL and the C1 controls' UTF-8 form escaped, the rest of
// UTF-8 (whose continuation bytes include 0x80..0x9f) as it is.
TEST(OneLine, EscapesControlCharactersAndKeepsTheRestOfUtf8) {
  using lenet::engine::one_line;
  EXPECT_EQ(one_line("a\nb\tc\rd\x1b[2J\x7f\x01"), "a\\nb\\tc\\rd\\x1b[2J\\x7f\\x01");
  EXPECT_EQ(one_line("\x1f\x20"), "\\x1f ");  // the last C0 control, and the first byte that is none
  EXPECT_EQ(one_line("csi \xc2\x9b" "31m, nel \xc2\x85, end \xc2"), "csi \\xc2\\x9b31m, nel \\xc2\\x85, end \xc2");
  const std::string utf8 = "na\xc3\xafve \xc5\x9b \xc2\xa0\xe2\x82\xac \xf0\x9f\x98\x80";  // ï ś NBSP € 😀
  EXPECT_EQ(one_line(utf8), utf8);
}

// A stream that fails without an errno (here one with no buffer to write into): the message makes up no
// reason ("Success").
TEST(OneLine, AWriteThatFailsWithoutAnErrnoGivesNoReason) {
  std::ostream nowhere(nullptr);
  EXPECT_EQ(lenet::engine::write_all(nowhere, "x\n", "stdout"), "stdout: write failed");
}

// A newline or a terminal's escape sequence in a name or a flag's value is shown escaped: every message
// stays one line and cannot move the cursor.
TEST_F(Cli, ControlBytesInNamesAreEscaped) {
  const Result r = run("--backend cpu --data-dir \"$(printf '" + dir_.string() + "/no\\nwhere\\033[2J')\"");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("lenet-train: error: " + dir_.string() + "/no\\nwhere\\x1b[2J/train-images-idx3-ubyte(.gz): not found", 0), 0u)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  expect_usage_error("--seed \"$(printf '1\\t2\\r3')\"", "--seed 1\\t2\\r3: must be an integer");
}

TEST_F(Cli, LimitLargerThanTheDataSetIsAUsageError) {
  expect_usage_error("--backend cpu --train-limit 60001", "--train-limit 60001: the training set has only 60000");
  expect_usage_error("--backend cpu --test-limit 10001", "--test-limit 10001: the test set has only 10000");
}

// The README's promise for the CPU backend: chunk gradients are added in a fixed order, so the trained
// parameters are the same bits for any thread count (two replicas, a partial last minibatch). OpenBLAS,
// where it is linked, must run single-threaded inside each chunk: its own threads would split a GEMM by
// their count and change its last bits. The run takes at most one thread per CPU it may use, so 3 asked
// for are 2 or 3.
TEST_F(Cli, SameParametersForAnyThreadCount) {
  cpu_set_t cpus;
  if (::sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) < 2) GTEST_SKIP() << "needs two CPUs";
  std::vector<std::string> saved;
  for (const char* threads : {"1", "3"}) {
    const std::string file = (dir_ / (std::string("t") + threads + ".safetensors")).string();
    const Result r = run("--backend cpu --replicas 2 --batch-size 100 --epochs 2 --train-limit 250 --test-limit 64 "
                         "--quiet --save '" + file + "'", std::string("OMP_NUM_THREADS=") + threads + " ");
    ASSERT_EQ(r.status, 0) << r.err;
    saved.push_back(lenet::testing::slurp(file));
  }
  EXPECT_FALSE(saved[0].empty());
  EXPECT_TRUE(saved[0] == saved[1]) << "the checkpoints of 1 thread and more differ";
}

// What the environment can do to a run: each is one line and exit 1, or a run that goes on, never a
// silent death by signal or a result lost without a word.
TEST_F(Cli, HostileEnvironment) {
  const std::string quick = "--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64";
  // A stdout that cannot take the final line (`then` redirects again, after run's own redirections).
  Result r = run(quick, "", " >/dev/full");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "lenet-train: error: stdout: write failed (No space left on device)\n");
  r = run(quick, "", " >&-");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "lenet-train: error: stdout: write failed (Bad file descriptor)\n");
  // A closed stderr: the metrics file must not take its place (and the progress lines with it).
  const fs::path metrics = dir_ / "m.jsonl";
  r = run("--backend cpu --epochs 2 --train-limit 64 --test-limit 64 --metrics '" + metrics.string() + "'", "", " 2>&-");
  EXPECT_EQ(r.status, 0);
  std::ifstream in(metrics);
  int records = 0;
  for (std::string line; std::getline(in, line); ++records) EXPECT_EQ(line.rfind("{\"backend\"", 0), 0u) << line;
  EXPECT_EQ(records, 2);
  // A metrics reader that leaves after the first record.
  const fs::path pipe = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  // (The reader has the pipe open before the run starts, which refuses a pipe without one; a run that
  // went on would take a minute, past the timeout.)
  r = run("--backend cpu --quiet --epochs 1000 --train-limit 256 --test-limit 64 --metrics '" + pipe.string() + "'",
          "exec 3<>'" + pipe.string() + "'; timeout 60 head -n 1 <&3 >/dev/null & exec 3<&-; timeout -k 10 60 env ");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "lenet-train: error: " + pipe.string() + ": write failed (Broken pipe) (--metrics)\n");
  // A progress reader that leaves (`2>&1 | head -n 1`) stops the run (status 1), which would go on unseen
  // (status 0, or the timeout's 124).
  const std::string piped = "bash -c \"LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' timeout 120 '" LENET_TRAIN_EXE
                            "' --backend cpu --epochs 1000 --train-limit 256 --test-limit 64 2>&1 | head -n 1 >/dev/null; "
                            "exit \\${PIPESTATUS[0]}\"";
  const int raw = std::system(piped.c_str());
  EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 1) << raw;
  // A file-size limit below a checkpoint's 516 KB: the save fails, leaving no temporary file.
  const fs::path ckpt = dir_ / "c.safetensors";
  r = run(quick + " --save '" + ckpt.string() + "'", "ulimit -f 200; ");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find("c.safetensors"), std::string::npos) << entry.path();
  // A loop of symbolic links names no file to write.
  fs::create_symlink("loop2", dir_ / "loop1");
  fs::create_symlink("loop1", dir_ / "loop2");
  for (const char* flag : {"--save", "--metrics"}) {
    r = run(quick + " " + flag + " '" + (dir_ / "loop1").string() + "'");
    EXPECT_EQ(r.status, 1) << flag;
    EXPECT_NE(r.err.find("loop1: a loop of symbolic links, naming no file"), std::string::npos) << r.err;
    EXPECT_TRUE(fs::is_symlink(dir_ / "loop1"));
  }
  // More threads asked for than there are cores: as many as there are cores.
  r = run(quick, "OMP_NUM_THREADS=100000 ");
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(Cli, UnwritableMetricsFileExits1NamingIt) {
  const std::string path = (dir_ / "no-such-dir" / "m.jsonl").string();
  const Result r = run("--backend cpu --epochs 1 --train-limit 64 --test-limit 64 --metrics '" + path + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
}

TEST_F(Cli, MetricsIntoANamedPipe) {
  const fs::path pipe = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  const std::string args = "--backend cpu --epochs 2 --train-limit 64 --test-limit 64 --quiet --metrics '" +
                           pipe.string() + "'";
  // No reader: opening it would wait for one, maybe for ever (here 60 s, then a SIGTERM, which a run
  // waiting there takes as a stop request only, and a SIGKILL 10 s later); instead a clear error before
  // training.
  Result r = run(args, "timeout -k 10 60 env ");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--metrics " + pipe.string() + ": a named pipe that no process reads"), std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // With a reader (this test, open before the run starts; two records fit in the pipe's buffer), it
  // gets every record, and the end of the stream only when the run is over.
  const int reader = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  r = run(args, "timeout -k 10 60 env ");
  std::string records;
  char buf[4096];
  for (ssize_t n; (n = ::read(reader, buf, sizeof buf)) > 0;) records.append(buf, static_cast<size_t>(n));
  ::close(reader);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(records.begin(), records.end(), '\n'), 2) << records;
}

// A resumed run appends to a named pipe as a fresh run writes to it: it reads nothing back from the pipe to
// mend a last line (opening it to read would wait for a writer, for ever: here 60 s, then a SIGTERM that
// is only a stop request to a run waiting there, and a SIGKILL 10 s later).
TEST_F(Cli, ResumeIntoANamedPipeReadsNothingBackFromIt) {
  const fs::path pipe = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  const int reader = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  const std::string c = small_checkpoint(dir_ / "c.safetensors");  // one epoch of two to go
  const Result r = run("--backend cpu --quiet --test-limit 64 --resume '" + c + "' --metrics '" + pipe.string() + "'",
                       "timeout -k 10 60 env ");
  std::string records;
  char buf[4096];
  for (ssize_t n; (n = ::read(reader, buf, sizeof buf)) > 0;) records.append(buf, static_cast<size_t>(n));
  ::close(reader);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(records.begin(), records.end(), '\n'), 1) << records;
}

// --metrics naming the file stdout or stderr writes (here a regular file, where a second open would
// write over the stream's lines from offset 0): every record lands whole, in order with the other lines.
TEST_F(Cli, MetricsIntoStdoutOrStderr) {
  const std::string args = "--backend cpu --epochs 2 --train-limit 64 --test-limit 64 --metrics ";
  auto records = [](const std::string& text, const std::string& other) {
    std::istringstream in(text);
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("{", 0) != 0) {
        EXPECT_NE(line.find(other), std::string::npos) << "a line that is neither a record nor expected: " << line;
        continue;
      }
      EXPECT_EQ(nlohmann::json::parse(line)["epoch"], ++n) << text;
    }
    return n;
  };
  // stdout holds the records alone (for a JSON Lines reader), and the final line goes to stderr.
  Result r = run(args + "/dev/stdout --quiet");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(records(r.out, "(no other line)"), 2) << r.out;
  EXPECT_EQ(r.err.rfind("test acc: ", 0), 0u) << r.err;
  r = run(args + "'" + (dir_ / "out").string() + "' --quiet");  // the same file by its name
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(records(r.out, "(no other line)"), 2) << r.out;
  r = run(args + "- --quiet");  // "-" names stdout too
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(records(r.out, "(no other line)"), 2) << r.out;
  EXPECT_EQ(r.err.rfind("test acc: ", 0), 0u) << r.err;
  // Whatever stdout writes (a terminal; here the device /dev/null), "-" takes it and the final line goes
  // to stderr.
  const std::string to_device = "LENET_DATA_DIR='" + data_dir_ + "' '" LENET_TRAIN_EXE "' " + args + "- --quiet >/dev/null 2>'" +
                                (dir_ / "err").string() + "'";
  ASSERT_EQ(std::system(to_device.c_str()), 0);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err").rfind("test acc: ", 0), 0u) << lenet::testing::slurp(dir_ / "err");
  // A closed stdout (which the program fills with /dev/null for reading) is refused before training.
  const std::string closed = "LENET_DATA_DIR='" + data_dir_ + "' '" LENET_TRAIN_EXE "' " + args + "- --quiet >&- 2>'" +
                             (dir_ / "err").string() + "'";
  EXPECT_EQ(WEXITSTATUS(std::system(closed.c_str())), 1);
  EXPECT_EQ(lenet::testing::slurp(dir_ / "err"),
            "lenet-train: error: /dev/stdout: closed, nothing can be written to it (--metrics)\n");
  r = run(args + "/dev/stderr");  // between the progress lines
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(records(r.err, "epoch "), 2) << r.err;
  EXPECT_NE(r.err.find("epoch 2/2"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.rfind("test acc: ", 0), 0u) << r.out;
}

// Where lenet-bench writes its timelines: beside the file its --json names, never beside a pipe or a device.
TEST_F(Cli, FolderBesideAnOutputFile) {
  using lenet::engine::folder_beside;
  fs::create_directories(dir_ / "real");
  std::ofstream(dir_ / "real" / "r.json") << "{}";
  fs::create_symlink(dir_ / "real" / "r.json", dir_ / "link.json");
  EXPECT_EQ(folder_beside((dir_ / "real" / "r.json").string()), dir_ / "real");
  EXPECT_EQ(folder_beside((dir_ / "link.json").string()), dir_ / "real");
  EXPECT_EQ(folder_beside((dir_ / "new.json").string()), dir_);
  EXPECT_EQ(folder_beside("new.json"), fs::current_path());
  ASSERT_EQ(::mkfifo((dir_ / "pipe").c_str(), 0600), 0);
  EXPECT_EQ(folder_beside((dir_ / "pipe").string()), fs::path());
  EXPECT_EQ(folder_beside("/dev/null"), fs::path());
  EXPECT_EQ(folder_beside(""), fs::path());
}

TEST_F(Cli, RunPrintsFinalLineAndWritesMetrics) {
  const fs::path metrics = dir_ / "m.jsonl";
  std::ofstream(metrics) << "an older run's record, which a new run replaces\n";
  const Result r = run("--backend cpu --num-gpus 2 --epochs 2 --batch-size 64 --train-limit 300 --test-limit 100 "
                       "--seed +17 --metrics '" + metrics.string() + "'",  // '+': as every integer flag takes it
                       "OMP_NUM_THREADS=1 ");
  ASSERT_EQ(r.status, 0) << r.err;
  // The source text's line: accuracy to 2 decimals, seconds to 3 significant digits, the devices.
  EXPECT_TRUE(has_match(r.out, "^test acc: [01]\\.[0-9]{2}, [0-9.]+ sec/epoch on \\[cpu, cpu]\n$")) << r.out;
  EXPECT_NE(r.err.find("epoch 2/2"), std::string::npos) << r.err;

  std::ifstream in(metrics);
  std::string line;
  int n = 0;
  const std::set<std::string> fields = {"epoch", "epochs", "train_loss", "train_acc", "test_acc", "epoch_seconds",
                                        "examples_per_second", "backend", "mode", "replicas", "devices",
                                        "batch_size", "lr", "seed", "cpu_threads"};
  while (std::getline(in, line)) {
    ++n;
    const nlohmann::json j = nlohmann::json::parse(line);
    std::set<std::string> keys;
    for (const auto& item : j.items()) keys.insert(item.key());
    EXPECT_EQ(keys, fields);
    EXPECT_EQ(j["epoch"], n);
    EXPECT_EQ(j["epochs"], 2);
    EXPECT_EQ(j["backend"], "cpu");
    EXPECT_EQ(j["replicas"], 2);
    EXPECT_EQ(j["devices"], nlohmann::json::array({"cpu", "cpu"}));
    EXPECT_EQ(j["batch_size"], 64);
    EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 0.2);
    EXPECT_EQ(j["seed"], 17);
    EXPECT_EQ(j["cpu_threads"], 1);  // OpenMP's default, as OMP_NUM_THREADS sets it
    EXPECT_GT(j["epoch_seconds"].get<double>(), 0.0);
    EXPECT_GE(j["test_acc"].get<double>(), 0.0);
    EXPECT_LE(j["test_acc"].get<double>(), 1.0);
    EXPECT_NEAR(j["train_loss"].get<double>(), 2.30, 0.1);  // still on the ln 10 plateau after 10 small steps
  }
  EXPECT_EQ(n, 2);
}

TEST_F(Cli, QuietSilencesProgress) {
  const Result r = run("--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("epoch 1/1"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("sec/epoch on [cpu]"), std::string::npos) << r.out;
}

// Too large an lr without divergence: two steps, the second after one update at lr 1e6, make an epoch's
// loss of about 1.35e10, shown as such rather than in 11 digits. One update keeps it the same to five
// digits with OpenBLAS and the portable GEMM; ten steps at lr 50 (before) are chaotic: about 1e28 with
// one and an overflow with the other.
TEST_F(Cli, LossesFromAMillionOnAreInScientificNotation) {
  const Result r = run("--backend cpu --lr 1e6 --epochs 1 --train-limit 512 --test-limit 64");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has_match(r.err, R"(epoch 1/1: train loss [1-9]\.[0-9]{4}e\+[0-9]{2}, )")) << r.err;
}

TEST_F(Cli, SaveResumeEqualsUninterruptedAndLoadEvaluates) {
  const std::string a = (dir_ / "a.safetensors").string(), b = (dir_ / "b.safetensors").string();
  const std::string common = "--backend cpu --quiet --batch-size 64 --train-limit 500 --test-limit 100 ";
  ASSERT_EQ(run(common + "--epochs 2 --save '" + a + "'").status, 0);
  ASSERT_EQ(run(common + "--epochs 1 --save '" + b + "'").status, 0);
  // Without --save, the resumed run checkpoints to the file it resumed from; without --train-limit and
  // --test-limit, it takes the interrupted run's data set sizes from the checkpoint (which records them:
  // the bytes would differ otherwise).
  Result r = run("--backend cpu --quiet --epochs 2 --resume '" + b + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lenet::testing::checkpoint_difference(b, a), "") << "resumed checkpoint differs from the uninterrupted one";
  r = run(common + "--epochs 0 --load '" + a + "'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("no training on [cpu]"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "lenet-train: --train-limit: nothing trains with --epochs 0; ignored\n");
  const Result flags = run(common + "--epochs 0 --load '" + a + "' --seed 7 --lr 0.5");
  EXPECT_EQ(flags.status, 0) << flags.err;
  EXPECT_EQ(flags.out, r.out);
  EXPECT_EQ(flags.err, "lenet-train: --lr, --seed, --train-limit: nothing trains with --epochs 0; ignored\n");
  expect_usage_error(common + "--epochs 3 --resume '" + b + "' --lr 0.1", "--lr");
  expect_usage_error("--backend cpu --quiet --epochs 3 --resume '" + b + "' --batch-size 32",
                     "--batch-size differs from the value 64 saved in --resume");
  expect_usage_error(common + "--epochs 3 --resume '" + b + "' --seed 2", "--seed differs from the value 1 saved in --resume");
  expect_usage_error(common + "--load '" + a + "' --resume '" + b + "'", "--resume");
  expect_usage_error(common + "--resume '" + b + "'", "the run already did 16 steps, all 16 of its --epochs 2; raise --epochs to go on");
  expect_usage_error(common + "--epochs 1 --resume '" + b + "'", "the run already did 16 steps, more than the 8 of --epochs 1;");
  // Another test set would give metrics that do not compare with the interrupted run's.
  expect_usage_error("--backend cpu --quiet --epochs 3 --test-limit 50 --resume '" + b + "'",
                     "--test-limit differs from the value 100 saved in --resume");
  // A data set smaller than the checkpoint's sizes: the message says where the size came from.
  const std::filesystem::path small = dir_ / "small-data";
  std::filesystem::create_directory(small);
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"}) {
    for (const std::string suffix : {"", ".gz"}) {
      const std::filesystem::path real = std::filesystem::path(LENET_TEST_DATA_DIR) / (name + suffix);
      if (std::filesystem::exists(real)) std::filesystem::create_symlink(real, small / (name + suffix));
    }
  }
  // A test set of 50 examples.
  lenet::testing::write_bytes((small / "t10k-images-idx3-ubyte").string(), lenet::testing::idx_images(50));
  lenet::testing::write_bytes((small / "t10k-labels-idx1-ubyte").string(), lenet::testing::idx_labels(lenet::testing::Bytes(50, 0)));
  const std::string resume_small = "--backend cpu --quiet --epochs 3 --data-dir '" + small.string() + "' --resume '" + b + "'";
  expect_usage_error(resume_small, "the interrupted run's data set was larger (--test-limit 100: the test set has only 50");
  const Result given = run(resume_small + " --test-limit 100");  // the flag's own limit: said plainly
  EXPECT_EQ(given.status, 2);
  EXPECT_EQ(given.err.rfind("lenet-train: --test-limit 100: the test set has only 50", 0), 0u) << given.err;
  // The saved step count means other epochs with another --train-limit: refused, not reinterpreted.
  expect_usage_error("--backend cpu --quiet --train-limit 250 --test-limit 100 --epochs 3 --resume '" + b + "'",
                     "--train-limit differs from the value 500 saved in --resume");
  // 490 examples make as many minibatches of 64 as 500, but other ones: refused as well, before the
  // data set loads (a missing data folder is not what the refusal names).
  expect_usage_error("--backend cpu --quiet --train-limit 490 --test-limit 100 --epochs 3 --data-dir /nonexistent --resume '" +
                         b + "'",
                     "--train-limit differs from the value 500 saved in --resume");
  // The interrupted run's own size, given again, is accepted, and so is a rate that rounds to its float32.
  r = run("--backend cpu --quiet --train-limit 500 --test-limit 100 --lr 0.200000001 --epochs 3 --resume '" + b + "' --save '" +
          (dir_ / "c.safetensors").string() + "'");
  EXPECT_EQ(r.status, 0) << r.err;
  // Other training examples (here one label changed) would continue another run: refused.
  const std::filesystem::path other = dir_ / "other-data";
  std::filesystem::create_directory(other);
  const std::string real_dir = LENET_TEST_DATA_DIR;
  for (const char* name : {"train-images-idx3-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    const std::string real = lenet::io::find_data_file(real_dir, name);
    std::filesystem::create_symlink(real, other / std::filesystem::path(real).filename());
  }
  lenet::testing::Bytes labels = lenet::io::read_idx_labels(lenet::io::find_data_file(real_dir, "train-labels-idx1-ubyte"));
  labels[7] = static_cast<uint8_t>((labels[7] + 1) % 10);
  lenet::testing::write_bytes((other / "train-labels-idx1-ubyte").string(), lenet::testing::idx_labels(labels));
  expect_usage_error("--backend cpu --quiet --epochs 3 --data-dir '" + other.string() + "' --resume '" + b + "'",
                     "--resume " + b + ": the training examples differ from the interrupted run's (fingerprint ");
}

// A copy of checkpoint `from` at `to` whose JSON header `edit` changed (the data bytes as they were).
void rewrite_header(const std::string& from, const std::string& to, const std::function<void(nlohmann::json&)>& edit) {
  const lenet::testing::Parts p = lenet::testing::split(lenet::testing::read_bytes(from));
  nlohmann::json header = nlohmann::json::parse(p.header_text);
  edit(header);
  lenet::testing::write_bytes(to, lenet::testing::join(header.dump(), p.data));
}

TEST_F(Cli, ResumingAnOlderCheckpointTakesTheTestLimitAndSaysTheDataAreNotChecked) {
  // Checkpoints of older lenet-dp versions record neither the test set's size nor the training fingerprint.
  const std::string a = (dir_ / "a.safetensors").string(), older = (dir_ / "older.safetensors").string();
  ASSERT_EQ(run("--backend cpu --quiet --batch-size 64 --train-limit 128 --test-limit 100 --epochs 1 --save '" + a + "'").status, 0);
  rewrite_header(a, older, [](nlohmann::json& h) { h["__metadata__"].erase("test_examples"); });
  const Result r = run("--backend cpu --quiet --test-limit 50 --epochs 2 --resume '" + older + "'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lenet::engine::load_checkpoint(older).state->test_examples, 50u);  // written back by the resumed run
  // Without the fingerprint the training examples cannot be checked, which the run says (only then).
  const std::string unchecked = "lenet-train: --resume " + older + ": an older lenet-dp wrote it without a fingerprint";
  EXPECT_EQ(r.err.find(unchecked), std::string::npos) << r.err;
  rewrite_header(a, older, [](nlohmann::json& h) { h["__metadata__"].erase("train_fingerprint"); });
  const Result without = run("--backend cpu --quiet --epochs 2 --resume '" + older + "'");
  EXPECT_EQ(without.status, 0) << without.err;
  EXPECT_NE(without.err.find(unchecked), std::string::npos) << without.err;
}

// A checkpoint records the backend and mode that trained it. A resumed run keeps a CUDA run's mode unless
// --mode is given; its backend is --backend's, as ever. Trained another way, whose sums round
// differently, it says so in one line, naming the flag that would continue the run exactly where there is
// one. Host-independent: what a machine with a GPU does instead is checked there.
TEST_F(Cli, ResumeKeepsTheModeAndNamesAnotherWayOfTraining) {
  const std::string a = (dir_ / "a.safetensors").string(), cuda = (dir_ / "cuda.safetensors").string();
  auto saved = [&](const char* name) { return " --save '" + (dir_ / name).string() + "'"; };
  ASSERT_EQ(run("--backend cpu --quiet --batch-size 64 --train-limit 128 --test-limit 64 --epochs 1 --save '" + a + "'").status, 0);
  const nlohmann::json meta = nlohmann::json::parse(lenet::testing::split(lenet::testing::read_bytes(a)).header_text)["__metadata__"];
  EXPECT_EQ(meta["backend"], "cpu");
  EXPECT_EQ(meta["mode"], "cpu");
  rewrite_header(a, cuda, [](nlohmann::json& h) {
    h["__metadata__"]["backend"] = "cuda";
    h["__metadata__"]["mode"] = "naive";
  });
  const std::string other_way = "the sums round differently, so the final parameters will not be bitwise identical to an "
                                "uninterrupted run's";
  // A CPU run resumed with --backend auto: on the CPU where no GPU answers, as it was; on a GPU, said so.
  Result r = run("--quiet --epochs 2 --resume '" + a + "'" + saved("b.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  const bool no_gpu = r.out.find("on [cpu]") != std::string::npos;
  if (no_gpu) {
    EXPECT_NE(r.err.find("no CUDA device answers"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("the interrupted run trained"), std::string::npos) << r.err;
  } else {
    EXPECT_NE(r.err.find("the interrupted run trained on the CPU and this one trains on CUDA in graph mode; " + other_way +
                         " (--backend cpu would continue it exactly)"),
              std::string::npos)
        << r.err;
  }
  // A CUDA naive-mode run resumed on the CPU, asked for: no flag here would continue it exactly.
  r = run("--backend cpu --quiet --epochs 2 --resume '" + cuda + "'" + saved("c.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "lenet-train: --resume " + cuda +
                       ": the interrupted run trained on CUDA in naive mode and this one trains on the CPU; " + other_way + "\n");
  // With --backend auto: where no GPU answers, both notices; on a GPU, in naive mode and without either.
  r = run("--quiet --epochs 2 --resume '" + cuda + "'" + saved("d.safetensors"));
  ASSERT_EQ(r.status, 0) << r.err;
  if (no_gpu) {
    EXPECT_NE(r.err.find("no CUDA device answers"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("the interrupted run trained on CUDA in naive mode and this one trains on the CPU; " + other_way + "\n"),
              std::string::npos)
        << r.err;
  } else {
    EXPECT_EQ(r.err, "");
  }
}

// A failed write (a full disk) can leave the metrics file's last record cut short: the resumed run cuts
// that fragment off (a long one too: the file's end is read back in 64 KiB pieces), says so, and appends
// whole records after the whole ones. A last record that lacks only its newline keeps its place.
TEST_F(Cli, ResumeMendsARecordCutShort) {
  const std::string ckpt = (dir_ / "c.safetensors").string(), metrics = (dir_ / "m.jsonl").string();
  const std::string common = "--backend cpu --quiet --batch-size 64 --train-limit 128 --test-limit 64 --metrics '" + metrics + "' ";
  ASSERT_EQ(run(common + "--epochs 1 --save '" + ckpt + "'").status, 0);
  const std::string first = lenet::testing::slurp(metrics);
  std::string many;  // whole records over more than one 64 KiB piece: only the last line is read
  while (many.size() < 150000) many += first;
  const int whole = static_cast<int>(std::count(many.begin(), many.end(), '\n'));
  const std::string removed = "its last line was a record cut short (a failed write); removed it (that epoch keeps no "
                              "record where the checkpoint has it as done: the resumed run does not train it again)";
  for (const auto& [content, said, records] : std::vector<std::tuple<std::string, std::string, int>>{
           {first + "{\"epoch\": 2, \"train_lo", removed, 3},
           {many + "{\"epoch\": 2, \"train_lo", removed, whole + 2},
           {first + "{" + std::string(100000, 'x'), removed, 3},
           {"{\"epo", removed, 2},  // the interrupted run's first record cut short
           {first + "{\"epoch\": 2}", "its last record lacked its newline; added it", 4}}) {
    std::ofstream(metrics, std::ios::trunc) << content;
    // A resume refused for another reason leaves the file as it was: one line, nothing changed.
    expect_usage_error(common + "--epochs 1 --resume '" + ckpt + "'", "raise --epochs");
    EXPECT_EQ(lenet::testing::slurp(metrics), content);
    const Result r = run(common + "--epochs 3 --resume '" + ckpt + "' --save '" + (dir_ / "later.safetensors").string() + "'");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "lenet-train: --metrics " + metrics + ": " + said + "\n");
    std::ifstream in(metrics);
    int lines = 0;
    for (std::string line; std::getline(in, line); ++lines) EXPECT_TRUE(nlohmann::json::parse(line).contains("epoch")) << line;
    EXPECT_EQ(lines, records) << content.substr(0, 200);
  }
  // A last line without a newline that is not the start of a record is not ours to cut: refused, the
  // file as it was.
  // The last: a line of 1 MiB and a byte, whose last MiB alone would look like a record cut short.
  const std::vector<std::string> lasts = {"[1, 2]", "42", "  ", std::string(100000, 'x'),
                                          "{" + std::string(1 << 20, 'x'), "x{" + std::string((1 << 20) - 1, 'x')};
  for (const std::string& last : lasts) {
    std::ofstream(metrics, std::ios::trunc) << first << last;
    const Result r = run(common + "--epochs 3 --resume '" + ckpt + "' --save '" + (dir_ / "later.safetensors").string() + "'");
    EXPECT_EQ(r.status, 1) << last.substr(0, 20);
    EXPECT_EQ(r.err, "lenet-train: error: " + metrics + ": its last line, without a newline, is not a metrics record; end that "
                     "line or name another --metrics file\n") << last.substr(0, 20);
    EXPECT_EQ(lenet::testing::slurp(metrics), first + last);
  }
  // The same where stdout appends to the file.
  std::ofstream(metrics, std::ios::trunc) << first << "{\"epoch\": 2, \"train_lo";
  const std::string cmd = "LENET_DATA_DIR='" LENET_TEST_DATA_DIR "' '" LENET_TRAIN_EXE "' --backend cpu --quiet --epochs 2 --resume " +
                          quoted(ckpt) + " --save " + quoted((dir_ / "later.safetensors").string()) +
                          " --metrics /dev/stdout >>" + quoted(metrics) + " 2>" + quoted((dir_ / "err").string());
  const int raw = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0) << lenet::testing::slurp(dir_ / "err");
  const std::string glued_not = first + "{\"backend\":";  // the new record on a line of its own
  EXPECT_EQ(lenet::testing::slurp(metrics).substr(0, glued_not.size()), glued_not) << lenet::testing::slurp(metrics);
}

TEST_F(Cli, MetricsThatIsAHardLinkToTheCheckpointIsRefused) {
  const std::string c = small_checkpoint(dir_ / "c.safetensors"), m = (dir_ / "m.jsonl").string();
  fs::create_hard_link(c, m);
  expect_usage_error("--backend cpu --quiet --train-limit 128 --test-limit 64 --epochs 2 --resume '" + c +
                         "' --metrics '" + m + "'",
                     "--metrics and --resume name the same file");
}

TEST_F(Cli, OutputsThatNameADataFileAreRefused) {
  // A small data set of our own, since the outputs below name its files.
  const fs::path data = dir_ / "data";
  fs::create_directory(data);
  lenet::testing::write_data_set(data.string(), 64, 32);
  const std::string labels = (data / "train-labels-idx1-ubyte").string(), images = (data / "t10k-images-idx3-ubyte").string();
  const std::string run_on = "--backend cpu --quiet --epochs 1 --data-dir '" + data.string() + "' ";
  ASSERT_EQ(run(run_on).status, 0);
  const auto size_before = fs::file_size(labels);
  expect_usage_error(run_on + "--save '" + labels + "'", "--save " + labels + " names the data file " + labels);
  // Through a symbolic link too, and for the metrics file.
  fs::create_symlink(images, dir_ / "m.jsonl");
  expect_usage_error(run_on + "--metrics '" + (dir_ / "m.jsonl").string() + "'", "names the data file " + images);
  EXPECT_EQ(fs::file_size(labels), size_before);
  // A gzipped copy beside a raw file is not read, and is still the data set's.
  const std::string zipped = labels + ".gz";
  fs::copy_file(labels, zipped);
  expect_usage_error(run_on + "--metrics '" + zipped + "'", "--metrics " + zipped + " names the data file " + zipped);
  EXPECT_EQ(fs::file_size(zipped), size_before);
  EXPECT_EQ(run(run_on).status, 0) << "the data set is intact";
}

TEST_F(Cli, ParametersOnlySafetensorsLoadsButCannotResume) {
  const std::string ours = (dir_ / "ours.safetensors").string(), torch = (dir_ / "torch.safetensors").string();
  const std::string common = "--backend cpu --quiet --batch-size 64 --train-limit 256 --test-limit 200 ";
  ASSERT_EQ(run(common + "--epochs 1 --save '" + ours + "'").status, 0);
  // The same tensors without our metadata, as PyTorch's save_file writes them.
  rewrite_header(ours, torch, [](nlohmann::json& h) { ASSERT_EQ(h.erase("__metadata__"), 1u); });
  const Result a = run(common + "--epochs 0 --load '" + ours + "'");
  const Result b = run(common + "--epochs 0 --load '" + torch + "'");
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  expect_usage_error(common + "--epochs 2 --resume '" + torch + "'", "start from them with --load");
}

TEST_F(Cli, UnwritableSaveFolderExits1BeforeTraining) {
  const std::string path = (dir_ / "missing" / "c.safetensors").string();
  const Result r = run("--backend cpu --epochs 1 --train-limit 64 --test-limit 64 --save '" + path + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("epoch 1/1"), std::string::npos) << "the check must come before training";
}

TEST_F(Cli, CorruptCheckpointExits1NamingIt) {
  const std::string bad = (dir_ / "bad.safetensors").string();
  std::ofstream(bad) << "not a checkpoint";
  const Result r = run("--backend cpu --epochs 0 --load '" + bad + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
}

// A file named in a current folder that was removed (another shell's rm -r) cannot be written, and the
// line says why, where the folder's name is empty.
TEST_F(Cli, OutputInARemovedCurrentFolderIsRefusedBeforeTraining) {
  for (const char* flag : {"--save", "--metrics"}) {
    const Result r = run(std::string("--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64 ") + flag + " x",
                         "cd " + quoted(dir_.string()) + " && mkdir gone && cd gone && rmdir ../gone && ");
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(r.err, std::string("lenet-train: error: x: cannot find the current folder (No such file or directory) (") + flag + ")\n");
  }
}

TEST_F(Cli, OutputFlagsThatCannotBeHonouredAreRefusedBeforeTraining) {
  // Empty values, which CLI11 would read as 0 or as the default folder.
  for (const char* flag : {"--save", "--metrics", "--load", "--resume", "--data-dir", "--epochs", "--batch-size", "--lr",
                           "--seed", "--train-limit"})
    expect_usage_error(std::string("--backend cpu ") + flag + " ''", std::string(flag) + ": empty value");
  // Also where a check of the value refuses it first, and written with "=", where CLI11 would take the
  // next argument as the value.
  for (const char* flag : {"--backend", "--mode", "--num-gpus"})
    expect_usage_error(std::string(flag) + " ''", std::string(flag) + ": empty value");
  for (const char* flag : {"--metrics", "--save", "--epochs", "--lr", "--data-dir"}) {
    expect_usage_error(std::string("--backend cpu ") + flag + "= --quiet", std::string(flag) + ": empty value");
    expect_usage_error(std::string("--backend cpu ") + flag + "=", std::string(flag) + ": empty value");
  }
  // A value left out: CLI11 would take the next option as the value (a metrics file named --quiet).
  expect_usage_error("--backend cpu --metrics --quiet",
                     "--metrics: no value before the option --quiet (a value that is an option's name goes after =: "
                     "--metrics=--quiet)");
  expect_usage_error("--save --lr=0.1", "--save: no value before the option --lr=0.1");
  expect_usage_error("--metrics -- --save --quiet", "--save: no value before the option --quiet");  // "--": a value
  ASSERT_EQ(run("--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64 --metrics=--quiet",
                "cd " + quoted(dir_.string()) + "; ").status,
            0);
  EXPECT_TRUE(fs::is_regular_file(dir_ / "--quiet"));
  const std::string a = (dir_ / "a.safetensors").string();
  ASSERT_EQ(run("--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64 --save '" + a + "'").status, 0);
  // The metrics file cannot also be a checkpoint read or written (one would destroy the other).
  const std::string quick = "--backend cpu --quiet --epochs 2 --train-limit 64 --test-limit 64 ";
  expect_usage_error(quick + "--save '" + (dir_ / "c").string() + "' --metrics '" + (dir_ / "." / "c").string() + "'",
                     "--metrics and --save name the same file");
  expect_usage_error(quick + "--load '" + a + "' --metrics '" + a + "'", "--metrics and --load name the same file");
  // Also through a symbolic link to a file that does not exist yet.
  std::filesystem::create_symlink("m.jsonl", dir_ / "link");
  expect_usage_error(quick + "--metrics '" + (dir_ / "link").string() + "' --save '" + (dir_ / "m.jsonl").string() + "'",
                     "--metrics and --save name the same file");
  expect_usage_error("--backend cpu --epochs 0 --load '" + a + "' --save '" + (dir_ / "b").string() + "'",
                     "--save: nothing to save with --epochs 0");
  expect_usage_error("--backend cpu --epochs 0 --load '" + a + "' --metrics '" + (dir_ / "m").string() + "'",
                     "--metrics: no epochs to record with --epochs 0");
  const Result r = run("--backend cpu --epochs 1 --train-limit 64 --test-limit 64 --save '" + dir_.string() + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("is a folder, not a file name (--save)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("epoch 1/1"), std::string::npos) << "refused only after training: " << r.err;
  // A metrics file that cannot be made, with the system's reason (root passes access() in /proc).
  const Result proc = run("--backend cpu --epochs 1 --train-limit 64 --test-limit 64 --metrics /proc/lenet-metrics");
  EXPECT_EQ(proc.status, 1);
  EXPECT_NE(proc.err.find(::geteuid() == 0 ? "/proc/lenet-metrics: cannot create a file in the folder /proc (No such file"
                                           : "/proc/lenet-metrics: cannot write into the folder /proc"),
            std::string::npos) << proc.err;
  EXPECT_EQ(proc.err.find("epoch 1/1"), std::string::npos) << "refused only after training: " << proc.err;
  // Renamed over, the file stdout writes would be cut off from it.
  const Result out = run("--backend cpu --epochs 1 --train-limit 64 --test-limit 64 --save /dev/stdout");
  EXPECT_EQ(out.status, 1);
  EXPECT_NE(out.err.find("/dev/stdout: the file stdout or stderr writes (a rename would cut it off) (--save)"),
            std::string::npos) << out.err;
  // On the CPU --num-gpus is the replica count; the checkpoint's is 1.
  expect_usage_error("--backend cpu --epochs 2 --train-limit 64 --test-limit 64 --num-gpus 2 --resume '" + a + "'",
                     "differs from 1 saved in --resume");
}

TEST_F(Cli, NonFiniteParametersToStartFromAreRefusedNamingTheTensor) {
  // A weight, and the last element of all (a bias).
  for (const auto& [tensor, index] : {std::pair<size_t, size_t>{lenet::model::kFc1W, 7}, {lenet::model::kFc2B, 9}}) {
    std::vector<float> p = lenet::model::init_parameters<float>(1);
    const lenet::model::TensorSpec& t = lenet::model::tensor_specs()[tensor];
    p[t.offset + index] = std::numeric_limits<float>::quiet_NaN();
    const std::string bad = (dir_ / "nan.safetensors").string();
    lenet::engine::save_checkpoint(bad, p, {1, 2, 1, 235, 0.2, 256, 1, 60000, {}});  // 235 minibatches of 256
    for (const std::string flag : {"--epochs 0 --load", "--epochs 2 --resume"}) {
      const Result r = run("--backend cpu " + flag + " '" + bad + "'");
      EXPECT_EQ(r.status, 1) << flag;
      EXPECT_NE(r.err.find(bad + ": " + t.name + "[" + std::to_string(index) +
                           "] is nan; cannot start from non-finite parameters"),
                std::string::npos)
          << r.err;
    }
  }
}

TEST_F(Cli, EpochSoFarThatDoesNotFitTheStepIsRefused) {
  const std::string good = (dir_ / "good.safetensors").string(), bad = (dir_ / "so-far.safetensors").string();
  // 64 examples, batch 16: 4 steps an epoch. At an epoch's end nothing can be carried over; one step in,
  // at most 16 rows can have been right. The saver refuses such a state, so the file is edited.
  lenet::engine::save_checkpoint(good, lenet::model::init_parameters<float>(1), {1, 3, 1, 5, 0.2, 16, 1, 64, {2.0, 16, 0.5}});
  for (const auto& step_correct : {std::pair<std::string, std::string>{"4", "3"}, {"5", "17"}}) {
    const std::string &step = step_correct.first, &correct = step_correct.second;  // C++17 lambdas capture no bindings
    rewrite_header(good, bad, [&](nlohmann::json& h) {
      h["__metadata__"]["step"] = step;
      h["__metadata__"]["epoch_correct"] = correct;
    });
    const Result r = run("--backend cpu --quiet --train-limit 64 --test-limit 64 --resume '" + bad + "'");
    EXPECT_EQ(r.status, 1) << step;
    EXPECT_NE(r.err.find("do not fit " + std::to_string(std::stoi(step) % 4) + " steps into an epoch"), std::string::npos)
        << r.err;
  }
}

// Running out of host memory is one line that says what to make smaller. 60000 replicas (parameters and
// gradients, about 1 MB each) would need tens of GB; the address space is capped at 3 GB, room for the
// libraries and the data set (AddressSanitizer reserves far more address space, so its build skips this).
TEST_F(Cli, OutOfHostMemoryIsOneLineNamingWhatToShrink) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer cannot run under a 3 GB address-space limit";
#endif
  const Result r = run("--backend cpu --quiet --batch-size 60000 --replicas 60000 --test-limit 64 --epochs 1", "ulimit -v 3000000; ");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err, "lenet-train: error: out of host memory; try a smaller --batch-size, fewer --replicas or a --train-limit\n");
  // A resumed run has the checkpoint's batch size, replicas and training-set size: none of those flags
  // would be taken.
  const std::string ckpt = (dir_ / "big.safetensors").string();
  lenet::engine::TrainingState state{0, 2, 1, 0, 0.9, 60000, 60000, 60000, {}, 64};
  state.train_fingerprint = lenet::io::load_fashion_mnist(LENET_TEST_DATA_DIR, 60000, 64).train.fingerprint();
  lenet::engine::save_checkpoint(ckpt, lenet::model::init_parameters<float>(1), state);
  const Result resumed = run("--backend cpu --quiet --resume '" + ckpt + "'", "ulimit -v 3000000; ");
  EXPECT_EQ(resumed.status, 1) << resumed.err;
  EXPECT_EQ(resumed.err, "lenet-train: error: out of host memory; a resumed run needs what the interrupted one had (its batch "
                         "size, replicas and data set sizes are the checkpoint's)\n");
}

// A file name longer than its folder takes is refused before training, for --save and --metrics.
TEST_F(Cli, OverlongOutputNameIsRefusedBeforeTraining) {
  const size_t most = lenet::engine::longest_name(dir_);
  const std::string name = (dir_ / std::string(most + 1, 'n')).string();
  for (const std::string flag : {"--save", "--metrics"}) {
    const Result r = run("--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64 " + flag + " '" + name + "'");
    EXPECT_EQ(r.status, 1) << flag;
    EXPECT_EQ(r.err, "lenet-train: error: " + name + ": a file name longer than the " + std::to_string(most) +
                         " bytes its folder takes (" + flag + ")\n");
  }
}

TEST_F(Cli, DivergingRunExits1NamingTheEpoch) {
  const Result r = run("--backend cpu --quiet --lr 1e6 --epochs 2 --train-limit 500 --test-limit 100");
  EXPECT_EQ(r.status, 1);
  // The CPU backend sees every step's loss, so the step is named exactly.
  EXPECT_TRUE(has_match(r.err, R"(non-finite training loss in epoch [12], at step [0-9]+ of 2 \(step [0-9]+ of the run\);)")) << r.err;
  EXPECT_EQ(r.err.find("--load"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("checkpoint"), std::string::npos) << "no --save, no --resume: " << r.err;
  // Finite parameters too large to train from: the error names them besides the learning rate, by the
  // largest magnitude (here a negative parameter's).
  std::vector<float> p(lenet::model::init_parameters<float>(1).size(), 3e38f);
  p[0] = -3.4e38f;
  const std::string huge = (dir_ / "huge.safetensors").string();
  lenet::engine::save_checkpoint(huge, p, {1, 2, 1, 2, 0.2, 256, 1, 500, {}});
  const Result loaded = run("--backend cpu --quiet --epochs 1 --train-limit 500 --test-limit 100 --load '" + huge + "'");
  EXPECT_EQ(loaded.status, 1);
  EXPECT_NE(loaded.err.find("at step 1 of 2 (step 1 of the run); try a smaller --lr; the run started from --load " + huge +
                            ", whose largest parameter magnitude is 3.4e+38\n"),
            std::string::npos)
      << loaded.err;
}

// The handlers' rule: the first stop is recorded; after it, an interrupt or another kind of signal ends
// the run at once, a hangup or a termination request that comes again does not, and neither does an
// interrupt within a tenth of a second of the first (timeout -s INT sends two).
TEST(StopSignals, SecondStopRule) {
  constexpr int64_t kStart = 1'000'000'000, kSoon = kStart + 1000, kLater = kStart + lenet::engine::kSameInterruptNs;
  for (const auto& [first, then, at, at_once] :
       {std::tuple{SIGINT, SIGINT, kLater, true}, {SIGINT, SIGINT, kSoon, false}, {SIGINT, SIGTERM, kSoon, true},
        {SIGTERM, SIGINT, kSoon, true}, {SIGTERM, SIGHUP, kLater, true}, {SIGTERM, SIGTERM, kLater, false},
        {SIGHUP, SIGHUP, kLater, false}}) {
    lenet::engine::StopRecord stop;
    EXPECT_FALSE(lenet::engine::take_stop(stop, first, kStart));
    EXPECT_EQ(stop.signal, first);
    EXPECT_EQ(lenet::engine::take_stop(stop, then, at), at_once) << first << " then " << then << " after " << at - kStart << " ns";
    EXPECT_EQ(stop.signal, first);  // the status stays the first signal's
  }
  // A first stop at a clock of 0 still has its time.
  lenet::engine::StopRecord stop;
  EXPECT_FALSE(lenet::engine::take_stop(stop, SIGINT, 0));
  EXPECT_TRUE(lenet::engine::take_stop(stop, SIGINT, lenet::engine::kSameInterruptNs + 1));
  // An interrupt that finds the first one's time not stored yet came with it, whatever the clock says.
  lenet::engine::StopRecord racing;
  racing.signal = SIGINT;
  EXPECT_FALSE(lenet::engine::take_stop(racing, SIGINT, 5 * lenet::engine::kSameInterruptNs));
}

// While the handler runs, the other two stop signals wait (blocked), in the thread that takes it.
TEST(StopSignals, HandlerBlocksTheOtherStopSignals) {
  constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction saved[3] {};
  for (int i = 0; i < 3; ++i) ASSERT_EQ(sigaction(kSignals[i], nullptr, &saved[i]), 0);
  lenet::engine::install_stop_handlers([](int) {});
  for (const int signal : kSignals) {
    struct sigaction installed {};
    ASSERT_EQ(sigaction(signal, nullptr, &installed), 0);
    for (const int other : kSignals) EXPECT_EQ(sigismember(&installed.sa_mask, other), 1) << signal << " " << other;
    EXPECT_NE(installed.sa_flags & SA_RESTART, 0) << signal;
  }
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &saved[i], nullptr);
}

// Two signals taken at the same moment by two threads (an OpenMP worker takes one the main thread's
// handler blocks): one of them is the first stop, the other the second, every time. The threads meet
// before and after each pair of calls, spinning (then yielding, on one core) so that the calls overlap:
// a load and a store in place of the compare-exchange lose this about every other round on an idle
// two-core machine. Only overlapping calls show that fault: on a busy machine, where the threads seldom
// run at once, a mutation run saw no wrong round in 20,000 (profiling/results/2026-12-05-cpu-2core, S06).
TEST(StopSignals, TwoThreadsAtOnceMakeOneFirstStop) {
  constexpr int kRounds = 20000;
  lenet::engine::StopRecord stop;
  std::atomic<int> arrived{0};
  bool at_once[2] = {false, false};
  auto meet = [&](int meeting) {  // both threads have arrived at meeting 1, 2, ... (two arrivals each)
    arrived.fetch_add(1);
    for (int spins = 0; arrived.load() < 2 * meeting; ++spins)
      if (spins > 1000) std::this_thread::yield();
  };
  std::thread other([&] {
    for (int round = 0; round < kRounds; ++round) {
      meet(2 * round + 1);
      at_once[1] = lenet::engine::take_stop(stop, SIGHUP);
      meet(2 * round + 2);
    }
  });
  int wrong = 0;
  for (int round = 0; round < kRounds; ++round) {
    stop.signal = 0;
    stop.first_ns = 0;
    meet(2 * round + 1);
    at_once[0] = lenet::engine::take_stop(stop, SIGTERM);
    meet(2 * round + 2);
    wrong += at_once[0] == at_once[1] ? 1 : 0;
  }
  other.join();
  EXPECT_EQ(wrong, 0) << "rounds in which both signals or neither ended the run, of " << kRounds;
}

// A signal during training (SIGHUP too: a closed terminal) finishes the step, writes a loadable
// checkpoint and exits with 128 + signal. The signal comes once the first epoch's record is written, with
// 19 epochs to go, so that it comes during training on any machine.
TEST_F(Cli, SignalLeavesALoadableCheckpoint) {
  for (const auto& [name, status] : {std::pair<std::string, int>{"INT", 130}, {"TERM", 143}, {"HUP", 129}}) {
    const std::string ckpt = (dir_ / ("s-" + name + ".safetensors")).string();
    const std::string metrics = (dir_ / ("s-" + name + ".jsonl")).string();
    const Result r = run("--backend cpu --quiet --train-limit 3000 --epochs 20 --metrics " + quoted(metrics) + " --save '" + ckpt + "'",
                         "", once_training(metrics) + send_signal(name) + "wait $pid; exit $?");
    EXPECT_EQ(r.status, status) << r.err;
    // The data folder always (here the default one, or LENET_DATA_DIR's): LENET_DATA_DIR where the
    // command is pasted must not change it.
    EXPECT_NE(r.err.find("checkpoint written to " + ckpt + ", go on with: " LENET_TRAIN_EXE " --resume " + ckpt +
                         " --data-dir " + fs::absolute(LENET_TEST_DATA_DIR).string() + " --backend cpu --metrics " + metrics +
                         " --quiet\n"),
              std::string::npos)
        << r.err;
    const lenet::engine::Checkpoint c = lenet::engine::load_checkpoint(ckpt);
    ASSERT_TRUE(c.state.has_value());
    EXPECT_GE(c.state->step, 12u);  // the first epoch's 12 steps at least
    EXPECT_EQ(c.state->epochs, 20);
  }
}

// The stop line ends with the command that goes on: --resume and the flags the checkpoint does not
// record, quoted for the shell. Run as it is (without LENET_DATA_DIR), it completes the run. The signal
// comes once the first epoch's record is written, with five epochs to go. On the CPU, --num-gpus
// only gave the default replica count, which the checkpoint records: the command leaves it out (with it,
// the resumed run would be refused for 2 replicas against the checkpoint's 3).
TEST_F(Cli, StopLineGivesTheCommandThatGoesOn) {
  const fs::path odd = dir_ / "it's a $HOME";
  fs::create_directories(odd);
  fs::create_directory_symlink(LENET_TEST_DATA_DIR, odd / "data");
  // Relative names, and the data folder from LENET_DATA_DIR: the command says where they are.
  data_dir_ = "data";
  const Result r = run("--backend cpu --quiet --train-limit 3000 --batch-size 500 --test-limit 100 --epochs 6 --metrics m.jsonl "
                       "--save c.safetensors --num-gpus 2 --replicas 3",
                       "cd " + quoted(odd.string()) + "; ", once_training("m.jsonl") + send_signal("TERM") + "wait $pid; exit $?");
  ASSERT_EQ(r.status, 143) << r.err;
  const std::string marker = "go on with: ";
  const size_t at = r.err.find(marker);
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string command = r.err.substr(at + marker.size(), r.err.find('\n', at) - at - marker.size());
  EXPECT_NE(command.find("--data-dir '" + dir_.string() + "/it'\\''s a $HOME/data'"), std::string::npos) << command;
  EXPECT_EQ(command.find("--num-gpus"), std::string::npos) << command;
  EXPECT_EQ(command.find("--replicas"), std::string::npos) << command;
  // Run as printed, from another folder and without LENET_DATA_DIR, it completes the run.
  std::ofstream(dir_ / "go-on.sh") << command << "\n";
  const int status = std::system(("cd / && env -u LENET_DATA_DIR sh " + quoted((dir_ / "go-on.sh").string()) + " >/dev/null 2>&1").c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command;
  std::ifstream in(odd / "m.jsonl");
  int records = 0;
  for (std::string line; std::getline(in, line);) ++records;
  EXPECT_EQ(records, 6) << command;
  EXPECT_EQ(lenet::engine::load_checkpoint((odd / "c.safetensors").string()).state->epoch, 6) << command;
}

// A name with a control character is shown escaped, so a command with it would name another file: the
// line then says what to give instead of a command.
TEST_F(Cli, StopLineWithoutACommandWhereANameHoldsAControlCharacter) {
  const std::string metrics = (dir_ / "m.jsonl").string(), ckpt = (dir_ / "tab\there.safetensors").string();
  const Result r = run("--backend cpu --quiet --train-limit 3000 --batch-size 500 --test-limit 100 --epochs 20 --metrics " +
                           quoted(metrics) + " --save " + quoted(ckpt),
                       "", once_training(metrics) + send_signal("TERM") + "wait $pid; exit $?");
  ASSERT_EQ(r.status, 143) << r.err;
  const std::string shown = (dir_ / "tab\\there.safetensors").string();
  EXPECT_NE(r.err.find("checkpoint written to " + shown + ", go on with --resume " + shown +
                       " and the flags given here that it does not record\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(lenet::engine::load_checkpoint(ckpt).state.has_value());
}

// A signal during the last step lets the run complete: the final line, the whole run's checkpoint, and
// still 128 + signal with a line saying so. One minibatch of 30000 rows is the whole run; the signal is
// sent once the CPU notice shows the data loaded (the run sees no GPU: the notice comes just before
// training).
TEST_F(Cli, SignalInTheLastStepCompletesTheRunAndSaysSo) {
  hide_gpus_ = true;
  const std::string ckpt = (dir_ / "last.safetensors").string();
  const Result r = run("--quiet --train-limit 30000 --batch-size 30000 --test-limit 100 --epochs 1 --save '" + ckpt + "'", "",
                       " & pid=$!; while kill -0 $pid 2>/dev/null && ! grep -q 'training on the CPU' '" +
                           (dir_ / "err").string() + "'; do sleep 0.02; done; kill -INT $pid; wait $pid; exit $?");
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_NE(r.out.find("test acc: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lenet-train: stopped by signal 2 after the run's last step: the run is complete, checkpoint written to " +
                       ckpt + "\n"),
            std::string::npos)
      << r.err;
  const lenet::engine::Checkpoint c = lenet::engine::load_checkpoint(ckpt);
  ASSERT_TRUE(c.state.has_value());
  EXPECT_EQ(c.state->epoch, 1);
  EXPECT_EQ(c.state->step, 1u);
}

// Under nohup (SIGHUP ignored when the program starts) a hangup stays ignored. A hangup that comes
// twice (the shell's and the terminal's) is still one request to stop: the checkpoint is written. The
// hangups come once the first epoch's record is written, in the second epoch's one step of 10000 or
// 20000 rows, which takes a second or more here (a fixed wait could land in the loading of a slow build,
// where no checkpoint is written); the second once the first is taken.
TEST_F(Cli, HangupIsIgnoredUnderNohupAndCountsOnce) {
  const std::string common = "--backend cpu --quiet --test-limit 100 ";
  const std::string m1 = (dir_ / "m1.jsonl").string(), m2 = (dir_ / "m2.jsonl").string();
  Result r = run(common + "--train-limit 10000 --batch-size 10000 --epochs 2 --metrics " + quoted(m1), "trap '' HUP; ",
                 once_training(m1) + send_signal("HUP") + "wait $pid; exit $?");
  EXPECT_EQ(r.status, 0) << r.err;
  const std::string ckpt = (dir_ / "h.safetensors").string();
  r = run(common + "--train-limit 20000 --batch-size 20000 --epochs 3 --metrics " + quoted(m2) + " --save '" + ckpt + "'", "",
          once_training(m2) + send_signal("HUP") + send_signal("HUP") + "wait $pid; exit $?");
  EXPECT_EQ(r.status, 129) << r.err;
  EXPECT_EQ(r.err.find("stopped at once"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("checkpoint written to"), std::string::npos) << r.err;
}

// A script's background job starts with SIGINT ignored (POSIX shells do that, so that Ctrl-C stops the
// script and not its jobs): an interrupt then stays ignored, and SIGTERM still stops the run.
TEST_F(Cli, InterruptIgnoredAtStartStaysIgnored) {
  as_script_job_ = true;
  const std::string ckpt = (dir_ / "job.safetensors").string();
  const std::string common = "--backend cpu --quiet --test-limit 100 --train-limit 3000 --batch-size 500 ";
  const std::string m1 = (dir_ / "m1.jsonl").string(), m2 = (dir_ / "m2.jsonl").string();
  Result r = run(common + "--epochs 4 --metrics " + quoted(m1), "", once_training(m1) + send_signal("INT") + "wait $pid; exit $?");
  EXPECT_EQ(r.status, 0) << r.err;
  r = run(common + "--epochs 20 --metrics " + quoted(m2) + " --save " + quoted(ckpt), "",
          once_training(m2) + send_signal("INT") + send_signal("TERM") + "wait $pid; exit $?");
  EXPECT_EQ(r.status, 143) << r.err;
  EXPECT_EQ(r.err.find("stopped at once"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("checkpoint written to"), std::string::npos) << r.err;
}

// A termination request that comes twice is one request to stop, as a hangup is: timeout(1) sends
// SIGTERM to the process and then to its process group, and the checkpoint must still be written. One
// step per epoch of 10000 examples, a second or more here: the second request comes once the first is
// taken, while the step the first one waits for runs.
TEST_F(Cli, TerminationSentTwiceCountsOnce) {
  const std::string metrics = (dir_ / "m.jsonl").string(), ckpt = (dir_ / "c.safetensors").string();
  const Result r = run("--backend cpu --quiet --train-limit 10000 --batch-size 10000 --test-limit 100 --epochs 3 --metrics " +
                           quoted(metrics) + " --save " + quoted(ckpt),
                       "", once_training(metrics) + send_signal("TERM") + send_signal("TERM") + "wait $pid; exit $?");
  EXPECT_EQ(r.status, 143) << r.err;
  EXPECT_EQ(r.err.find("stopped at once"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("checkpoint written to"), std::string::npos) << r.err;
}

// Whether the thread `tid` of process `pid` (tid 0: the process as a whole) has a signal sent to it that
// it has not taken yet.
bool signal_pending(pid_t pid, pid_t tid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream status(tid == 0 ? proc + "/status" : proc + "/task/" + std::to_string(tid) + "/status");
  const std::string field = tid == 0 ? "ShdPnd:" : "SigPnd:";
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field, 0) == 0)
      return line.find_first_not_of("0", line.find_first_not_of(" \t", field.size())) != std::string::npos;
  return false;  // it has gone
}

// Milliseconds until `deadline`, 0 once it has passed (a poll timeout).
int ms_left(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// Where a spawned run's stdout or stderr goes: a file by name (created or truncated), or one end of a pipe
// or pseudo-terminal (`theirs`) whose other end (`ours`) the test reads. Spawned closes the test's copy of
// `theirs` once the run has its own, and `ours` too where the run did not start.
struct Sink {
  explicit Sink(std::string file = "/dev/null") : path(std::move(file)) {}
  Sink(int theirs, int our_end) : fd(theirs), ours(our_end) {}
  std::string path;
  int fd = -1, ours = -1;
};

// lenet-train started with `args` by posix_spawn (stdin /dev/null, LENET_DATA_DIR the test data), watched
// until `deadline`: two minutes from the start unless a test moves it.
struct Spawned {
  pid_t pid = 0;
  int error = 0;  // posix_spawn's: the run did not start where it is not 0
  int status = 0;
  bool exited = false;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);

  Spawned(std::vector<std::string> args, const Sink& out, const Sink& err) {
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    const auto redirect = [&actions](int fd, const Sink& sink) {
      if (sink.fd >= 0)
        ::posix_spawn_file_actions_adddup2(&actions, sink.fd, fd);
      else
        ::posix_spawn_file_actions_addopen(&actions, fd, sink.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    };
    redirect(STDOUT_FILENO, out);
    redirect(STDERR_FILENO, err);
    ::setenv("LENET_DATA_DIR", LENET_TEST_DATA_DIR, 1);
    args.insert(args.begin(), LENET_TRAIN_EXE);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    error = ::posix_spawn(&pid, LENET_TRAIN_EXE, &actions, nullptr, argv.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    for (const Sink* sink : {&out, &err}) {
      if (sink->fd < 0) continue;
      ::close(sink->fd);
      if (error != 0) ::close(sink->ours);
    }
  }

  // The run has not ended, and the wait has not.
  bool going() {
    return !(exited = exited || ::waitpid(pid, &status, WNOHANG) == pid) && std::chrono::steady_clock::now() < deadline;
  }

  // Sends `signal` and waits until the run has taken it, has ended, or the deadline has passed.
  void signal_taken(int signal) {
    ::kill(pid, signal);
    while (going() && signal_pending(pid, 0)) ::usleep(1000);
  }

  // Waits for the run's end, killing it first where the deadline has passed (a failure, not a hung test):
  // whether it was reaped.
  bool reap() {
    if (exited) return true;
    if (std::chrono::steady_clock::now() >= deadline) ::kill(pid, SIGKILL);
    return exited = ::waitpid(pid, &status, 0) == pid;
  }
};

// Whether the file `path` has a byte (a run's first epoch's metrics record).
bool has_bytes(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return !ec && size > 0;
}

// What fd gives until its end or EIO (a pseudo-terminal's master once the other side has gone); fd is closed.
std::string read_to_end(int fd) {
  std::string said;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR);)
    if (n > 0) said.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return said;
}

// An interrupt that comes again within a tenth of a second of the first is the same stop (timeout -s INT
// sends one to the process and one to its group): the checkpoint is written. The second is sent once the
// first is taken (sent together, they would merge into one while pending), a millisecond or so later, by
// the test itself. One that comes later is a second Ctrl-C and ends the run at once. One step per epoch of
// 20000 rows, a second or more here: the signals come while the step the first one waits for runs.
TEST_F(Cli, InterruptRepeatedAtOnceCountsOnceAndLaterEndsTheRun) {
  const std::string common = "--backend cpu --quiet --train-limit 20000 --batch-size 20000 --test-limit 100 --epochs 3 ";
  const std::string metrics = (dir_ / "m1.jsonl").string(), ckpt = (dir_ / "c.safetensors").string(),
                    err = (dir_ / "err1").string();
  std::vector<std::string> args;  // common's words, then the two files (whose names may hold spaces)
  std::istringstream words(common);
  for (std::string word; words >> word;) args.push_back(word);
  args.insert(args.end(), {"--metrics", metrics, "--save", ckpt});
  Spawned run1(args, Sink(), Sink(err));
  ASSERT_EQ(run1.error, 0) << std::strerror(run1.error);
  while (run1.going() && !has_bytes(metrics)) ::usleep(20000);
  if (run1.going()) {
    run1.signal_taken(SIGINT);
    if (run1.going()) ::kill(run1.pid, SIGINT);
  }
  ASSERT_TRUE(run1.reap());
  const std::string said = lenet::testing::slurp(err);
  EXPECT_TRUE(WIFEXITED(run1.status) && WEXITSTATUS(run1.status) == 130) << run1.status << ": " << said;
  EXPECT_EQ(said.find("stopped at once"), std::string::npos) << said;
  EXPECT_NE(said.find("checkpoint written to"), std::string::npos) << said;
  // The later one comes while the process is stopped, so that its step cannot end first, whatever the
  // machine's speed: it is taken when the process continues, 0.15 s or more after the first.
  const std::string m2 = (dir_ / "m2.jsonl").string();
  const Result r = run(common + "--metrics " + quoted(m2), "",
                       once_training(m2) + send_signal("INT") +
                           "kill -STOP $pid; sleep 0.15; kill -INT $pid; kill -CONT $pid; wait $pid; exit $?");
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_EQ(r.err, "lenet-train: stopped at once by a second signal 2\n");
}

// On a terminal the live progress line keeps within the terminal's width: "\x1b[2K" clears one row, and
// the rows of a line that wrapped would stay behind. The run's stderr is a pseudo-terminal of 30 columns.
TEST_F(Cli, LiveLineKeepsWithinTheTerminalWidth) {
  int master = -1, slave = -1;
  struct winsize size {};
  size.ws_row = 24;
  size.ws_col = 30;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, &size), 0) << std::strerror(errno);
  ::fcntl(master, F_SETFD, FD_CLOEXEC);
  Spawned train({"--backend", "cpu", "--train-limit", "2000", "--test-limit", "100", "--epochs", "2"}, Sink(),
                Sink(slave, master));
  ASSERT_EQ(train.error, 0) << std::strerror(train.error);
  const std::string said = read_to_end(master);
  ASSERT_TRUE(train.reap());
  EXPECT_TRUE(WIFEXITED(train.status) && WEXITSTATUS(train.status) == 0) << train.status << ": " << said;
  int live = 0;
  for (size_t at = said.find("\r\x1b[2K"); at != std::string::npos; at = said.find("\r\x1b[2K", at + 1)) {
    const size_t start = at + 5, end = said.find_first_of("\r\n", start);
    const std::string line = said.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (line.find(" [") == std::string::npos) continue;  // an epoch's line, which stays
    ++live;
    EXPECT_LE(line.size(), 29u) << line;
  }
  EXPECT_GE(live, 2) << said;  // an epoch's last step is always drawn
}

// On a terminal the second signal's line first clears the live line there ("\r\x1b[2K"): here the run's
// stderr is a pseudo-terminal and its stdout is not. The signals come as in SecondSignalExitsAtOnceWithItsLine.
TEST_F(Cli, SecondSignalsLineClearsTheLineOfAStderrThatIsATerminal) {
  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0) << std::strerror(errno);
  ::fcntl(master, F_SETFD, FD_CLOEXEC);
  const std::string metrics = (dir_ / "m.jsonl").string();
  Spawned train({"--backend", "cpu", "--quiet", "--train-limit", "3000", "--test-limit", "100", "--epochs", "100",
                 "--metrics", metrics},
                Sink(), Sink(slave, master));
  ASSERT_EQ(train.error, 0) << std::strerror(train.error);
  while (train.going() && !has_bytes(metrics)) ::usleep(20000);
  for (const int signal : {SIGSTOP, SIGINT, SIGTERM, SIGCONT})
    if (!train.exited) ::kill(train.pid, signal);
  const std::string said = read_to_end(master);
  ASSERT_TRUE(train.reap());
  const int second = WIFEXITED(train.status) ? WEXITSTATUS(train.status) - 128 : -1;
  EXPECT_TRUE(second == SIGINT || second == SIGTERM) << train.status << ": " << said;
  const std::string line = "\r\x1b[2Klenet-train: stopped at once by a second signal " + std::to_string(second);
  EXPECT_EQ(said.rfind(line, 0), 0u) << said;
}

// Whether the main thread of `pid` is inside write(2) on its file descriptor `fd` (/proc/PID/syscall: the
// call's number and first argument, or "running"), or nullopt where that file cannot be read.
std::optional<bool> writing_to(pid_t pid, int fd) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/syscall");
  std::string number, first;
  if (!(in >> number)) return std::nullopt;
  return number == std::to_string(SYS_write) && in >> first && first == "0x" + std::to_string(fd);
}

// Fills the pipe `fds` makes until a write to fds[1] would wait for a reader; the bytes it took.
size_t fill_pipe(const int fds[2]) {
  EXPECT_EQ(::fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
  const std::string filler(4096, 'x');
  size_t filled = 0;
  for (ssize_t n; (n = ::write(fds[1], filler.data(), filler.size())) > 0;) filled += static_cast<size_t>(n);
  EXPECT_EQ(errno, EAGAIN) << std::strerror(errno);
  EXPECT_EQ(::fcntl(fds[1], F_SETFL, 0), 0);
  return filled;
}

// Until the run's main thread waits in write(2) on `fd`: true then, false where it ended or its deadline
// passed first, nullopt where /proc/PID/syscall cannot be read while the run goes on.
std::optional<bool> wait_until_writing(Spawned& run, int fd) {
  while (run.going()) {
    const std::optional<bool> in_write = writing_to(run.pid, fd);
    if (in_write.value_or(false)) return true;
    if (!in_write.has_value() && run.going()) return std::nullopt;  // not because the run has ended
    ::usleep(10000);
  }
  return false;
}

// What fd gives until its writers close it or `deadline` passes; fd is closed.
std::string read_until_closed(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string said;
  char buffer[1 << 16];
  pollfd reader = {fd, POLLIN, 0};
  for (ssize_t n = 1; n > 0 && ::poll(&reader, 1, ms_left(deadline)) == 1;) {
    n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) said.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return said;
}

// A signal while a write waits on a full pipe (a reader that does not read yet) is a stop, not a failed
// write: the write goes on once the reader reads. The metrics go to stdout, a pipe, through stdio, which
// does not retry a write that a signal interrupted. Epochs of one one-example step fill the pipe; the
// signal comes once every page of it is taken and nothing more came for a fifth of a second (the next
// record waits). It goes to the thread that writes, the main one (any thread of the process may take a
// signal sent to the process, and another's would leave the write alone), and the test reads only once
// that thread has taken it: a read before could make room for the write before the writer looks for
// signals, and the write would end well either way.
TEST_F(Cli, SignalWhileAWriteWaitsOnAFullPipeIsAStop) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  const int capacity = ::fcntl(fds[0], F_GETPIPE_SZ);
  const std::string err = (dir_ / "err").string();
  Spawned train({"--backend", "cpu", "--quiet", "--train-limit", "1", "--batch-size", "1", "--test-limit", "1",
                 "--epochs", "1000000", "--metrics", "/dev/stdout"},
                Sink(fds[1], fds[0]), Sink(err));
  ASSERT_EQ(train.error, 0) << std::strerror(train.error);
  const pid_t pid = train.pid;
  using Clock = std::chrono::steady_clock;
  // Two minutes for each wait: the pipe to fill, the signal to be taken, the run to end.
  const int full = capacity - static_cast<int>(::sysconf(_SC_PAGESIZE));
  int queued = 0, unchanged = 0;
  while (unchanged < 10 && train.going()) {
    int now = 0;
    if (::ioctl(fds[0], FIONREAD, &now) != 0) break;
    unchanged = now > full && now == queued ? unchanged + 1 : 0;
    queued = now;
    ::usleep(20000);
  }
  EXPECT_EQ(unchanged, 10) << queued << " of " << capacity << " bytes in the pipe: " << lenet::testing::slurp(err);
  if (const std::optional<bool> waits = writing_to(pid, STDOUT_FILENO); waits.has_value() && !train.exited) {
    EXPECT_TRUE(*waits) << "the run is not waiting in write(2) on its stdout, so the signal would not test that";
  }
  if (!train.exited) {
    ::syscall(SYS_tgkill, pid, pid, SIGTERM);
    for (const auto deadline = Clock::now() + std::chrono::minutes(2); signal_pending(pid, pid) && ms_left(deadline) > 0;)
      ::usleep(10000);
  }
  char buffer[1 << 16];
  pollfd reader = {fds[0], POLLIN, 0};
  bool ended = false;
  for (const auto deadline = Clock::now() + std::chrono::minutes(2); !ended && ::poll(&reader, 1, ms_left(deadline)) == 1;)
    ended = ::read(fds[0], buffer, sizeof buffer) <= 0;
  ::close(fds[0]);
  EXPECT_TRUE(ended) << "the run went on for two minutes after the signal";
  train.deadline = ended ? Clock::time_point::max() : Clock::now();  // reap kills it: a failure, not a hung test
  ASSERT_TRUE(train.reap());
  const std::string said = lenet::testing::slurp(err);
  EXPECT_TRUE(WIFEXITED(train.status) && WEXITSTATUS(train.status) == 143) << train.status << ": " << said;
  EXPECT_NE(said.find("stopped by signal 15"), std::string::npos) << said;
  EXPECT_NE(said.find("; no --save given, nothing written\n"), std::string::npos) << said;
}

// A signal while --help waits to write on a full stdout (a reader that does not read yet) is a stop too:
// the help is written once the reader reads, and the status and a line say the signal came.
TEST_F(Cli, SignalWhileTheHelpWaitsOnAFullPipeIsAStop) {
  if (!fs::exists("/proc/self/syscall"))
    GTEST_SKIP() << "no /proc/PID/syscall: no way to know the help is being written";
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  const size_t filled = fill_pipe(fds);
  const std::string err = (dir_ / "err").string();
  Spawned help_run({"--help"}, Sink(fds[1], fds[0]), Sink(err));
  ASSERT_EQ(help_run.error, 0) << std::strerror(help_run.error);
  const std::optional<bool> waits = wait_until_writing(help_run, STDOUT_FILENO);
  if (waits.value_or(false)) help_run.signal_taken(SIGTERM);
  const std::string help = read_until_closed(fds[0], help_run.deadline);
  ASSERT_TRUE(help_run.reap());
  if (!waits) GTEST_SKIP() << "the run's /proc/PID/syscall cannot be read (a ptrace scope?)";
  ASSERT_TRUE(*waits) << "--help never waited in write(2) on its stdout";
  EXPECT_TRUE(WIFEXITED(help_run.status) && WEXITSTATUS(help_run.status) == 143) << help_run.status;
  EXPECT_EQ(lenet::testing::slurp(err), "lenet-train: stopped by signal 15 while reading the command line\n");
  EXPECT_NE(help.find("--batch-size", filled), std::string::npos) << "the help was not written whole";
}

// Once the stop's line is being written, another signal does nothing: the run ends as the first signal
// said, with its status, not "at once". The line waits on a full stderr pipe (this test fills it before
// the run starts), and the second signal, of another kind, comes while the run waits in write(2) there.
TEST_F(Cli, SignalWhileTheStopsLineIsWrittenChangesNothing) {
  if (!fs::exists("/proc/self/syscall"))
    GTEST_SKIP() << "no /proc/PID/syscall: no way to know the line is being written";
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  const size_t filled = fill_pipe(fds);
  const std::string metrics = (dir_ / "m.jsonl").string();
  Spawned train({"--backend", "cpu", "--quiet", "--train-limit", "3000", "--test-limit", "100", "--epochs", "100",
                 "--metrics", metrics},
                Sink(), Sink(fds[1], fds[0]));
  ASSERT_EQ(train.error, 0) << std::strerror(train.error);
  while (train.going() && !has_bytes(metrics)) ::usleep(20000);
  if (train.going()) ::kill(train.pid, SIGTERM);
  const std::optional<bool> waits = wait_until_writing(train, STDERR_FILENO);
  if (train.going() && waits.value_or(false)) train.signal_taken(SIGINT);
  std::string said = read_until_closed(fds[0], train.deadline);
  ASSERT_TRUE(train.reap());
  if (!waits) GTEST_SKIP() << "the run's /proc/PID/syscall cannot be read (a ptrace scope?)";
  ASSERT_TRUE(*waits) << "the run never waited in write(2) on its stderr: "
                     << said.substr(std::min(filled, said.size()));
  ASSERT_GE(said.size(), filled);
  said.erase(0, filled);
  EXPECT_TRUE(WIFEXITED(train.status) && WEXITSTATUS(train.status) == 143) << train.status << ": " << said;
  EXPECT_EQ(said.rfind("lenet-train: stopped by signal 15 ", 0), 0u) << said;
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
}

// A second signal ends the run at once, still with its line on stderr and 128 + signal. Two different
// signals sent to the stopped process arrive together when it continues (one kind would merge into one).
TEST_F(Cli, SecondSignalExitsAtOnceWithItsLine) {
  const std::string metrics = (dir_ / "m.jsonl").string();
  const Result r = run("--backend cpu --quiet --train-limit 3000 --epochs 100 --metrics " + quoted(metrics), "",
                       once_training(metrics) + "kill -STOP $pid; kill -INT $pid; kill -TERM $pid; kill -CONT $pid; "
                       "wait $pid; exit $?");
  // Which of the two the kernel hands over second is its choice.
  const int second = r.status - 128;
  EXPECT_TRUE(second == SIGINT || second == SIGTERM) << r.status << ": " << r.err;
  EXPECT_EQ(r.err, "lenet-train: stopped at once by a second signal " + std::to_string(second) + "\n");
}

// --load and --resume together are refused from the flags alone (status 2), before either file is read.
TEST_F(Cli, LoadAndResumeTogetherAreRefusedBeforeEitherIsRead) {
  const std::string a = (dir_ / "a.safetensors").string(), b = (dir_ / "b.safetensors").string();
  expect_usage_error("--backend cpu --epochs 3 --load '" + a + "' --resume '" + b + "'",
                     "--load and --resume: give one of them");
}

// A resumed run saves to the file it resumed from unless --save says otherwise: a refusal of that file
// says so (here stdout appends to it, so a rename would cut stdout off).
TEST_F(Cli, ImpliedSaveProblemNamesResume) {
  const std::string c = small_checkpoint(dir_ / "c.safetensors");
  const Result r = run("--backend cpu --quiet --test-limit 64 --epochs 3 --resume '" + c + "'", "", " >>'" + c + "'");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err, "lenet-train: error: " + c + ": the file stdout or stderr writes (a rename would cut it off) "
                   "(--resume saves there; name another file with --save)\n");
}

// A fresh run (no --resume) replaces its metrics file whatever that holds: the mending of a last line
// cut short is for a resumed run's append only, and must not refuse a fresh run over an old file.
TEST_F(Cli, FreshRunReplacesAMetricsFileWhoseLastLineIsNotARecord) {
  const std::string metrics = (dir_ / "m.jsonl").string();
  std::ofstream(metrics) << "not a record";  // no newline
  const Result r =
      run("--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64 --metrics '" + metrics + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string text = lenet::testing::slurp(metrics);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(text.rfind("{\"backend\"", 0), 0u) << text;
}

// A resumed run that diverges before writing a checkpoint of its own (its save is implied by --resume)
// still says where the last good checkpoint is: the file it resumed from.
TEST_F(Cli, DivergingResumedRunNamesTheCheckpointItResumedFrom) {
  const std::string c = (dir_ / "c.safetensors").string();
  const std::string common = "--backend cpu --quiet --batch-size 64 --train-limit 128 --test-limit 64 ";
  ASSERT_EQ(run(common + "--lr 1e6 --epochs 1 --save '" + c + "'").status, 0);  // diverges in its second epoch
  const Result r = run("--backend cpu --quiet --epochs 3 --resume '" + c + "'");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("non-finite training loss in epoch 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; the last good checkpoint stays in " + c + "\n"), std::string::npos) << r.err;
}

// An evaluation (--epochs 0 --load) whose final line stdout cannot take fails as a training run does.
TEST_F(Cli, EvaluationWhoseFinalLineCannotBeWrittenExits1) {
  const std::string a = small_checkpoint(dir_ / "a.safetensors");
  const Result r = run("--backend cpu --epochs 0 --test-limit 64 --load '" + a + "'", "", " >/dev/full");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "lenet-train: error: stdout: write failed (No space left on device)\n");
}

// After "--" nothing is an option: the words there are refused as unexpected arguments, not read as an
// option missing its value.
TEST_F(Cli, WordsAfterDoubleDashAreNotOptions) {
  expect_usage_error("--backend cpu -- --metrics --quiet", "The following arguments were not expected");
}

// An option given once, last and without its value, is said to miss it, not to be given more than once.
TEST_F(Cli, OptionLastWithoutItsValueIsMissingIt) {
  expect_usage_error("--backend cpu --epochs", "--epochs: 1 required INT missing (see --help)");
}

// The top of an integer flag's range is accepted (the message says "1 to 2147483647"): the run goes on
// to the next check, here the --epochs 0 refusal.
TEST_F(Cli, TopOfAnIntegerRangeIsAccepted) {
  expect_usage_error("--backend cpu --batch-size 2147483647 --train-limit 9223372036854775807 --epochs 0",
                     "--epochs 0: must be at least 1");
}

// A stdout open for reading and writing (a terminal is; here `1<>FILE`) takes the records of
// "--metrics -": only one open for reading alone (a closed stdout that /dev/null filled) is refused.
TEST_F(Cli, MetricsIntoAStdoutOpenForReadingAndWriting) {
  const std::string file = (dir_ / "rw.jsonl").string();
  const Result r =
      run("--backend cpu --quiet --epochs 2 --train-limit 64 --test-limit 64 --metrics -", "", " 1<>'" + file + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string text = lenet::testing::slurp(file);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_EQ(r.err.rfind("test acc: ", 0), 0u) << r.err;
}

// A stderr open for reading only (as prepare_output fills a closed one) takes no records: refused before
// training as such a stdout is, not found when the first record cannot be written.
TEST(OutputFile, StderrOpenForReadingOnlyIsRefused) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::dup2(::open("/dev/null", O_RDONLY), STDERR_FILENO) != STDERR_FILENO) ::_exit(2);
    const std::string problem = lenet::engine::output_file_problem("/dev/stderr");
    ::_exit(problem == "/dev/stderr: closed, nothing can be written to it" ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << " (1: not refused)";
}

// --metrics naming, by its name, the regular file stderr writes: the records go through stderr, each line
// whole and in order with the progress lines (a second open would write over them from offset 0).
TEST_F(Cli, MetricsIntoTheFileStderrWritesByItsName) {
  const Result r =
      run("--backend cpu --epochs 2 --train-limit 64 --test-limit 64 --metrics '" + (dir_ / "err").string() + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream in(r.err);
  int records = 0, progress = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("{", 0) == 0) {
      EXPECT_TRUE(nlohmann::json::accept(line)) << line;
      ++records;
    } else {
      EXPECT_EQ(line.rfind("epoch ", 0), 0u) << line;
      ++progress;
    }
  }
  EXPECT_EQ(records, 2) << r.err;
  EXPECT_EQ(progress, 2) << r.err;
}

// --metrics naming by another name (/dev/fd/1) the pipe or the socket stdout writes (a second open of a
// socket fails): the records go through stdout, which holds them alone, and the final line goes to stderr.
TEST_F(Cli, MetricsIntoThePipeOrSocketStdoutWritesByAnotherName) {
  const std::string out = (dir_ / "out").string(), err = (dir_ / "err").string();
  const std::string command = "LENET_DATA_DIR='" + data_dir_ + "' '" LENET_TRAIN_EXE "' --backend cpu --quiet "
                              "--epochs 2 --train-limit 64 --test-limit 64 --metrics /dev/fd/1 2>" + quoted(err);
  auto expect_records_alone = [&](const std::string& text) {
    std::istringstream in(text);
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ASSERT_TRUE(nlohmann::json::accept(line)) << text;
      EXPECT_EQ(nlohmann::json::parse(line)["epoch"], ++n) << text;
    }
    EXPECT_EQ(n, 2) << text;
    EXPECT_EQ(lenet::testing::slurp(err).rfind("test acc: ", 0), 0u) << lenet::testing::slurp(err);
  };
  ASSERT_EQ(std::system((command + " | cat >" + quoted(out)).c_str()), 0) << lenet::testing::slurp(err);
  expect_records_alone(lenet::testing::slurp(out));
  int ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends), 0);
  // bash, which takes a descriptor above 9 in a redirection; the run's stdout is a copy of ends[1].
  const std::string shell = command + " >&" + std::to_string(ends[1]);
  ASSERT_EQ(::fcntl(ends[1], F_SETFD, 0), 0);
  const int status = std::system(("bash -c " + quoted(shell)).c_str());
  ::close(ends[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(ends[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(ends[0]);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << lenet::testing::slurp(err);
  expect_records_alone(text);
}

// A checkpoint replaces its file by a rename, which would replace a device: refused before training.
TEST_F(Cli, SaveOverADeviceIsRefusedBeforeTraining) {
  const Result r = run("--backend cpu --epochs 1 --train-limit 64 --test-limit 64 --save /dev/null");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "lenet-train: error: /dev/null: not a regular file (--save)\n");
}

// Beside a gzipped data file, an output under its name without .gz would be read in its place the next
// time (a raw file comes first): refused, and nothing written there.
TEST_F(Cli, OutputNamingTheRawFormOfAGzippedDataFileIsRefused) {
  const fs::path data = dir_ / "data";
  fs::create_directory(data);
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    const std::string real = lenet::io::find_data_file(LENET_TEST_DATA_DIR, name);
    if (fs::path(real).extension() != ".gz") GTEST_SKIP() << real << ": the data set is not gzipped";
    fs::create_symlink(real, data / fs::path(real).filename());
  }
  const std::string raw = (data / "t10k-labels-idx1-ubyte").string();
  expect_usage_error("--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64 --data-dir '" + data.string() +
                         "' --metrics '" + raw + "'",
                     "--metrics " + raw + " names the data file " + raw + "\n");  // not the .gz
  EXPECT_FALSE(fs::exists(raw));
}

// The CPU's replica count: --replicas where given (--num-gpus then sets nothing, so a resume that gives
// the saved --replicas is not refused for it), else --num-gpus, which a batch must have rows for; a
// resume's --replicas must be the saved one.
TEST_F(Cli, ReplicaCountOnTheCpu) {
  expect_usage_error("--backend cpu --quiet --num-gpus 65 --batch-size 64 --epochs 1 --train-limit 64 --test-limit 64",
                     "--num-gpus 65 sets 65 replicas, more than --batch-size 64");
  const std::string c = small_checkpoint(dir_ / "c.safetensors");
  const Result r = run("--backend cpu --quiet --test-limit 64 --num-gpus 2 --replicas 1 --resume '" + c + "'");
  EXPECT_EQ(r.status, 0) << r.err;
  expect_usage_error("--backend cpu --quiet --test-limit 64 --replicas 2 --resume '" + c + "'",
                     "--replicas differs from the value 1 saved in --resume " + c);
}

// A resumed run appends to an empty metrics file (the interrupted run wrote no record yet) as to one
// whose last line is whole.
TEST_F(Cli, ResumeAppendsToAnEmptyMetricsFile) {
  const std::string c = small_checkpoint(dir_ / "c.safetensors"), metrics = (dir_ / "m.jsonl").string();
  std::ofstream(metrics).flush();
  const Result r = run("--backend cpu --quiet --test-limit 64 --resume '" + c + "' --metrics '" + metrics + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string text = lenet::testing::slurp(metrics);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(text.rfind("{\"backend\"", 0), 0u) << text;
}

// Started by its name, found through PATH, the command that goes on names the program so too (an absolute
// path made from the current folder would name no program); a name with a space is quoted.
TEST_F(Cli, StopLineKeepsAProgramNameFoundThroughPathAndQuotesASpace) {
  const std::string folder = fs::path(LENET_TRAIN_EXE).parent_path().string();
  const std::string cmd = "cd " + quoted(dir_.string()) + "; PATH=" + quoted(folder) + ":\"$PATH\" LENET_DATA_DIR='" +
                          data_dir_ + "' env --default-signal=INT lenet-train --backend cpu --quiet --train-limit 3000 "
                          "--batch-size 500 --test-limit 100 --epochs 20 --metrics m.jsonl --save 'a b.safetensors' "
                          ">out 2>err </dev/null" + once_training("m.jsonl") + send_signal("TERM") +
                          "wait $pid; exit $?";
  const int raw = std::system(cmd.c_str());
  const std::string err = lenet::testing::slurp(dir_ / "err");
  ASSERT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 143) << raw << " " << err;
  EXPECT_NE(err.find(", go on with: lenet-train --resume '" + (dir_ / "a b.safetensors").string() + "' --data-dir "),
            std::string::npos) << err;
}

// A resumed CUDA run keeps its mode unless --mode is given: the command that goes on after a stop (here on
// the CPU) has the mode asked for, not the checkpoint's.
TEST_F(Cli, ResumeWithAModeGivenKeepsItInTheCommandThatGoesOn) {
  const std::string a = (dir_ / "a.safetensors").string(), naive = (dir_ / "naive.safetensors").string();
  const std::string sizes = "--backend cpu --quiet --train-limit 3000 --batch-size 500 --test-limit 100 ";
  ASSERT_EQ(run(sizes + "--epochs 1 --save '" + a + "'").status, 0);
  rewrite_header(a, naive, [](nlohmann::json& h) {
    h["__metadata__"]["backend"] = "cuda";
    h["__metadata__"]["mode"] = "naive";
  });
  const std::string metrics = (dir_ / "m.jsonl").string();
  const Result r = run("--backend cpu --quiet --mode graph --epochs 20 --resume '" + naive + "' --save '" + a +
                           "' --metrics " + quoted(metrics),
                       "", once_training(metrics) + send_signal("TERM") + "wait $pid; exit $?");
  ASSERT_EQ(r.status, 143) << r.err;
  const size_t at = r.err.find("go on with: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--mode", at), std::string::npos) << r.err;
}

// The refusal of more replicas than a minibatch has rows names each flag's value beside it.
TEST_F(Cli, MoreReplicasThanRowsIsRefusedNamingBothValues) {
  expect_usage_error("--backend cpu --batch-size 4 --replicas 5",
                     "--replicas 5 is larger than --batch-size 4: every replica needs a row of a full minibatch");
}

// A limit of 0 is out of range, for the test set as for the training set: it would read as no limit at all.
// (--epochs 0 without --load: a limit let through meets that refusal instead of starting a run.)
TEST_F(Cli, LimitOfZeroIsOutOfRange) {
  for (const std::string flag : {"--train-limit", "--test-limit"})
    expect_usage_error("--backend cpu --epochs 0 " + flag + " 0", flag + ": 0 is out of range (1 to ");
}

// Every value --help lists for --backend and --mode is taken when given, the defaults too: the refusal is then
// --epochs 0's without --load, which comes before any data is read or any device asked.
TEST_F(Cli, EveryBackendAndModeListedIsAccepted) {
  for (const std::string flag : {"--backend auto", "--backend cuda", "--backend cpu", "--mode naive", "--mode graph"})
    expect_usage_error(flag + " --epochs 0", "--epochs 0: must be at least 1 (0 only with --load, to evaluate)");
}

// On the CPU --replicas, where given, is the replica count (not --num-gpus); without it --num-gpus is. The
// run trains with that count and its checkpoint records it, which a resumed run trains with.
TEST_F(Cli, CpuReplicaCountIsTheRunsAndItsCheckpoints) {
  const std::string quick = "--backend cpu --quiet --epochs 1 --train-limit 64 --test-limit 64 --num-gpus 2 ";
  for (const auto& [flags, devices] :
       {std::pair<std::string, std::string>{"--replicas 3", "cpu, cpu, cpu"}, {"", "cpu, cpu"}}) {
    const std::string c = (dir_ / "c.safetensors").string();
    const Result r = run(quick + flags + " --save '" + c + "'");
    ASSERT_EQ(r.status, 0) << flags << ": " << r.err;
    EXPECT_NE(r.out.find(" on [" + devices + "]\n"), std::string::npos) << flags << ": " << r.out;
    const std::optional<lenet::engine::TrainingState> st = lenet::engine::load_checkpoint(c).state;
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->replicas, static_cast<int>(std::count(devices.begin(), devices.end(), ',') + 1)) << flags;
  }
}

// Without --train-limit and --test-limit a checkpoint records the sizes of the whole data set, against
// which a resumed run's --test-limit is checked.
TEST_F(Cli, CheckpointRecordsTheDataSetsSizesWithoutLimits) {
  const fs::path data = dir_ / "data";
  fs::create_directory(data);
  lenet::testing::write_data_set(data.string(), 64, 32);
  const std::string c = (dir_ / "c.safetensors").string();
  const std::string on = "--backend cpu --quiet --data-dir '" + data.string() + "' ";
  ASSERT_EQ(run(on + "--epochs 1 --save '" + c + "'").status, 0);
  const std::optional<lenet::engine::TrainingState> st = lenet::engine::load_checkpoint(c).state;
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->train_examples, 64u);
  EXPECT_EQ(st->test_examples, 32u);
  expect_usage_error(on + "--epochs 2 --test-limit 16 --resume '" + c + "'",
                     "--test-limit differs from the value 32 saved in --resume");
}

// The final line's accuracy is the last epoch's (not the first's), and evaluating the saved parameters
// (--epochs 0 --load) gives it again: the correct count over the test set, here without a --train-limit.
// Still on the plateau, --lr 2 changes the class predicted: 0.09, then 0.11 on these 500 test examples.
TEST_F(Cli, FinalLineHasTheLastEpochsAccuracyAndEvaluationGivesItAgain) {
  const std::string a = (dir_ / "a.safetensors").string(), metrics = (dir_ / "m.jsonl").string();
  const Result r = run("--backend cpu --quiet --epochs 2 --lr 2 --batch-size 64 --train-limit 1000 --test-limit 500 "
                       "--save '" + a + "' --metrics '" + metrics + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(metrics);
  std::vector<std::string> accuracies;
  for (std::string line; std::getline(in, line);) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", nlohmann::json::parse(line).at("test_acc").get<double>());
    accuracies.push_back(text);
  }
  ASSERT_EQ(accuracies.size(), 2u);
  ASSERT_NE(accuracies[0], accuracies[1]) << "the epochs' accuracies must differ for this test to tell them apart";
  EXPECT_EQ(r.out.rfind("test acc: " + accuracies[1] + ", ", 0), 0u) << r.out;
  const Result evaluated = run("--backend cpu --epochs 0 --test-limit 500 --load '" + a + "'");
  ASSERT_EQ(evaluated.status, 0) << evaluated.err;
  EXPECT_EQ(evaluated.out, "test acc: " + accuracies[1] + ", no training on [cpu]\n");
}

}  // namespace
