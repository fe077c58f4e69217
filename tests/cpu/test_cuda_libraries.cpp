// The CUDA libraries this build links or opens answer their version queries without a GPU, and the versions
// match the headers the build used: a broken or mismatched CUDA installation fails here, not on a GPU.
#include <gtest/gtest.h>

#include <cudnn_version.h>

#include <string>

#include "engine/cuda_probe.hpp"
#include "graphs/cublas_library.hpp"
#include "graphs/cuda_check.hpp"

TEST(CudaLibraries, LoadedVersionsMatchTheHeaders) {
  const std::string v = lenet::engine::cuda_library_versions();
  const std::string dnn = "cuDNN " + std::to_string(CUDNN_MAJOR) + "." + std::to_string(CUDNN_MINOR) + ".";
  EXPECT_NE(v.find(dnn), std::string::npos) << v;
  EXPECT_EQ(v.find("unknown"), std::string::npos) << v;
  EXPECT_EQ(v.find("unavailable"), std::string::npos) << v;  // cuBLAS could not be opened
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

// cuBLAS, opened when first used (graphs/cublas_library.hpp; Cli.CpuRunsNeverOpenCublas checks when), answers
// through its entry points, and a checked call that fails names the API's function: without a GPU,
// cublasCreate gives an error status instead of crashing.
TEST(CudaLibraries, CublasEntryPointsAnswerAndAFailedCallNamesTheFunction) {
  const lenet::cuda::CublasLibrary& lib = lenet::cuda::cublas_library();
  EXPECT_STREQ(lib.GetStatusName(CUBLAS_STATUS_ALLOC_FAILED), "CUBLAS_STATUS_ALLOC_FAILED");
  cublasHandle_t handle = nullptr;
  try {
    LENET_CUBLAS_CALL(Create, &handle);
    EXPECT_EQ(lib.Destroy(handle), CUBLAS_STATUS_SUCCESS);
  } catch (const lenet::cuda::CudaError& e) {
    const std::string m = e.what();
    EXPECT_EQ(lenet::engine::probe_cuda().devices, 0) << m << " with a device that answers";
    EXPECT_EQ(m.rfind("cublasCreate(&handle) failed", 0), 0u) << m;
    EXPECT_NE(m.find(": cuBLAS CUBLAS_STATUS_"), std::string::npos) << m;
  }
}

TEST(CudaLibraries, ALibraryThatIsMissingOrIsNotCublasIsRefusedWithTheReason) {
  lenet::cuda::CublasLibrary lib;
  std::string why;
  EXPECT_FALSE(lenet::cuda::open_cublas("/nonexistent/libcublas.so.13", lib, why));
  EXPECT_NE(why.find("/nonexistent/libcublas.so.13: cannot open shared object file"), std::string::npos) << why;
  EXPECT_FALSE(lenet::cuda::open_cublas("libc.so.6", lib, why));
  EXPECT_EQ(why, "libc.so.6 has no cublasCreate_v2");
}
