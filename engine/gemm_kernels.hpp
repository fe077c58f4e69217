// The CPU GEMM's kernels fitted to this CPU, for the programs' main().
#pragma once

#include <sys/auxv.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "model/gemm.hpp"

namespace lenet::engine {

// Where OpenBLAS took its generic kernels on a CPU it does not know (model::better_gemm_kernels), starts
// the program again, in the same process with the same arguments, with OPENBLAS_CORETYPE naming the
// kernels this CPU runs: OpenBLAS reads that variable once, as it is loaded, before main. A set
// OPENBLAS_CORETYPE, whatever its value, is left as it is (OPENBLAS_CORETYPE=Prescott keeps the generic
// kernels). Call it first in main, before any handler or thread of ours exists. Returns where there is
// nothing to do or the program cannot be started again; the run goes on with the kernels it has.
inline void use_gemm_kernels_fitting_this_cpu(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  // Started by the dynamic loader as a program (`ld.so lenet-train ...`), the process's file is the loader:
  // the kernel gave no interpreter, so AT_BASE is 0.
  if (::getauxval(AT_BASE) == 0) return;
  const char* kernels = model::better_gemm_kernels_here();
  if (kernels == nullptr) return;
  // The program's own path, not /proc/self/exe: the process takes its name (ps, pkill) from the file.
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0 || ::setenv("OPENBLAS_CORETYPE", kernels, 1) != 0) return;
  self[n] = '\0';
  ::execv(self, argv);
  ::unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace lenet::engine
