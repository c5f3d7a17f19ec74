//===- BlockGemm.h - Matrix products of a tile in shared memory -*- C++ -*-===//
//
// What tiled kernels (forEachTile) compute their tiles with:
//
//  - blockGemm<TransA, TransB>(r, M, N, K, a, lda, b, ldb, c, ldc, acc):
//    C[M x N] = (C +) op(A)[M x K] op(B)[K x N], every operand in shared
//    memory and row-major with its leading dimension; op(X) = X^T when
//    TransX (A stored [K x M], B stored [N x K]). C is the accumulation type
//    (float for f16/bf16/f32 operands, double for f64).
//    On the GPU (sm_80 on), f16 and bf16 operands with M, N and K multiples
//    of 16 go through the tensor cores (nvcuda::wmma m16n16k16, f32
//    accumulation), each warp taking 16 x 16 tiles of C; everything else
//    (f32, f64, older GPUs, the emulator) is a thread per element of C,
//    adding in k order.
//  - SharedLayout: regions of a tile's shared memory, each 128-byte aligned
//    (the tensor cores' loads need 32), and lead(n, bytes): the leading
//    dimension to store rows of n elements with, padded so that the rows of
//    a column fall on different banks while keeping wmma's alignment (n a
//    multiple of 16).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_CUDA_BLOCKGEMM_H
#define HEADROOM_KERNELS_CUDA_BLOCKGEMM_H

#include "kernels/cuda/Launch.h"

#include <type_traits>

#if HR_ON_DEVICE
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#endif

namespace headroom {
namespace cuda {
inline namespace HR_CUDA_BUILD {

HR_HD constexpr int64_t roundUp(int64_t n, int64_t m) {
  return (n + m - 1) / m * m;
}

/// The leading dimension of rows of n elements of `bytes` each (n a
/// multiple of 16): 16 more bytes for 2- and 4-byte elements (a multiple of
/// 8 and 4 elements, wmma's ldm rule), one more element for 8-byte ones.
HR_HD constexpr int64_t lead(int64_t n, int64_t bytes) {
  return n + (bytes >= 8 ? 1 : 16 / bytes);
}

/// Offsets of regions in a tile's shared memory, computed on the host and
/// passed to the kernel by value.
struct SharedLayout {
  int64_t Bytes = 0;
  /// The offset of a new region of n elements of E.
  template <typename E> int64_t take(int64_t n) {
    int64_t at = Bytes;
    Bytes = roundUp(Bytes + n * int64_t(sizeof(E)), 128);
    return at;
  }
};

template <typename E> HR_HD E *region(unsigned char *shared, int64_t at) {
  return reinterpret_cast<E *>(shared + at);
}

template <bool TransA, bool TransB, typename T, typename C>
HR_HD void blockGemmElements(const Row &r, int64_t m, int64_t n, int64_t k,
                             const T *a, int64_t lda, const T *b, int64_t ldb,
                             C *c, int64_t ldc, bool accumulate) {
  r.each(m * n, [&](int64_t e) {
    int64_t i = e / n, j = e - i * n;
    C sum = accumulate ? c[i * ldc + j] : C(0);
    for (int64_t p = 0; p < k; ++p)
      sum += C(ld(a, TransA ? p * lda + i : i * lda + p)) *
             C(ld(b, TransB ? j * ldb + p : p * ldb + j));
    c[i * ldc + j] = sum;
  });
}

#if HR_ON_DEVICE && __CUDA_ARCH__ >= 800 // bf16 fragments need sm_80
template <typename T> struct WmmaElem;
template <> struct WmmaElem<Half> { using Type = __half; };
template <> struct WmmaElem<BFloat16> { using Type = __nv_bfloat16; };

/// C (+)= op(A) op(B) on the tensor cores; M, N, K multiples of 16, lda and
/// ldb multiples of 8, ldc of 4, the operands 32-byte aligned.
template <bool TransA, bool TransB, typename T>
__device__ void blockGemmTensorCores(int m, int n, int k, const T *a, int lda,
                                     const T *b, int ldb, float *c, int ldc,
                                     bool accumulate) {
  namespace wmma = nvcuda::wmma;
  using W = typename WmmaElem<T>::Type;
  using LayoutA = std::conditional_t<TransA, wmma::col_major, wmma::row_major>;
  using LayoutB = std::conditional_t<TransB, wmma::col_major, wmma::row_major>;
  const W *wa = reinterpret_cast<const W *>(a);
  const W *wb = reinterpret_cast<const W *>(b);
  int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  int tilesN = n / 16, tiles = (m / 16) * tilesN;
  for (int t = warp; t < tiles; t += warps) {
    int ti = t / tilesN, tj = t - ti * tilesN;
    float *ct = c + ti * 16 * ldc + tj * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if (accumulate)
      wmma::load_matrix_sync(acc, ct, ldc, wmma::mem_row_major);
    else
      wmma::fill_fragment(acc, 0.0f);
    for (int p = 0; p < k; p += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, W, LayoutA> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, W, LayoutB> fb;
      wmma::load_matrix_sync(
          fa, TransA ? wa + p * lda + ti * 16 : wa + ti * 16 * lda + p, lda);
      wmma::load_matrix_sync(
          fb, TransB ? wb + tj * 16 * ldb + p : wb + p * ldb + tj * 16, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(ct, acc, ldc, wmma::mem_row_major);
  }
  __syncthreads(); // C is read by the block's next phase
}
#endif

template <bool TransA, bool TransB, typename T, typename C>
HR_HD void blockGemm(const Row &r, int64_t m, int64_t n, int64_t k, const T *a,
                     int64_t lda, const T *b, int64_t ldb, C *c, int64_t ldc,
                     bool accumulate) {
#if HR_ON_DEVICE && __CUDA_ARCH__ >= 800
  if constexpr ((std::is_same_v<T, Half> ||
                 std::is_same_v<T, BFloat16>)&&std::is_same_v<C, float>) {
    if (m % 16 == 0 && n % 16 == 0 && k % 16 == 0 && lda % 8 == 0 &&
        ldb % 8 == 0 && ldc % 4 == 0) {
      blockGemmTensorCores<TransA, TransB>(int(m), int(n), int(k), a, int(lda),
                                           b, int(ldb), c, int(ldc),
                                           accumulate);
      return;
    }
  }
#endif
  blockGemmElements<TransA, TransB>(r, m, n, k, a, lda, b, ldb, c, ldc,
                                    accumulate);
}

} // namespace HR_CUDA_BUILD
} // namespace cuda
} // namespace headroom

#endif // HEADROOM_KERNELS_CUDA_BLOCKGEMM_H
