//===- Launch.h - How kernel bodies run, on the GPU or emulated -*- C++ -*-===//
//
// Two launch shapes cover the kernels of kernels/cuda:
//
//  - forEach(ctx, n, f): f(i) for every i < n, one thread per element
//    (grid-stride). Elementwise ops, data movement, scatter-adds.
//  - forEachRow(ctx, rows, f): f(row, r) once per row, a thread block per
//    row; `r` gives the block's cooperative operations over the row's
//    elements: r.sum(n, g) and r.max(n, g) reduce g(j) over j < n (every
//    thread gets the result), r.each(n, g) runs g(j) for every j < n.
//    Softmax, norms, losses and reductions are written with it.
//
// Under nvcc these launch CUDA kernels on ctx.Stream; in the emulator they
// are loops, and Row's operations are sequential. Functors are structs (or
// lambdas inside them): nvcc does not take host lambdas into kernels
// without --extended-lambda, and the body must compile for both.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CUDA_LAUNCH_H
#define HEADROOM_KERNELS_CUDA_LAUNCH_H

#include "kernels/cuda/Kernel.h"

#include <algorithm>
#include <limits>

namespace headroom {
namespace cuda {
inline namespace HR_CUDA_BUILD {

/// Threads per block of both launch shapes.
constexpr int kBlockThreads = 256;

#if defined(__CUDACC__)

template <typename F> __global__ void forEachKernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    f(i);
}

/// v summed (or maxed) over the block; every thread gets the result.
template <typename V, bool Max> __device__ V blockReduce(V v) {
  __shared__ V partial[kBlockThreads / 32];
  __shared__ V result;
  unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o /= 2) {
    V u = __shfl_down_sync(0xffffffffu, v, o);
    v = Max ? (u > v || u != u ? u : v) : v + u;
  }
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    unsigned warps = blockDim.x / 32;
    V init = Max ? -std::numeric_limits<V>::infinity() : V(0);
    v = lane < warps ? partial[lane] : init;
    for (int o = 16; o > 0; o /= 2) {
      V u = __shfl_down_sync(0xffffffffu, v, o);
      v = Max ? (u > v || u != u ? u : v) : v + u;
    }
    if (lane == 0)
      result = v;
  }
  __syncthreads();
  return result;
}

/// One block's view of its row.
struct Row {
  template <typename V, typename G> __device__ V sum(int64_t n, G g) const {
    V acc = V(0);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      acc += g(j);
    return blockReduce<V, false>(acc);
  }
  /// The largest g(j); NaN when any is NaN; -inf for an empty row.
  template <typename V, typename G> __device__ V max(int64_t n, G g) const {
    V acc = -std::numeric_limits<V>::infinity();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      V u = g(j);
      acc = u > acc || u != u ? u : acc;
    }
    return blockReduce<V, true>(acc);
  }
  template <typename G> __device__ void each(int64_t n, G g) const {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      g(j);
    __syncthreads(); // the row's writes are seen by what the block does next
  }
};

template <typename F> __global__ void forEachRowKernel(int64_t rows, F f) {
  Row r;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)
    f(row, r);
}

template <typename F>
void forEach(const KernelContext &ctx, int64_t n, const F &f) {
  if (n <= 0)
    return;
  int64_t blocks = std::min<int64_t>((n + kBlockThreads - 1) / kBlockThreads,
                                     int64_t(1) << 20);
  forEachKernel<<<unsigned(blocks), kBlockThreads, 0,
                  static_cast<cudaStream_t>(ctx.Stream)>>>(n, f);
}

template <typename F>
void forEachRow(const KernelContext &ctx, int64_t rows, const F &f) {
  if (rows <= 0)
    return;
  int64_t blocks = std::min<int64_t>(rows, int64_t(1) << 20);
  forEachRowKernel<<<unsigned(blocks), kBlockThreads, 0,
                     static_cast<cudaStream_t>(ctx.Stream)>>>(rows, f);
}

#else // the emulator

struct Row {
  template <typename V, typename G> V sum(int64_t n, G g) const {
    V acc = V(0);
    for (int64_t j = 0; j < n; ++j)
      acc += g(j);
    return acc;
  }
  template <typename V, typename G> V max(int64_t n, G g) const {
    V acc = -std::numeric_limits<V>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      V u = g(j);
      acc = u > acc || u != u ? u : acc;
    }
    return acc;
  }
  template <typename G> void each(int64_t n, G g) const {
    for (int64_t j = 0; j < n; ++j)
      g(j);
  }
};

template <typename F>
void forEach(const KernelContext &, int64_t n, const F &f) {
  for (int64_t i = 0; i < n; ++i)
    f(i);
}

template <typename F>
void forEachRow(const KernelContext &, int64_t rows, const F &f) {
  Row r;
  for (int64_t row = 0; row < rows; ++row)
    f(row, r);
}

#endif

/// Device-to-device copy of `bytes` (nothing when dst == src) and fill, on
/// ctx.Stream.
void copyAsync(const KernelContext &ctx, void *dst, const void *src,
               uint64_t bytes);
void fillZeroAsync(const KernelContext &ctx, void *dst, uint64_t bytes);

} // namespace HR_CUDA_BUILD
} // namespace cuda
} // namespace headroom

#endif // HEADROOM_KERNELS_CUDA_LAUNCH_H
