// cuBLAS, opened the first time a GPU path needs it rather than when the program starts. A program linked
// to libcublas.so has the dynamic loader run libcublasLt's initialisers in every process, CPU runs and
// --help included: about 0.4 s and 200 MB resident on the 2-core VMs this project's CI runs on
// (profiling/results/2026-12-04-cpu-2core-lazy-cublas/). cuDNN's libcudnn.so.9 opens its own sub-libraries
// the same way. The library is looked up by its soname (LD_LIBRARY_PATH, the program's RUNPATH, the
// system's cache, as a linked library would be), then at the path the build found (LENET_CUBLAS_PATH, set
// by CMake); the other way round where the build was given CUBLAS_ROOT (LENET_CUBLAS_PATH_FIRST).
// Each entry point has the header's type, so the compiler checks a call through it as it would a direct
// call; LENET_CUBLAS_CALL (graphs/cuda_check.hpp) makes a checked one.
#pragma once
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>
#include <type_traits>
#include <utility>

#include "graphs/cuda_error.hpp"

namespace lenet::cuda {

// cuBLAS's entry points this project calls, named as in the API without the "cublas" prefix.
struct CublasLibrary {
  decltype(&cublasCreate_v2) Create = nullptr;
  decltype(&cublasDestroy_v2) Destroy = nullptr;
  decltype(&cublasSetMathMode) SetMathMode = nullptr;
  decltype(&cublasSetStream_v2) SetStream = nullptr;
  decltype(&cublasSetWorkspace_v2) SetWorkspace = nullptr;
  decltype(&cublasSgemm_v2) Sgemm = nullptr;
  decltype(&cublasSgemv_v2) Sgemv = nullptr;
  decltype(&cublasGetProperty) GetProperty = nullptr;
  decltype(&cublasGetStatusName) GetStatusName = nullptr;
  decltype(&cublasGetStatusString) GetStatusString = nullptr;
};

// Opens the library `file` names (a soname or a path, as dlopen takes it) and resolves every entry point
// into `lib`; else returns false with the reason in `why`, leaving `lib` as it was and the library closed.
inline bool open_cublas(const std::string& file, CublasLibrary& lib, std::string& why) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    why = error != nullptr ? error : file + ": dlopen failed";
    return false;
  }
  CublasLibrary opened;
  const char* missing = nullptr;
  const auto resolve = [&](auto& entry, const char* name) {
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(dlsym(handle, name));
    if (entry == nullptr && missing == nullptr) missing = name;
  };
  resolve(opened.Create, "cublasCreate_v2");
  resolve(opened.Destroy, "cublasDestroy_v2");
  resolve(opened.SetMathMode, "cublasSetMathMode");
  resolve(opened.SetStream, "cublasSetStream_v2");
  resolve(opened.SetWorkspace, "cublasSetWorkspace_v2");
  resolve(opened.Sgemm, "cublasSgemm_v2");
  resolve(opened.Sgemv, "cublasSgemv_v2");
  resolve(opened.GetProperty, "cublasGetProperty");
  resolve(opened.GetStatusName, "cublasGetStatusName");
  resolve(opened.GetStatusString, "cublasGetStatusString");
  if (missing != nullptr) {
    dlclose(handle);
    why = file + " has no " + missing;
    return false;
  }
  lib = opened;
  return true;  // never closed: the process keeps it to the end, as it would a linked library
}

// The process's cuBLAS, opened on the first call (once, whichever thread calls first). Throws CudaError
// with the reasons when it cannot be opened; a later call tries again.
inline const CublasLibrary& cublas_library() {
  static const CublasLibrary opened = [] {
    std::string files[] = {"libcublas.so." + std::to_string(CUBLAS_VER_MAJOR), LENET_CUBLAS_PATH};
#ifdef LENET_CUBLAS_PATH_FIRST
    std::swap(files[0], files[1]);
#endif
    CublasLibrary lib;
    std::string why, reasons;
    for (const std::string& file : files) {
      if (open_cublas(file, lib, why)) return lib;
      reasons += (reasons.empty() ? "" : "; ") + why;
    }
    throw CudaError("cannot load cuBLAS (" + reasons + "): check the CUDA installation, or use --backend cpu");
  }();
  return opened;
}

}  // namespace lenet::cuda
