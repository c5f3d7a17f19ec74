//===- MatMulShape.cpp - MatMul's shape rule ------------------------------===//
#include "compiler/MatMulShape.h"

#include "compiler/Types.h"

using namespace headroom;

int64_t MatMulShape::batches() const {
  int64_t p = 1;
  for (int64_t d : Batch)
    p *= d;
  return p;
}

static llvm::Error shapeError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

llvm::Expected<MatMulShape> headroom::matMulShape(llvm::ArrayRef<int64_t> a,
                                                  llvm::ArrayRef<int64_t> b,
                                                  bool transA, bool transB) {
  if (a.empty() || b.empty())
    return shapeError("operands must have rank >= 1");
  if ((transA && a.size() < 2) || (transB && b.size() < 2))
    return shapeError("a transposed operand must have rank >= 2");
  MatMulShape s;
  s.TransA = transA;
  s.TransB = transB;
  // op(A) is [M, K], op(B) is [K, N].
  int64_t ra = a.size(), rb = b.size();
  s.M = ra == 1 ? 1 : a[transA ? ra - 1 : ra - 2];
  s.K = ra == 1 ? a[0] : a[transA ? ra - 2 : ra - 1];
  int64_t kb = rb == 1 ? b[0] : b[transB ? rb - 1 : rb - 2];
  s.N = rb == 1 ? 1 : b[transB ? rb - 2 : rb - 1];
  if (s.K != kb)
    return shapeError("inner dimensions differ (" + llvm::Twine(s.K) + " vs " +
                      llvm::Twine(kb) + ")");
  s.ABatch.assign(a.begin(), a.end() - (ra == 1 ? 1 : 2));
  s.BBatch.assign(b.begin(), b.end() - (rb == 1 ? 1 : 2));
  auto batch = broadcastShapes(s.ABatch, s.BBatch);
  if (!batch)
    return shapeError("batch dimensions do not broadcast");
  s.Batch.assign(batch->begin(), batch->end());
  s.Result = s.Batch;
  if (ra != 1)
    s.Result.push_back(s.M);
  if (rb != 1)
    s.Result.push_back(s.N);
  return s;
}
