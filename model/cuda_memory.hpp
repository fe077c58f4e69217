// Device memory owned by one object, allocated once on a given device (never inside a training loop).
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "graphs/cuda_check.hpp"

namespace lenet::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t count) : device_(device), count_(count) {
    if (count == 0) return;
    DeviceGuard guard(device);
    LENET_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      device_ = std::exchange(o.device_, -1);
      count_ = std::exchange(o.count_, 0);
      ptr_ = std::exchange(o.ptr_, nullptr);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  int device() const { return device_; }

  // Synchronous copies, for set-up, tests and the naive mode's host reads. The buffer's device is made
  // current so the copy is ordered after that device's legacy-stream work; work on non-blocking streams
  // (the graph mode's) is not waited for: the caller synchronizes those first.
  void upload(const T* host, size_t count, size_t offset = 0) {
    check_range(offset, count);
    DeviceGuard guard(device_);
    LENET_CUDA_CHECK(cudaMemcpy(ptr_ + offset, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download(size_t count, size_t offset = 0) const {
    check_range(offset, count);
    std::vector<T> host(count);
    DeviceGuard guard(device_);
    LENET_CUDA_CHECK(cudaMemcpy(host.data(), ptr_ + offset, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  std::vector<T> download() const { return download(count_); }

 private:
  void check_range(size_t offset, size_t count) const {
    if (offset + count > count_) throw std::out_of_range("DeviceBuffer: copy past the end");
  }
  void release() noexcept {
    if (ptr_ == nullptr) return;
    QuietDeviceGuard guard(device_);
    cudaFree(ptr_);  // errors here cannot be reported from a destructor; a sticky error shows at the next call
    ptr_ = nullptr;
  }

  int device_ = -1;
  size_t count_ = 0;
  T* ptr_ = nullptr;
};

}  // namespace lenet::cuda
