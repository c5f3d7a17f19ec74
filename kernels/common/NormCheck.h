//===- NormCheck.h - The normalizations' operands, host side ----*- C++ -*-===//
//
// What the CPU and CUDA kernels of LayerNormalization, BatchNormalization
// and their gradients check before they compute, written once: the shapes
// of compiler/ops/Norm.h, the parameters' sizes, the results' types. Only
// the element types a backend computes differ (`computed`: the CPU's
// statistics are f32 or f64, the GPU's any float).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_NORMCHECK_H
#define HEADROOM_KERNELS_COMMON_NORMCHECK_H

#include "compiler/ops/Norm.h"
#include "kernels/common/KernelUtil.h"

#include <initializer_list>

namespace headroom {
namespace kernels {

using ComputedFn = bool (*)(DType);

/// Output i when the node has it (an absent optional output has no data).
inline const TensorView *optionalOutput(const KernelContext &ctx, unsigned i) {
  if (i >= ctx.Outputs.size() || !ctx.Outputs[i].present())
    return nullptr;
  return &ctx.Outputs[i];
}

/// Every listed operand has `n` elements of a computed type.
inline llvm::Error checkNormParams(const KernelContext &ctx,
                                   std::initializer_list<unsigned> operands,
                                   int64_t n, ComputedFn computed) {
  for (unsigned i : operands) {
    const TensorView &p = ctx.Inputs[i];
    if (auto e = ops::checkNormParam(i, p.type(), n, computed(p.Type)))
      return ctx.unsupported(llvm::toString(std::move(e)));
  }
  return llvm::Error::success();
}

/// The forward's operands: x, then parameters `params` of `n` each, Y of
/// x's type, and optional statistics outputs 1 and 2 of `stats` elements
/// (`what` names them in the error, with their number when `numbered`).
inline llvm::Error checkNormForward(const KernelContext &ctx,
                                    std::initializer_list<unsigned> params,
                                    int64_t n, int64_t stats,
                                    llvm::StringRef what, bool numbered,
                                    ComputedFn computed) {
  const TensorView &x = ctx.Inputs[0];
  if (ctx.Outputs[0].type() != x.type())
    return ctx.unsupported("Y must have X's type " + x.type().str());
  if (auto e = checkNormParams(ctx, params, n, computed))
    return e;
  for (unsigned i : {1u, 2u}) {
    const TensorView *m = optionalOutput(ctx, i);
    if (m && (!computed(m->Type) || m->numElements() != stats))
      return ctx.unsupported(what + (numbered ? " " + std::to_string(i) : "") +
                             " of type " + m->type().str() +
                             " is not supported");
  }
  return llvm::Error::success();
}

/// The gradients' operands: (dy, x, scale, ...) -> (dx, dscale, dbias),
/// dy and dx of x's type, scale, dscale and dbias of `n` elements.
inline llvm::Error checkNormGrad(const KernelContext &ctx, int64_t n,
                                 ComputedFn computed) {
  const TensorView &x = ctx.Inputs[1];
  if (ctx.Inputs[0].type() != x.type() || ctx.Outputs[0].type() != x.type())
    return ctx.unsupported("dy and dx must have x's type " + x.type().str());
  if (auto e = checkNormParams(ctx, {2}, n, computed))
    return e;
  for (unsigned i : {1u, 2u})
    if (!computed(ctx.Outputs[i].Type) || ctx.Outputs[i].numElements() != n)
      return ctx.unsupported("result " + llvm::Twine(i) + " of type " +
                             ctx.Outputs[i].type().str() + " is not supported");
  return llvm::Error::success();
}

/// LayerNormalization(X, Scale, B?) and its gradient: X (operand `x`) as
/// rows, the operands checked.
inline llvm::Expected<ops::NormRows>
checkLayerNorm(const KernelContext &ctx, bool grad, ComputedFn computed) {
  const TensorView &x = ctx.Inputs[grad ? 1 : 0];
  auto s =
      orUnsupported(ctx, ops::layerNormRows(x.Shape, ctx.attrInt("axis", -1)));
  if (!s)
    return s.takeError();
  if (llvm::Error e =
          grad ? checkNormGrad(ctx, s->Cols, computed)
          : ctx.hasInput(2)
              ? checkNormForward(ctx, {1, 2}, s->Cols, s->Rows,
                                 "statistics output", true, computed)
              : checkNormForward(ctx, {1}, s->Cols, s->Rows,
                                 "statistics output", true, computed))
    return llvm::Expected<ops::NormRows>(std::move(e));
  return s;
}

/// BatchNormalization(X, scale, B, input_mean, input_var) and its gradient:
/// X as channels, the operands checked.
inline llvm::Expected<ops::ChannelShape>
checkBatchNorm(const KernelContext &ctx, bool grad, ComputedFn computed) {
  const TensorView &x = ctx.Inputs[grad ? 1 : 0];
  auto s = orUnsupported(ctx, ops::channelShape(x.Shape));
  if (!s)
    return s.takeError();
  if (llvm::Error e =
          grad ? checkNormGrad(ctx, s->C, computed)
               : checkNormForward(ctx, {1, 2, 3, 4}, s->C, s->C,
                                  "running statistics output", false, computed))
    return llvm::Expected<ops::ChannelShape>(std::move(e));
  return s;
}

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_NORMCHECK_H
