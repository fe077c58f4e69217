// A failed CUDA, cuDNN or cuBLAS call becomes one line that names the call, the place, the library's own
// error name and, where there is one, what to try. Built from status codes, so it runs without a GPU.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "cli_runner.hpp"
#include "graphs/cuda_check.hpp"

namespace {

using lenet::cuda::CudaError;

template <typename Check, typename Status>
std::string message(Check check, Status status) {
  try {
    check(status, "someCall(x, 4)", "engine/some_file.cu", 42);
  } catch (const CudaError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no CudaError thrown";
  return "";
}

void expect_one_line_naming_the_call(const std::string& m) {
  EXPECT_EQ(m.rfind("someCall(x, 4) failed", 0), 0u) << m;
  EXPECT_NE(m.find("engine/some_file.cu:42"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(CudaErrors, SuccessDoesNotThrow) {
  EXPECT_NO_THROW(lenet::cuda::check_cuda(cudaSuccess, "c", "f", 1));
  EXPECT_NO_THROW(lenet::cuda::check_cudnn(CUDNN_STATUS_SUCCESS, "c", "f", 1));
  EXPECT_NO_THROW(lenet::cuda::check_cublas(CUBLAS_STATUS_SUCCESS, "c", "f", 1));
}

TEST(CudaErrors, OutOfMemoryFromEachLibrarySaysWhatToTry) {
  const std::string cuda = message(lenet::cuda::check_cuda, cudaErrorMemoryAllocation);
  const std::string cudnn = message(lenet::cuda::check_cudnn, CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED);
  const std::string cublas = message(lenet::cuda::check_cublas, CUBLAS_STATUS_ALLOC_FAILED);
  for (const std::string& m : {cuda, cudnn, cublas}) {
    expect_one_line_naming_the_call(m);
    EXPECT_NE(m.find("out of device memory: try a smaller --batch-size"), std::string::npos) << m;
  }
  EXPECT_NE(cuda.find(": CUDA cudaErrorMemoryAllocation"), std::string::npos) << cuda;
  EXPECT_NE(cudnn.find(": cuDNN CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"), std::string::npos) << cudnn;
  EXPECT_NE(cublas.find(": cuBLAS CUBLAS_STATUS_ALLOC_FAILED"), std::string::npos) << cublas;
}

TEST(CudaErrors, MissingGpuAndBrokenInstallationPointToTheCpuBackend) {
  for (const std::string& m : {message(lenet::cuda::check_cuda, cudaErrorNoDevice),
                               message(lenet::cuda::check_cuda, cudaErrorInsufficientDriver),
                               message(lenet::cuda::check_cuda, cudaErrorDevicesUnavailable),
                               message(lenet::cuda::check_cuda, cudaErrorNoKernelImageForDevice),
                               message(lenet::cuda::check_cuda, cudaErrorUnsupportedPtxVersion),
                               message(lenet::cuda::check_cudnn, CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED),
                               message(lenet::cuda::check_cudnn, CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE),
                               message(lenet::cuda::check_cudnn, CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING),
                               message(lenet::cuda::check_cublas, CUBLAS_STATUS_NOT_INITIALIZED)}) {
    expect_one_line_naming_the_call(m);
    EXPECT_NE(m.find("use --backend cpu"), std::string::npos) << m;
  }
  EXPECT_NE(message(lenet::cuda::check_cuda, cudaErrorInsufficientDriver).find("older than this build's CUDA runtime"),
            std::string::npos);
  EXPECT_NE(message(lenet::cuda::check_cuda, cudaErrorNoKernelImageForDevice).find("-DCMAKE_CUDA_ARCHITECTURES="),
            std::string::npos);
  const std::string m = message(lenet::cuda::check_cuda, cudaErrorInvalidDevice);
  EXPECT_NE(m.find("--num-gpus"), std::string::npos) << m;
}

TEST(CudaErrors, OtherErrorsStillNameTheLibraryError) {
  const std::string m = message(lenet::cuda::check_cuda, cudaErrorIllegalAddress);
  expect_one_line_naming_the_call(m);
  EXPECT_NE(m.find("cudaErrorIllegalAddress"), std::string::npos) << m;
  EXPECT_EQ(m.find("try"), std::string::npos) << m;
}

}  // namespace

// Without a device the GPU tests skip, unless LENET_GPU_REQUIRED=1 says a device must answer: then they
// fail (the GPU check sets it). Shown on test_gpu_probe, run as CTest runs it.
class GpuTests : public lenet::testing::Cli {};  // for its scratch folder

TEST_F(GpuTests, SkipWithoutDeviceAndFailWhenOneIsRequired) {
  const std::string out = (dir_ / "out").string();
  auto run = [&](const std::string& env) {  // with no device visible, as on a machine without one
    const int raw = std::system((env + " " + lenet::testing::kHideGpus + "'" LENET_GPU_PROBE_TEST_EXE "' >'" + out + "' 2>&1").c_str());
    return std::pair<int, std::string>(WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, lenet::testing::slurp(out));
  };
  const auto [skipped_status, skipped] = run("env -u LENET_GPU_REQUIRED");
  EXPECT_EQ(skipped_status, 0) << skipped;
  EXPECT_NE(skipped.find("[  SKIPPED ]"), std::string::npos) << skipped;
  const auto [failed_status, failed] = run("LENET_GPU_REQUIRED=1");
  EXPECT_NE(failed_status, 0) << failed;
  EXPECT_NE(failed.find("LENET_GPU_REQUIRED=1, but no CUDA device answers"), std::string::npos) << failed;
  EXPECT_EQ(failed.find("[  SKIPPED ]"), std::string::npos) << failed;
}
