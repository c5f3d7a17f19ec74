//===- LinalgCheck.h - Gemm's operands, host side ---------------*- C++ -*-===//
//
// What the CPU and CUDA kernels of Gemm check before they call BLAS or
// cuBLASLt, written once (the pattern of NormCheck.h), and the leading
// dimensions of a contiguous row-major product, which both backends'
// call descriptions share.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_LINALGCHECK_H
#define HEADROOM_KERNELS_COMMON_LINALGCHECK_H

#include "kernels/common/KernelUtil.h"

#include <algorithm>

namespace headroom {
namespace kernels {

/// Gemm(A, B, C?) {alpha, beta, transA, transB}: Y [M, N] = alpha op(A)
/// op(B) + beta C, C broadcast to [M, N]; Beta is 0 (and C null) when C is
/// absent or scaled away, so the result is not read.
struct GemmShape {
  bool TransA = false, TransB = false;
  int64_t M = 0, N = 0, K = 0;
  double Alpha = 1, Beta = 0;
  const TensorView *C = nullptr;
};

inline llvm::Expected<GemmShape> gemmShape(const KernelContext &ctx) {
  const TensorView &a = ctx.Inputs[0], &b = ctx.Inputs[1];
  const TensorView &y = ctx.Outputs[0];
  if (a.rank() != 2 || b.rank() != 2)
    return ctx.unsupported("A and B must be matrices");
  GemmShape g;
  g.TransA = ctx.attrInt("transA", 0);
  g.TransB = ctx.attrInt("transB", 0);
  g.M = a.Shape[g.TransA ? 1 : 0];
  g.K = a.Shape[g.TransA ? 0 : 1];
  g.N = b.Shape[g.TransB ? 0 : 1];
  if (b.Shape[g.TransB ? 1 : 0] != g.K)
    return ctx.unsupported("inner dimensions of A and B differ");
  if (y.rank() != 2 || y.Shape[0] != g.M || y.Shape[1] != g.N)
    return ctx.unsupported("result type is not [M, N]");
  g.Alpha = ctx.attrFloat("alpha", 1.0);
  g.Beta = ctx.attrFloat("beta", 1.0);
  if (!ctx.hasInput(2) || g.Beta == 0) {
    g.Beta = 0;
    return g;
  }
  const TensorView &c = ctx.Inputs[2];
  if (c.rank() > 2 || (c.rank() == 2 && c.Shape[0] != 1 && c.Shape[0] != g.M) ||
      (c.rank() >= 1 && c.Shape.back() != 1 && c.Shape.back() != g.N))
    return ctx.unsupported("C does not broadcast to [M, N]");
  g.C = &c;
  return g;
}

/// A row-major product of contiguous operands (a backend's call struct with
/// TransA/B, M, N, K and Lda/b/c): leading dimensions >= 1, as BLAS and
/// cuBLASLt require even for an empty matrix.
template <typename Call>
Call contiguousCall(bool transA, bool transB, int64_t m, int64_t n, int64_t k) {
  Call g;
  g.TransA = transA;
  g.TransB = transB;
  g.M = m;
  g.N = n;
  g.K = k;
  g.Lda = std::max<int64_t>(1, transA ? m : k);
  g.Ldb = std::max<int64_t>(1, transB ? k : n);
  g.Ldc = std::max<int64_t>(1, n);
  return g;
}

/// Gemm's call (a backend's call struct) for a checked `s`: contiguous
/// operands, its alpha and beta.
template <typename Call> Call gemmCall(const GemmShape &s) {
  Call g = contiguousCall<Call>(s.TransA, s.TransB, s.M, s.N, s.K);
  g.Alpha = s.Alpha;
  g.Beta = s.Beta;
  return g;
}

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_LINALGCHECK_H
