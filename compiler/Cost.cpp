//===- Cost.cpp - Floating-point operations of a node ---------------------===//
#include "compiler/Cost.h"

#include "compiler/MatMulShape.h"

#include <algorithm>

using namespace headroom;

/// 2 x output elements x (input channels per group x kernel size), from the
/// output (or output gradient) `y` and the weight's shape [C_out, C_in/g, k..].
static uint64_t convFlops(const TensorType &y, const TensorType &w) {
  uint64_t perOutput = 1;
  for (unsigned d = 1; d < w.rank(); ++d)
    perOutput *= w.dim(d);
  return 2 * uint64_t(y.numElements()) * perOutput;
}

uint64_t headroom::nodeFlops(const Node &n) {
  switch (n.kind()) {
  case OpKind::MatMul: {
    auto s =
        matMulShape(n.operand(0)->type().shape(), n.operand(1)->type().shape(),
                    n.intAttr("transA", 0), n.intAttr("transB", 0));
    if (!s) { // the verifier reports it
      llvm::consumeError(s.takeError());
      return 0;
    }
    return 2 * uint64_t(n.result(0)->type().numElements()) * s->K;
  }
  case OpKind::Gemm: {
    const TensorType &a = n.operand(0)->type();
    uint64_t k = n.intAttr("transA", 0) ? a.dim(0) : a.dim(a.rank() - 1);
    return 2 * uint64_t(n.result(0)->type().numElements()) * k;
  }
  case OpKind::Conv:
    return convFlops(n.result(0)->type(), n.operand(1)->type());
  case OpKind::ConvGradInput: // (dy, w)
    return convFlops(n.operand(0)->type(), n.operand(1)->type());
  case OpKind::ConvGradWeight: // (dy, x) -> dw
    return convFlops(n.operand(0)->type(), n.result(0)->type());
  case OpKind::Read:
  case OpKind::Assign:
  case OpKind::ParamGrad:
  case OpKind::Constant:
  case OpKind::Return:
  case OpKind::Identity:
  case OpKind::Reshape:
  case OpKind::Squeeze:
  case OpKind::Unsqueeze:
  case OpKind::Flatten:
  case OpKind::Transpose:
  case OpKind::Concat:
  case OpKind::Split:
  case OpKind::Slice:
  case OpKind::SliceGrad:
  case OpKind::Gather:
  case OpKind::Expand:
  case OpKind::Tile:
  case OpKind::Pad:
  case OpKind::Cast:
  case OpKind::Shape:
  case OpKind::Size:
  case OpKind::ConstantOfShape:
  case OpKind::Range:
    return 0;
  default:
    break;
  }
  uint64_t elements = 0;
  for (const Value *v : n.operands())
    if (v)
      elements = std::max<uint64_t>(elements, v->type().numElements());
  for (const Value *v : n.results())
    elements = std::max<uint64_t>(elements, v->type().numElements());
  return elements;
}
