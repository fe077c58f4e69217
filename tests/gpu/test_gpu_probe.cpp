// A CUDA device that answers the probe is usable: its properties can be read.
#include <cuda_runtime_api.h>

#include "gpu_test.hpp"

TEST(CudaProbe, DeviceAnswersAndIsUsable) {
  LENET_REQUIRE_GPU();
  const lenet::engine::CudaProbe p = lenet::engine::probe_cuda();
  ASSERT_GT(p.devices, 0);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_GT(prop.multiProcessorCount, 0);
  EXPECT_NE(p.describe().find("CUDA device"), std::string::npos);
}
