//===- CublasLt.h - cuBLASLt, loaded when a GPU first needs it --*- C++ -*-===//
//
// cuBLASLt is a large library: linked into headroom, the loader maps and
// relocates it in every process, ~150 MiB of resident memory before
// anything runs -- on the CPU too, where it is never called. So headroom
// does not link it: the CUDA executor (and the GPU kernel tests) load it
// with dlopen when they create their handle, and the GEMMs call it through
// these pointers, which are set by then.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CUDA_CUBLASLT_H
#define HEADROOM_KERNELS_CUDA_CUBLASLT_H

#include <cublasLt.h>

#include <string>

namespace headroom {
namespace cuda {

/// The cuBLASLt entry points headroom calls.
struct CublasLtApi {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute;
};

/// The library's entry points, loaded on the first call (libcublasLt.so.N
/// of the toolkit headroom was built with, from the loader's path, then
/// from the toolkit's library folder); null when it cannot be loaded, with
/// the reason in *error.
const CublasLtApi *cublasLt(std::string *error = nullptr);

} // namespace cuda
} // namespace headroom

#endif // HEADROOM_KERNELS_CUDA_CUBLASLT_H
