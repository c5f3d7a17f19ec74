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
//  - forEachTile(ctx, tiles, sharedBytes, f): f(tile, r, shared) once per
//    tile, a thread block per tile with `sharedBytes` of shared memory at
//    `shared` (at most kTileSharedBytes, 128-byte aligned, uninitialised)
//    and the same `r` as a row's. Tiled kernels (FusedAttention) stage
//    operands there and work on them in phases, each r.each ending with the
//    block's barrier.
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
#include <cstring>
#include <limits>
#include <vector>

namespace headroom {
namespace cuda {
inline namespace HR_CUDA_BUILD {

/// Threads per block of every launch shape.
constexpr int kBlockThreads = 256;

/// The shared memory a tile may take. Above 48 KiB a kernel must opt in
/// (cudaFuncSetAttribute; forEachTile raises each tile kernel's limit to
/// this once, so launches of other sizes never lower it); 96 KiB leaves two
/// blocks per SM on sm_90 (227 KiB), one on sm_80 (164 KiB).
constexpr int64_t kTileSharedBytes = 96 * 1024;

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
__global__ void __launch_bounds__(kBlockThreads, 2)
    forEachTileKernel(int64_t tiles, F f) {
  extern __shared__ __align__(128) unsigned char shared[];
  Row r;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    f(tile, r, shared);
    __syncthreads(); // the next tile overwrites the staged operands
  }
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

template <typename F>
void forEachTile(const KernelContext &ctx, int64_t tiles, int64_t sharedBytes,
                 const F &f) {
  if (tiles <= 0)
    return;
  int64_t blocks = std::min<int64_t>(tiles, int64_t(1) << 20);
  // Once per kernel (the process uses one device): a failure leaves the
  // limit at 48 KiB and shows as the launch's error.
  static const bool raised [[maybe_unused]] =
      cudaFuncSetAttribute(forEachTileKernel<F>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(kTileSharedBytes)) == cudaSuccess;
  forEachTileKernel<<<unsigned(blocks), kBlockThreads, size_t(sharedBytes),
                      static_cast<cudaStream_t>(ctx.Stream)>>>(tiles, f);
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

/// Each tile gets shared memory filled with 0xff bytes (NaN in every float
/// type), so a phase that reads what no earlier phase wrote shows in the
/// results instead of reading the last tile's values.
template <typename F>
void forEachTile(const KernelContext &, int64_t tiles, int64_t sharedBytes,
                 const F &f) {
  std::vector<double> storage(size_t(sharedBytes + 7) / 8 + 16);
  auto *shared = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(storage.data()) + 127) & ~uintptr_t(127));
  Row r;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    std::memset(shared, 0xff, size_t(sharedBytes));
    f(tile, r, shared);
  }
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
