#include "engine/cli.hpp"
#include "engine/gemm_kernels.hpp"

int main(int argc, char** argv) {
  lenet::engine::use_gemm_kernels_fitting_this_cpu(argv);
  return lenet::engine::run_cli(argc, argv);
}
