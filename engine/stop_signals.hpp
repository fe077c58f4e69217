// How lenet-train and lenet-bench take a stop: one handler for SIGINT, SIGTERM and SIGHUP.
#pragma once
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <initializer_list>

namespace lenet::engine {

// A repeated interrupt this soon after the first is the same stop: timeout(1) -s INT sends SIGINT to the
// process and then to its process group, microseconds apart, where no hand presses Ctrl-C twice in a
// tenth of a second (a held key repeats after a quarter of a second or more).
inline constexpr int64_t kSameInterruptNs = 100'000'000;

// Whether `signal`, coming `since_first_ns` after a first stop `first` (0: none yet), ends the process
// at once: another Ctrl-C, or another kind of signal. A hangup or a termination request that comes again
// counts once: a hangup may come from the shell and from the terminal, and timeout(1) sends SIGTERM to
// the process and then to its process group. Async-signal-safe.
inline bool is_second_stop(int first, int signal, int64_t since_first_ns) {
  return first != 0 && (signal != first || (signal == SIGINT && since_first_ns >= kSameInterruptNs));
}

// CLOCK_MONOTONIC in nanoseconds (clock_gettime is async-signal-safe).
inline int64_t monotonic_ns() {
  timespec now {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

// A stop as the handlers record it: the first signal, and when it came.
struct StopRecord {
  std::atomic<int> signal{0};
  std::atomic<int64_t> first_ns{0};  // 0 until the first stop's time is stored
};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free);

// What a handler does with `signal`, taken at `now_ns`: the first stop is recorded; returns whether this
// one ends the process at once (is_second_stop). Two signals taken at the same moment by two threads (the
// kernel gives a pending signal to any thread that does not block it: an OpenMP worker while the main
// thread's handler blocks it) never both see no stop yet: one compare-exchange wins, and the other, which
// may find the first's time not stored yet, came with it. Async-signal-safe.
inline bool take_stop(StopRecord& stop, int signal, int64_t now_ns = monotonic_ns()) {
  int first = 0;
  if (stop.signal.compare_exchange_strong(first, signal)) {
    stop.first_ns = std::max<int64_t>(now_ns, 1);  // 0 says "not stored yet"
    return false;
  }
  const int64_t first_ns = stop.first_ns;
  return is_second_stop(first, signal, first_ns == 0 ? 0 : now_ns - first_ns);
}

// Each of the three blocks the others while `handler` runs in a thread (other threads may still take
// one: take_stop orders them). A write waiting on a full pipe (a slow or paused reader) goes on waiting:
// without SA_RESTART it would fail with EINTR and end the run as an error instead of a stop. A signal
// ignored when the program starts stays ignored, as whoever started it asked: a hangup under nohup, an
// interrupt in a script's background job (POSIX shells ignore SIGINT there, so that the terminal's
// Ctrl-C stops the script, not its jobs).
inline void install_stop_handlers(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&action.sa_mask, signal);
  action.sa_flags = SA_RESTART;
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction inherited {};
    if (sigaction(signal, nullptr, &inherited) == 0 && inherited.sa_handler != SIG_IGN) sigaction(signal, &action, nullptr);
  }
}

}  // namespace lenet::engine
