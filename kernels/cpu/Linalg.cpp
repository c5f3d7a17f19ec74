//===- Linalg.cpp - Gemm and MatMul on the CPU ----------------------------===//
//
// Both ops are thin layers over OpenBLAS's row-major gemm. Gemm fills the
// output with beta*C broadcast to [M, N] and lets BLAS accumulate into it.
// MatMul follows numpy (compiler/MatMulShape.h, with headroom's
// transA/transB passed to BLAS as its transposes). A batched A against an
// unbatched B is one tall gemm; otherwise each output batch is one gemm whose
// operands are found through broadcast strides, so a broadcast batch axis is
// never copied. OpenBLAS 0.3.21 has no strided-batch gemm, hence the loop.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/LinalgCheck.h"
#include "kernels/cpu/Kernel.h"

#include "compiler/MatMulShape.h"
#include "compiler/ops/Shape.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cblas.h>

using namespace headroom;
using namespace headroom::cpu;
using llvm::ArrayRef;
using llvm::Error;
using llvm::SmallVector;

namespace {

/// Row-major C = alpha * op(A) * op(B) + beta * C, for float and double.
struct GemmArgs {
  bool TransA = false, TransB = false;
  int64_t M = 0, N = 0, K = 0;
  double Alpha = 1, Beta = 0;
  int64_t Lda = 0, Ldb = 0, Ldc = 0;
};

void blasGemm(const GemmArgs &g, const float *a, const float *b, float *c) {
  cblas_sgemm(CblasRowMajor, g.TransA ? CblasTrans : CblasNoTrans,
              g.TransB ? CblasTrans : CblasNoTrans, g.M, g.N, g.K,
              static_cast<float>(g.Alpha), a, g.Lda, b, g.Ldb,
              static_cast<float>(g.Beta), c, g.Ldc);
}

void blasGemm(const GemmArgs &g, const double *a, const double *b, double *c) {
  cblas_dgemm(CblasRowMajor, g.TransA ? CblasTrans : CblasNoTrans,
              g.TransB ? CblasTrans : CblasNoTrans, g.M, g.N, g.K, g.Alpha, a,
              g.Lda, b, g.Ldb, g.Beta, c, g.Ldc);
}

/// Y[m, n] = C broadcast to [M, N] (C has rank 0, 1 or 2).
template <typename T>
void broadcastBias(const TensorView &c, T *y, int64_t m, int64_t n) {
  int64_t cm = c.rank() == 2 ? c.Shape[0] : 1;
  int64_t cn = c.rank() >= 1 ? c.Shape[c.rank() - 1] : 1;
  const T *src = c.as<T>();
  for (int64_t i = 0; i < m; ++i) {
    const T *row = src + (cm == 1 ? 0 : i * cn);
    T *out = y + i * n;
    if (cn == 1)
      std::fill(out, out + n, row[0]);
    else
      std::copy(row, row + n, out);
  }
}

template <typename T> Error gemm(const KernelContext &ctx) {
  const TensorView &a = ctx.Inputs[0], &b = ctx.Inputs[1];
  const TensorView &y = ctx.Outputs[0];
  auto shape = gemmShape(ctx);
  if (!shape)
    return shape.takeError();
  int64_t m = shape->M, n = shape->N;
  GemmArgs g = gemmCall<GemmArgs>(*shape);
  if (shape->C)
    broadcastBias(*shape->C, y.as<T>(), m, n);
  if (m == 0 || n == 0)
    return Error::success();
  blasGemm(g, a.as<T>(), b.as<T>(), y.as<T>());
  return Error::success();
}

/// Strides (in elements) of an operand's batch axes, right-aligned to the
/// output's batch shape: 0 where the operand is broadcast.
SmallVector<int64_t, 4> batchStrides(ArrayRef<int64_t> batch,
                                     ArrayRef<int64_t> outBatch,
                                     int64_t matrixSize) {
  SmallVector<int64_t, 4> strides(outBatch.size(), 0);
  int64_t stride = matrixSize;
  for (size_t i = 0; i < batch.size(); ++i) {
    size_t fromEnd = batch.size() - 1 - i;
    size_t out = outBatch.size() - 1 - i;
    strides[out] = batch[fromEnd] == 1 ? 0 : stride;
    stride *= batch[fromEnd];
  }
  return strides;
}

using ops::product;

template <typename T> Error matMul(const KernelContext &ctx) {
  const TensorView &a = ctx.Inputs[0], &b = ctx.Inputs[1];
  const TensorView &y = ctx.Outputs[0];
  auto s = matMulShape(a.Shape, b.Shape, ctx.attrInt("transA", 0),
                       ctx.attrInt("transB", 0));
  if (!s)
    return ctx.unsupported(llvm::toString(s.takeError()));
  int64_t m = s->M, n = s->N, k = s->K, batches = s->batches();
  if (y.numElements() != batches * m * n)
    return ctx.unsupported("result type does not match the operands");
  if (y.numElements() == 0)
    return Error::success();

  const T *pa = a.as<T>(), *pb = b.as<T>();
  T *py = y.as<T>();
  GemmArgs g = contiguousCall<GemmArgs>(s->TransA, s->TransB, m, n, k);
  // A batched A against one B matrix: the batches of A stack into rows
  // (not when each of A's matrices is read transposed).
  if (!s->TransA && product(s->BBatch) == 1 && product(s->ABatch) == batches) {
    g.M = batches * m;
    blasGemm(g, pa, pb, py);
    return Error::success();
  }
  SmallVector<int64_t, 4> aStrides = batchStrides(s->ABatch, s->Batch, m * k);
  SmallVector<int64_t, 4> bStrides = batchStrides(s->BBatch, s->Batch, k * n);
  SmallVector<int64_t, 4> index(s->Batch.size(), 0);
  int64_t aOff = 0, bOff = 0;
  for (int64_t i = 0; i < batches; ++i) {
    blasGemm(g, pa + aOff, pb + bOff, py + i * m * n);
    // Advance the batch index like an odometer, keeping both offsets.
    for (int d = static_cast<int>(index.size()) - 1; d >= 0; --d) {
      aOff += aStrides[d];
      bOff += bStrides[d];
      if (++index[d] < s->Batch[d])
        break;
      aOff -= aStrides[d] * index[d];
      bOff -= bStrides[d] * index[d];
      index[d] = 0;
    }
  }
  return Error::success();
}

Error gemmKernel(const KernelContext &ctx) {
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[0].Type, gemm, ctx);
}

Error matMulKernel(const KernelContext &ctx) {
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[0].Type, matMul, ctx);
}

} // namespace

void headroom::cpu::registerLinalgKernels() {
  registerKernel(OpKind::Gemm, gemmKernel, FloatSupport::F32F64);
  registerKernel(OpKind::MatMul, matMulKernel, FloatSupport::F32F64);
}
