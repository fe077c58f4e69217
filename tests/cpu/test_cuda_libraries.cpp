// The CUDA libraries this build links answer their version queries without a GPU, and the versions
// match the headers the build used: a broken or mismatched CUDA installation fails here, not on a GPU.
#include <gtest/gtest.h>

#include <cudnn_version.h>

#include <string>

#include "engine/cuda_probe.hpp"

TEST(CudaLibraries, LinkedVersionsMatchTheHeaders) {
  const std::string v = lenet::engine::cuda_library_versions();
  const std::string dnn = "cuDNN " + std::to_string(CUDNN_MAJOR) + "." + std::to_string(CUDNN_MINOR) + ".";
  EXPECT_NE(v.find(dnn), std::string::npos) << v;
  EXPECT_EQ(v.find("unknown"), std::string::npos) << v;
}

TEST(CudaLibraries, AVersionNamesTheHeadersOnlyWhereTheyDiffer) {
  EXPECT_EQ(lenet::engine::library_version(91900, 91900), "9.19.0");
  EXPECT_EQ(lenet::engine::library_version(91002, 91900), "9.10.2 (built with 9.19.0)");
  EXPECT_EQ(lenet::engine::library_version(130100, 130000), "13.1.0 (built with 13.0.0)");
}

TEST(CudaLibraries, ProbeNeverThrowsAndClassifiesItsAnswer) {
  const lenet::engine::CudaProbe p = lenet::engine::probe_cuda();
  EXPECT_TRUE(p.ok() || p.status != 0) << p.describe();
  EXPECT_EQ(p.devices > 0, p.status == 0) << p.describe();
  EXPECT_FALSE(p.describe().empty());
}
