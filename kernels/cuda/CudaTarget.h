//===- CudaTarget.h - The CUDA backend as lowering sees it ----------------===//
//
// Host C++ only: it needs neither nvcc nor a device, so `headroom report
// --device cuda` is exact on any machine, and it is always built.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CUDA_CUDATARGET_H
#define HEADROOM_KERNELS_CUDA_CUDATARGET_H

#include "compiler/Target.h"

namespace headroom {

/// What kernels/cuda runs: 256-byte alignment (what cudaMalloc returns and
/// cuBLASLt's vectorised loads prefer), cuBLASLt's 32 MiB workspace for
/// Hopper held for the whole run, the op families of kernels/cuda in f32 (f64
/// too).
const Target &cudaTarget();

/// The cuBLASLt workspace the CUDA executor allocates once (NVIDIA
/// recommends 32 MiB on Hopper).
constexpr uint64_t kCublasLtWorkspaceBytes = 32ull << 20;

} // namespace headroom

#endif // HEADROOM_KERNELS_CUDA_CUDATARGET_H
