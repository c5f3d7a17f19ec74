//===- ReduceCheck.h - Reductions' operands, host side ----------*- C++ -*-===//
//
// What the CPU and CUDA kernels of the Reduce* ops, ArgMax, Softmax and
// LogSoftmax, and GlobalAveragePool check before they compute, written once
// (the pattern of NormCheck.h).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_REDUCECHECK_H
#define HEADROOM_KERNELS_COMMON_REDUCECHECK_H

#include "compiler/ops/Shape.h"
#include "kernels/common/KernelUtil.h"

namespace headroom {
namespace kernels {

/// A Reduce*'s normalized axes; `Noop` (noop_with_empty_axes and no axes):
/// the result is the input, of its size.
struct ReduceAxes {
  std::vector<int64_t> Axes;
  bool Noop = false;
};
inline llvm::Expected<ReduceAxes> checkedReduceAxes(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  ReduceAxes r;
  auto axes = reduceAxes(ctx, r.Noop);
  if (!axes)
    return axes.takeError();
  if (r.Noop && y.numElements() != x.numElements())
    return ctx.unsupported("result type does not match the input");
  r.Axes = std::move(*axes);
  return r;
}

/// ArgMax {axis}: a non-empty axis, an i64 per [Outer, Inner].
inline llvm::Expected<AxisSplit> argMaxSplit(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto s = splitAtAxis(ctx, x, ctx.attrInt("axis", 0));
  if (!s)
    return s.takeError();
  if (s->N == 0)
    return ctx.unsupported("the reduced axis is empty");
  if (y.Type != DType::I64 || y.numElements() != s->Outer * s->Inner)
    return ctx.unsupported("result type does not match the input");
  return s;
}

/// Softmax and LogSoftmax {axis = -1}: the result has the input's size.
inline llvm::Expected<AxisSplit> softmaxSplit(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto s = splitAtAxis(ctx, x, ctx.attrInt("axis", -1));
  if (!s)
    return s.takeError();
  if (y.numElements() != x.numElements())
    return ctx.unsupported("result type does not match the input");
  return s;
}

/// GlobalAveragePool(X [N, C, spatial...]) -> Y [N, C, 1...]: the number of
/// planes (N C) and of elements in each.
struct PoolPlanes {
  int64_t Planes = 0, Size = 0;
};
inline llvm::Expected<PoolPlanes> globalPoolPlanes(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (x.rank() < 2 || y.Type != x.Type)
    return ctx.unsupported("input " + x.type().str() + " and output " +
                           y.type().str() + " are not supported");
  PoolPlanes p{x.Shape[0] * x.Shape[1], ops::product(x.Shape.drop_front(2))};
  if (y.numElements() != p.Planes)
    return ctx.unsupported("output " + y.type().str() + " does not have one " +
                           "value per [N, C] plane");
  return p;
}

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_REDUCECHECK_H
