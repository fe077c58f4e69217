// The CUDA probe and the CUDA libraries this build links. The library versions are queried without a
// GPU, so that part runs everywhere; the device part skips only when no driver or device answers.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <cudnn_version.h>

#include <string>

#include "engine/cuda_probe.hpp"

namespace {

using lenet::engine::probe_cuda;

TEST(CudaLibraries, LinkedVersionsMatchTheHeaders) {
  const std::string v = lenet::engine::cuda_library_versions();
  const std::string dnn = "cuDNN " + std::to_string(CUDNN_MAJOR) + "." + std::to_string(CUDNN_MINOR) + ".";
  EXPECT_NE(v.find(dnn), std::string::npos) << v;
  EXPECT_EQ(v.find("unknown"), std::string::npos) << v;
}

TEST(CudaProbe, DeviceAnswersOrIsAbsent) {
  const lenet::engine::CudaProbe p = probe_cuda();
  if (p.no_device()) GTEST_SKIP() << "no CUDA device: " << p.describe();
  ASSERT_EQ(p.status, 0) << p.describe();
  ASSERT_GT(p.devices, 0);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_GT(prop.multiProcessorCount, 0);
  EXPECT_NE(p.describe().find("CUDA device"), std::string::npos);
}

}  // namespace
