// cuBLAS, opened the first time a GPU path needs it rather than when the program starts. A program linked
// to libcublas.so has the dynamic loader run libcublasLt's initialisers in every process, CPU runs and
// --help included: about 0.4 s and 200 MB resident on the 2-core VMs this project's CI runs on
// (profiling/results/2026-12-04-cpu-2core-lazy-cublas/). cuDNN's libcudnn.so.9 opens its own sub-libraries
// the same way. The library is looked up by its soname first (LD_LIBRARY_PATH, the system's cache, as a
// linked library would be), then at the path the build found (LENET_CUBLAS_PATH, set by CMake). Each
// entry point has the header's type, so the compiler checks a call through it as it would a direct call.
#pragma once
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "graphs/cuda_error.hpp"

namespace lenet::cuda {

struct CublasLibrary {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemv_v2) sgemv = nullptr;
  decltype(&cublasGetProperty) get_property = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// Opens the library `file` names (a soname or a path, as dlopen takes it) and resolves every entry point
// into `lib`; else returns false with the reason in `why` (the library stays closed then).
inline bool open_cublas(const std::string& file, CublasLibrary& lib, std::string& why) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    why = error != nullptr ? error : file + ": dlopen failed";
    return false;
  }
  const char* missing = nullptr;
  const auto resolve = [&](auto& entry, const char* name) {
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(dlsym(handle, name));
    if (entry == nullptr && missing == nullptr) missing = name;
  };
  resolve(lib.create, "cublasCreate_v2");
  resolve(lib.destroy, "cublasDestroy_v2");
  resolve(lib.set_math_mode, "cublasSetMathMode");
  resolve(lib.set_stream, "cublasSetStream_v2");
  resolve(lib.set_workspace, "cublasSetWorkspace_v2");
  resolve(lib.sgemm, "cublasSgemm_v2");
  resolve(lib.sgemv, "cublasSgemv_v2");
  resolve(lib.get_property, "cublasGetProperty");
  resolve(lib.status_name, "cublasGetStatusName");
  resolve(lib.status_string, "cublasGetStatusString");
  if (missing != nullptr) {
    dlclose(handle);
    lib = CublasLibrary{};
    why = file + " has no " + missing;
    return false;
  }
  return true;  // never closed: the process keeps it to the end, as it would a linked library
}

// The process's cuBLAS, opened on the first call (once, whichever thread calls first). Throws CudaError
// with the reasons when it cannot be opened; a later call tries again.
inline const CublasLibrary& cublas_library() {
  static const CublasLibrary opened = [] {
    CublasLibrary lib;
    std::string why;
    if (open_cublas("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR), lib, why)) return lib;
#ifdef LENET_CUBLAS_PATH
    std::string why_path;
    if (open_cublas(LENET_CUBLAS_PATH, lib, why_path)) return lib;
    why += "; " + why_path;
#endif
    throw CudaError("cannot load cuBLAS (" + why + "): check the CUDA installation, or use --backend cpu");
  }();
  return opened;
}

}  // namespace lenet::cuda
