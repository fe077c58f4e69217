// Whether this build has CUDA: LENET_HAVE_CUDA, 1 or 0, defined for every source by the top
// CMakeLists.txt (LENET_WITH_CUDA). Include this before any `#if LENET_HAVE_CUDA`, where an undefined
// macro would silently count as 0 and drop the CUDA code from a CUDA build.
#pragma once
#ifndef LENET_HAVE_CUDA
#error "LENET_HAVE_CUDA is not defined (the top CMakeLists.txt defines it as 1 or 0)"
#endif
