//===- HostKernel.h - The CUDA kernels run on the host ---------*- C++ -*-===//
//
// A plan that offloads state runs some calls on the CPU, over its pinned
// host pool (compiler/Pools.h). They run kernels/cuda's own code compiled
// for the host (the emulator's build of it), so a host call rounds as the
// device call it replaces, bit for bit: offloading changes no result.
// This entry point is outside the build's inline namespace, so the GPU
// executor can call the emulator's kernels.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CUDA_HOSTKERNEL_H
#define HEADROOM_KERNELS_CUDA_HOSTKERNEL_H

#include "kernels/common/Kernel.h"

namespace headroom {
class Tensor;
namespace cuda {

struct HostKernelCall {
  /// The op, host views of its buffers, attributes and host workspace.
  kernels::KernelContext Base;
  /// The step (a host address), the run's seed and the call's stream of
  /// random numbers, and per input the constant's tensor or null: as the
  /// device call gets them.
  const uint64_t *Step = nullptr;
  uint64_t RunSeed = 0, RandomStream = 0;
  llvm::ArrayRef<const Tensor *> Constants;
};

/// Runs `call` with the emulator's build of kernels/cuda.
llvm::Error runOnHost(const HostKernelCall &call);

} // namespace cuda
} // namespace headroom

#endif // HEADROOM_KERNELS_CUDA_HOSTKERNEL_H
