// main() of the test programs that train on the CPU in their own process: as lenet-train's, it starts the
// program again with the OpenBLAS kernels fitting this CPU where OpenBLAS took its generic ones, which
// took several times as long.
#include <gtest/gtest.h>

#include "engine/gemm_kernels.hpp"

int main(int argc, char** argv) {
  lenet::engine::use_gemm_kernels_fitting_this_cpu(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
