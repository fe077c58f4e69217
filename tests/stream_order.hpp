// A model of CUDA streams and events with vector clocks, for tests of the order the graph mode enqueues
// its work in. Every access of a stream gets the next tick of that stream's clock component; an event
// record copies the stream's clock (replacing what the event held) and a wait merges the event's clock,
// as last recorded, into the waiting stream's, as cudaEventRecord and cudaStreamWaitEvent do (a host
// that synchronises on an event is a stream of its own here). Access a happens before b exactly when b's
// clock covers a's tick, which includes a being earlier on b's stream. Indices are checked: a model
// that names a stream or event that is not there fails instead of reading past a vector.
//
// A wait only orders a stream behind work enqueued before it, so when every two conflicting accesses
// (same memory, overlapping ranges, one a write) are ordered, every execution the device may choose
// computes what the enqueue order computes.
#pragma once
#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace lenet::test {

class StreamOrder {
 public:
  StreamOrder(size_t streams, size_t events)
      : clock_(streams, std::vector<int>(streams, 0)), event_(events, std::vector<int>(streams, 0)) {}

  void access(size_t stream, const std::string& memory, size_t offset, size_t size, bool write) {
    ++clock_.at(stream).at(stream);
    log_.push_back({stream, clock_[stream], memory, offset, size, write});
  }
  void record(size_t stream, size_t event) { event_.at(event) = clock_.at(stream); }
  void wait(size_t stream, size_t event) {
    if (waits_++ == dropped_) return;
    merge(clock_.at(stream), event_.at(event));
  }

  // Orders `stream` behind everything `host` did so far: the host enqueues work after its own earlier
  // accesses and the events it waited for.
  void follow(size_t stream, size_t host) { merge(clock_.at(stream), clock_.at(host)); }

  // Leaves out the index-th wait (counting from 0), to show that the order needs it.
  void drop_wait(size_t index) { dropped_ = index; }
  size_t waits() const { return waits_; }

  // Every unordered pair of conflicting accesses, one line each.
  std::vector<std::string> races() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < log_.size(); ++i)
      for (size_t j = i + 1; j < log_.size(); ++j) {
        const Access& a = log_[i];
        const Access& b = log_[j];
        const bool overlap = a.memory == b.memory && a.offset < b.offset + b.size && b.offset < a.offset + a.size;
        if (overlap && (a.write || b.write) && b.clock[a.stream] < a.clock[a.stream])
          out.push_back(describe(a) + " vs " + describe(b));
      }
    return out;
  }

 private:
  struct Access {
    size_t stream;
    std::vector<int> clock;  // the stream's clock at the access, its own tick included
    std::string memory;
    size_t offset, size;
    bool write;
  };
  static void merge(std::vector<int>& into, const std::vector<int>& from) {
    for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
  }
  static std::string describe(const Access& a) {
    return std::string(a.write ? "write" : "read") + " of " + a.memory + "[" + std::to_string(a.offset) + "+" +
           std::to_string(a.size) + ") on stream " + std::to_string(a.stream) + " tick " +
           std::to_string(a.clock[a.stream]);
  }

  std::vector<std::vector<int>> clock_, event_;
  std::vector<Access> log_;
  size_t waits_ = 0, dropped_ = std::numeric_limits<size_t>::max();
};

}  // namespace lenet::test
