// How lenet-train and lenet-bench take a stop: one handler for SIGINT, SIGTERM and SIGHUP.
#pragma once
#include <atomic>
#include <csignal>

namespace lenet::engine {

// Whether `signal`, coming after a first stop `first` (0: none yet), ends the process at once: another
// Ctrl-C, or another kind of signal. A hangup or a termination request that comes again counts once: a
// hangup may come from the shell and from the terminal, and timeout(1) sends SIGTERM to the process and
// then to its process group. Async-signal-safe.
inline bool is_second_stop(int first, int signal) { return first != 0 && (signal != first || signal == SIGINT); }

// What a handler does with `signal`: the first stop is recorded in `stop`; returns whether this one ends
// the process at once (is_second_stop). Two signals taken at the same moment by two threads (the kernel
// gives a pending signal to any thread that does not block it: an OpenMP worker while the main thread's
// handler blocks it) never both see no stop yet: one compare-exchange wins. Async-signal-safe.
static_assert(std::atomic<int>::is_always_lock_free);
inline bool take_stop(std::atomic<int>& stop, int signal) {
  int first = 0;
  return !stop.compare_exchange_strong(first, signal) && is_second_stop(first, signal);
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
