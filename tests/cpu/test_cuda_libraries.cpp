// The CUDA libraries this build links or opens answer their version queries without a GPU, and the versions
// match the headers the build used: a broken or mismatched CUDA installation fails here, not on a GPU.
#include <gtest/gtest.h>

#include <cudnn_version.h>

#include <string>

#include "engine/cuda_probe.hpp"
#include "graphs/cublas_library.hpp"

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

// cuBLAS is opened when first used (graphs/cublas_library.hpp), and calls through its entry points
// reach the library: without a GPU, cublasCreate answers with an error status instead of crashing.
TEST(CudaLibraries, CublasOpensOnFirstUseAndItsEntryPointsAnswer) {
  const lenet::cuda::CublasLibrary& lib = lenet::cuda::cublas_library();
  EXPECT_STREQ(lib.status_name(CUBLAS_STATUS_ALLOC_FAILED), "CUBLAS_STATUS_ALLOC_FAILED");
  cublasHandle_t handle = nullptr;
  const cublasStatus_t rc = lib.create(&handle);
  if (rc == CUBLAS_STATUS_SUCCESS) {
    EXPECT_EQ(lib.destroy(handle), CUBLAS_STATUS_SUCCESS);
  } else {
    EXPECT_EQ(lenet::engine::probe_cuda().devices, 0) << lib.status_name(rc) << " with a device that answers";
  }
}

TEST(CudaLibraries, ALibraryThatIsMissingOrIsNotCublasIsRefusedWithTheReason) {
  lenet::cuda::CublasLibrary lib;
  std::string why;
  EXPECT_FALSE(lenet::cuda::open_cublas("/nonexistent/libcublas.so.13", lib, why));
  EXPECT_NE(why.find("/nonexistent/libcublas.so.13: cannot open shared object file"), std::string::npos) << why;
  EXPECT_FALSE(lenet::cuda::open_cublas("libc.so.6", lib, why));
  EXPECT_EQ(why, "libc.so.6 has no cublasCreate_v2");
  EXPECT_EQ(lib.create, nullptr);
}
