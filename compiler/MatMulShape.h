//===- MatMulShape.h - MatMul's shape rule, for every user ------*- C++ -*-===//
//
// MatMul follows numpy: a 1-D A is a row [1, K] and a 1-D B a column [K, 1]
// (the added axis is dropped from the result), batch axes broadcast. headroom
// extends it with transA/transB: the last two axes of that operand are
// swapped before the product, so `canonicalize` can fold a Transpose into the
// product and the GEMM reads the operand as it lies. The verifier, the cost
// model and the CPU and CUDA kernels all take their sizes from here.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_MATMULSHAPE_H
#define HEADROOM_COMPILER_MATMULSHAPE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace headroom {

struct MatMulShape {
  bool TransA = false, TransB = false;
  /// Each product is op(A) [M, K] times op(B) [K, N].
  int64_t M = 0, N = 0, K = 0;
  /// The batch axes of A, of B, and of the result (their broadcast).
  llvm::SmallVector<int64_t, 4> ABatch, BBatch, Batch;
  /// The result's shape (without the axes a 1-D operand adds).
  llvm::SmallVector<int64_t, 4> Result;

  int64_t batches() const;
};

/// The sizes of MatMul(a, b) {transA, transB}, or an error saying what does
/// not fit ("inner dimensions differ (3 vs 4)").
llvm::Expected<MatMulShape> matMulShape(llvm::ArrayRef<int64_t> a,
                                        llvm::ArrayRef<int64_t> b,
                                        bool transA = false,
                                        bool transB = false);

} // namespace headroom

#endif // HEADROOM_COMPILER_MATMULSHAPE_H
