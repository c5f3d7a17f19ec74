//===- LossShape.cpp - The loss kernels' operand checks -------------------===//
#include "kernels/common/LossShape.h"

using namespace headroom;
using namespace headroom::kernels;

llvm::Expected<LossShape> kernels::lossShape(const KernelContext &ctx,
                                             const TensorView &scores,
                                             const TensorView &labels,
                                             const TensorView *weight) {
  LossShape s;
  std::string red = ctx.attrString("reduction", "mean");
  if (red == "none")
    s.Red = Reduction::None;
  else if (red == "sum")
    s.Red = Reduction::Sum;
  else if (red != "mean")
    return ctx.unsupported("reduction '" + red + "' is not supported");
  if (const Attribute *ii = ctx.attr("ignore_index")) {
    s.HasIgnore = true;
    s.IgnoreIndex = ii->asInt();
  }
  if (scores.rank() < 2)
    return ctx.unsupported("scores must have rank >= 2");
  if (labels.Type != DType::I64 && labels.Type != DType::I32)
    return ctx.unsupported("labels of type " + dtypeName(labels.Type) +
                           " are not supported");
  s.N = scores.Shape[0];
  s.C = scores.Shape[1];
  for (unsigned i = 2; i < scores.rank(); ++i)
    s.D *= scores.Shape[i];
  if (labels.rank() + 1 != scores.rank() || labels.Shape[0] != s.N ||
      labels.numElements() != s.N * s.D)
    return ctx.unsupported("labels do not have the shape [N, d1, ...]");
  if (weight && weight->present() &&
      (weight->Type != scores.Type || weight->rank() != 1 ||
       weight->Shape[0] != s.C))
    return ctx.unsupported("weight must have the scores' type and shape [C]");
  return s;
}

llvm::Error kernels::checkLossType(const KernelContext &ctx, const LossShape &s,
                                   const TensorView &loss) {
  int64_t want = s.Red == Reduction::None ? s.targets() : 1;
  if (loss.numElements() != want)
    return ctx.unsupported("result type does not match the reduction");
  return llvm::Error::success();
}
