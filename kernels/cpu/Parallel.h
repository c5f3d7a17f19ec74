//===- Parallel.h - A CPU kernel's loop across threads ----------*- C++ -*-===//
//
// GEMM runs on OpenBLAS's threads; the other kernels ran on one. parallelFor
// splits a loop whose iterations are independent (each writes its own
// elements) across a pool of the same size as OpenBLAS's
// (OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else the hardware's), in
// contiguous chunks. Results do not depend on the split: only loops without
// a cross-iteration reduction use it, so a step gives the same bits on 1 or
// 16 threads.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CPU_PARALLEL_H
#define HEADROOM_KERNELS_CPU_PARALLEL_H

#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstdint>

namespace headroom {
namespace cpu {

/// Below this many elements a loop stays on the calling thread (waking a
/// worker costs microseconds).
constexpr int64_t kParallelGrain = 1 << 16;

/// Calls body(begin, end) over chunks covering [0, n), on up to
/// kernelThreads() threads when n >= 2 * grain, else once on this thread.
void parallelFor(int64_t n, int64_t grain,
                 llvm::function_ref<void(int64_t, int64_t)> body);

/// The threads parallelFor uses (the calling one included).
unsigned kernelThreads();

} // namespace cpu
} // namespace headroom

#endif // HEADROOM_KERNELS_CPU_PARALLEL_H
