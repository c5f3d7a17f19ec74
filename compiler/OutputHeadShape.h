//===- OutputHeadShape.h - The fused output head's shape rule --*- C++ -*-===//
//
// LinearCrossEntropy(x [N, D], w, labels [N]) {transB, ignore_index?,
// rows?} is a language model's output head and its cross-entropy in one op
// (passes/FuseOutputHead.cpp): per row the loss of softmax(x w') at its
// label, w' = w^T when transB (w [V, D], PyTorch's Linear) else w (w
// [D, V]). Its kernels never hold the [N, V] logits: they run `rows` rows
// at a time (outputHeadRows). The verifier, the cost model, the targets'
// workspace queries and both backends' kernels take their sizes from here.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_OUTPUTHEADSHAPE_H
#define HEADROOM_COMPILER_OUTPUTHEADSHAPE_H

#include "compiler/Types.h"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdint>

namespace headroom {

/// The logits a chunk of rows may take: rows are chosen so that one chunk's
/// logits (and, backward, their gradient) fit in this many bytes.
constexpr uint64_t kOutputHeadChunkBytes = uint64_t(32) << 20;

struct OutputHeadShape {
  int64_t N = 0, D = 0, V = 0;
  bool TransB = false;
};

/// The sizes of LinearCrossEntropy(x, w, labels) {transB}, or an error
/// saying what does not fit.
inline llvm::Expected<OutputHeadShape> outputHeadShape(const TensorType &x,
                                                       const TensorType &w,
                                                       const TensorType &labels,
                                                       bool transB) {
  auto fail = [](const std::string &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
  };
  if (x.rank() != 2 || w.rank() != 2)
    return fail("x " + x.str() + " and w " + w.str() + " must be 2-D");
  if (!isFloat(x.dtype()) || x.dtype() != w.dtype())
    return fail("x " + x.str() + " and w " + w.str() +
                " must share a float type");
  if (labels.rank() != 1 ||
      (labels.dtype() != DType::I64 && labels.dtype() != DType::I32))
    return fail("labels " + labels.str() + " must be i64 or i32 [N]");
  OutputHeadShape s;
  s.N = x.dim(0);
  s.D = x.dim(1);
  s.TransB = transB;
  s.V = transB ? w.dim(0) : w.dim(1);
  if ((transB ? w.dim(1) : w.dim(0)) != s.D)
    return fail("x " + x.str() + " and w " + w.str() +
                (transB ? " (transB)" : "") + " differ in the inner dimension");
  if (labels.dim(0) != s.N)
    return fail("labels " + labels.str() + " do not have x's " +
                std::to_string(s.N) + " rows");
  return s;
}

/// The type of the rows' losses (and their gradient): f32, f64 for an f64
/// x (the cross-entropy reads low logits and computes in f32).
inline DType outputHeadLossType(DType x) {
  return x == DType::F64 ? DType::F64 : DType::F32;
}

/// Rows per chunk: `rows` when given (> 0), else as many as keep a chunk's
/// logits of `elementBytes` each within kOutputHeadChunkBytes; at least 1,
/// at most N.
inline int64_t outputHeadRows(const OutputHeadShape &s, uint64_t elementBytes,
                              int64_t rows) {
  if (rows <= 0)
    rows = int64_t(kOutputHeadChunkBytes /
                   std::max<uint64_t>(1, uint64_t(s.V) * elementBytes));
  return std::max<int64_t>(1, std::min<int64_t>(rows, s.N));
}

} // namespace headroom

#endif // HEADROOM_COMPILER_OUTPUTHEADSHAPE_H
