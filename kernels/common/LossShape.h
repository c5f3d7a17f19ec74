//===- LossShape.h - The losses' shape rules, for both backends -*- C++ -*-===//
//
// NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss and its gradient check
// their operands alike on every backend: kernels/cpu/Loss.cpp and
// kernels/cuda/Loss.cu both call these (host code; the CUDA kernel context
// derives from the CPU's).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_LOSSSHAPE_H
#define HEADROOM_KERNELS_COMMON_LOSSSHAPE_H

#include "kernels/common/Kernel.h"

namespace headroom {
namespace kernels {

enum class Reduction { None, Sum, Mean };

/// The problem's sizes and attributes: scores [N, C, d1, ...] (D = the
/// product of the d's), labels [N, d1, ...].
struct LossShape {
  int64_t N = 0, C = 0, D = 1;
  Reduction Red = Reduction::Mean;
  bool HasIgnore = false;
  int64_t IgnoreIndex = 0;

  int64_t targets() const { return N * D; }
};

/// The shape of a loss call, checked against its operands (weight may be
/// null or absent); an error naming what does not fit.
llvm::Expected<LossShape> lossShape(const KernelContext &ctx,
                                    const TensorView &scores,
                                    const TensorView &labels,
                                    const TensorView *weight);

/// `loss` has one element per target (reduction none) or one.
llvm::Error checkLossType(const KernelContext &ctx, const LossShape &s,
                          const TensorView &loss);

/// A loss call's shape (its operands from `first`: scores, labels, the
/// optional weight), checked with its loss `loss` (the result, or the
/// gradient's dloss).
inline llvm::Expected<LossShape>
checkedLoss(const KernelContext &ctx, unsigned first, const TensorView &loss) {
  const TensorView *weight =
      ctx.hasInput(first + 2) ? &ctx.Inputs[first + 2] : nullptr;
  auto s = lossShape(ctx, ctx.Inputs[first], ctx.Inputs[first + 1], weight);
  if (!s)
    return s.takeError();
  if (llvm::Error e = checkLossType(ctx, *s, loss))
    return llvm::Expected<LossShape>(std::move(e));
  return s;
}

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_LOSSSHAPE_H
