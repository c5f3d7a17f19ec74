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

/// Whether kernels/cuda has a kernel for `op`: every op the executor does
/// not run itself but Shape and Size (import folds them into constants: a
/// plan of static shapes never computes one). The cuda target refuses the
/// others when a plan is made; CudaKernels.RegistryIsEveryKernelOp checks
/// the registry against this, so a new op needs its CUDA kernel (or a line
/// here saying why not).
bool cudaHasKernel(OpKind op);

/// The cuBLASLt workspace the CUDA executor allocates once (NVIDIA
/// recommends 32 MiB on Hopper).
constexpr uint64_t kCublasLtWorkspaceBytes = 32ull << 20;

/// NCCL's device buffers per rank: for each channel, a send and a receive
/// connection of its ring, each with a buffer per protocol at NCCL's
/// defaults (src/include/comm.h, device.h of NCCL 2.2x): Simple 4 MiB
/// (NCCL_BUFFSIZE), LL128 120 x 640 threads x 8 steps x 8 B = 4.6875 MiB,
/// LL 8 x 512 x 8 x 16 B = 512 KiB (9.1875 MiB a connection, what users
/// measure per NCCL connection), for the 32 channels NCCL opens at most on
/// NVLink machines (MAXCHANNELS): 588 MiB. An upper estimate, declared
/// until a GPU run measures it (test/gpu); NCCL_BUFFSIZE and
/// NCCL_MAX_NCHANNELS lower it.
constexpr uint64_t kNcclConnectionBytes =
    (4ull << 20) + 120ull * 640 * 8 * 8 + 8ull * 512 * 8 * 16;
constexpr uint64_t kNcclBytes = 32 * 2 * kNcclConnectionBytes;

} // namespace headroom

#endif // HEADROOM_KERNELS_CUDA_CUDATARGET_H
