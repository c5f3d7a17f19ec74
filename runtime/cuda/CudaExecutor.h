//===- CudaExecutor.h - The CUDA backend's executors ------------*- C++ -*-===//
#ifndef HEADROOM_RUNTIME_CUDA_CUDAEXECUTOR_H
#define HEADROOM_RUNTIME_CUDA_CUDAEXECUTOR_H

#include "runtime/Executor.h"

namespace headroom {

/// Runs a cuda plan on the GPU (runtime/cuda/CudaExecutor.cpp); an error
/// naming the reason when there is none. Built only when nvcc was found.
llvm::Expected<std::unique_ptr<Executor>>
createCudaExecutor(Plan plan, const ExecutorOptions &options = {});

/// Runs a cuda plan with kernels/cuda compiled for the host: "device"
/// memory is one host allocation laid out as on the GPU, kernels run their
/// device bodies as loops, functions run call by call (no graphs). Always
/// built; the CPU suites test the CUDA backend's kernels and executor with
/// it, and HEADROOM_CUDA_EMULATOR=1 makes the command line use it.
llvm::Expected<std::unique_ptr<Executor>>
createEmulatedCudaExecutor(Plan plan, const ExecutorOptions &options = {});

} // namespace headroom

#endif // HEADROOM_RUNTIME_CUDA_CUDAEXECUTOR_H
