// A CUDA device that answers the probe is usable: its properties can be read. A call that fails on it
// is one line naming the call, the device and what to try, and leaves no error behind for the next call.
#include <cuda_runtime_api.h>

#include <string>

#include "gpu_test.hpp"
#include "graphs/cuda_check.hpp"

TEST(CudaProbe, DeviceAnswersAndIsUsable) {
  LENET_REQUIRE_GPU();
  const lenet::engine::CudaProbe p = lenet::engine::probe_cuda();
  ASSERT_GT(p.devices, 0);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_GT(prop.multiProcessorCount, 0);
  EXPECT_NE(p.describe().find("CUDA device"), std::string::npos);
  // Its memory too (the GPU check's sanitizer probe runs this test: some hosts answer the queries above
  // and refuse the first allocation under compute-sanitizer).
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  unsigned char h[64] = {};
  EXPECT_EQ(cudaMemset(d, 0x5a, sizeof h), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  for (const unsigned char b : h) ASSERT_EQ(b, 0x5a);
}

TEST(CudaProbe, FailedCallNamesItsDeviceAndWhatToTry) {
  LENET_REQUIRE_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* p = nullptr;
  std::string message;
  try {
    LENET_CUDA_CHECK(cudaMalloc(&p, size_t{1} << 60));  // an exbibyte: more than any GPU has
  } catch (const lenet::cuda::CudaError& e) {
    message = e.what();
  }
  EXPECT_EQ(message.rfind("cudaMalloc(&p, size_t{1} << 60) failed on cuda:0 at ", 0), 0u) << message;
  EXPECT_NE(message.find(": CUDA cudaErrorMemoryAllocation"), std::string::npos) << message;
  EXPECT_NE(message.find("out of device memory: try a smaller --batch-size"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}
