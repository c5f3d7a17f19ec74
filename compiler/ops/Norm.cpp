//===- Norm.cpp - The normalizations' shapes ------------------------------===//
#include "compiler/ops/Norm.h"

#include "llvm/ADT/Twine.h"

using namespace headroom;
using llvm::Twine;

static llvm::Error fail(const Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

llvm::Expected<ops::NormRows> ops::layerNormRows(llvm::ArrayRef<int64_t> shape,
                                                 int64_t axis) {
  int64_t rank = shape.size();
  if (axis < -rank || axis >= rank)
    return fail("axis " + Twine(axis) + " is out of range for rank " +
                Twine(rank));
  if (axis < 0)
    axis += rank;
  NormRows s;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? s.Rows : s.Cols) *= shape[i];
  return s;
}

llvm::Expected<ops::ChannelShape>
ops::channelShape(llvm::ArrayRef<int64_t> shape) {
  if (shape.size() < 2)
    return fail("input of rank " + Twine(shape.size()) +
                " is not supported (expected [N, C, ...])");
  ChannelShape s;
  s.N = shape[0];
  s.C = shape[1];
  for (size_t i = 2; i < shape.size(); ++i)
    s.Spatial *= shape[i];
  return s;
}

llvm::Error ops::checkNormParam(unsigned i, const TensorType &p, int64_t n,
                                bool computed) {
  if (!computed)
    return fail("operand " + Twine(i) + " of element type " +
                dtypeName(p.dtype()) + " is not supported");
  if (p.numElements() != n)
    return fail("operand " + Twine(i) + " has " + Twine(p.numElements()) +
                " elements, " + Twine(n) + " expected");
  return llvm::Error::success();
}
