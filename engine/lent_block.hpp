// A block of memory allocated once and lent to one request at a time: what an allocator hands out where
// nothing may be allocated (Thrust's temporary storage in the graph mode's evaluation). The state is the
// block's, not the allocator's, so it holds however often the allocator is copied. A request while the
// block is out, or one larger than the block, is a programming error and throws std::logic_error: two
// requests sharing the block would silently overwrite each other's data.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace lenet::engine {

class LentBlock {
 public:
  // `what` names the block in errors.
  LentBlock(std::string what, char* data, size_t bytes) : what_(std::move(what)), data_(data), bytes_(bytes) {}
  char* lend(size_t bytes) {
    if (lent_) throw std::logic_error(what_ + ": a second request while the block is lent");
    if (bytes > bytes_) {
      throw std::logic_error(what_ + ": a request for " + std::to_string(bytes) + " bytes, more than the " +
                             std::to_string(bytes_) + " allocated");
    }
    lent_ = true;
    return data_;
  }
  void give_back() noexcept { lent_ = false; }  // from a deallocate(), which must not throw
  bool lent() const { return lent_; }

 private:
  std::string what_;
  char* data_;
  size_t bytes_;
  bool lent_ = false;
};

}  // namespace lenet::engine
