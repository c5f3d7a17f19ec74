//===- ElementwiseCheck.h - Cast and Dropout operands, host side -*- C++ -*===//
//-*-===//
//
// What the CPU and CUDA kernels of Cast and Dropout check before they
// compute, written once (the pattern of NormCheck.h). Only how a backend
// reads Dropout's scalar operands differs: the CPU reads their data, the GPU
// the plan's constants (a CUDA graph replays launches).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_ELEMENTWISECHECK_H
#define HEADROOM_KERNELS_COMMON_ELEMENTWISECHECK_H

#include "kernels/common/KernelUtil.h"

#include <string>

namespace headroom {
namespace kernels {

/// Cast's `to` is an element type, the result's.
inline llvm::Error checkCast(const KernelContext &ctx) {
  const Attribute *to = ctx.attr("to");
  if (!to || to->kind() != Attribute::Kind::Type)
    return ctx.unsupported("needs an element type attribute `to`");
  if (to->asType() != ctx.Outputs[0].Type)
    return ctx.unsupported("result type " + dtypeName(ctx.Outputs[0].Type) +
                           " differs from `to` " + dtypeName(to->asType()));
  return llvm::Error::success();
}

/// Dropout(data, ratio?, training_mode?) -> (output, mask?): whether the
/// mask is asked for, and the ratio in [0, 1) (0 in inference mode).
struct DropoutParams {
  bool HasMask = false;
  double Ratio = 0.5;
  /// Element i is kept when the top 32 bits of its counter hash are >= this.
  uint64_t threshold() const {
    return static_cast<uint64_t>(Ratio * 4294967296.0);
  }
  double scale() const { return 1 / (1 - Ratio); }
};

/// `read(i, name, value)` reads scalar operand i into a double.
template <typename Ctx, typename ReadScalar>
llvm::Expected<DropoutParams> dropoutParams(const Ctx &ctx, ReadScalar read) {
  DropoutParams p;
  p.HasMask = ctx.Outputs.size() > 1 && ctx.Outputs[1].present();
  if (p.HasMask && ctx.Outputs[1].Type != DType::Bool)
    return ctx.unsupported("mask of type " + dtypeName(ctx.Outputs[1].Type) +
                           " is not supported");
  double training = 0;
  if (ctx.hasInput(1))
    if (llvm::Error e = read(1, "ratio", p.Ratio))
      return llvm::Expected<DropoutParams>(std::move(e));
  if (ctx.hasInput(2))
    if (llvm::Error e = read(2, "training_mode", training))
      return llvm::Expected<DropoutParams>(std::move(e));
  if (training == 0)
    p.Ratio = 0;
  if (!(p.Ratio >= 0 && p.Ratio < 1))
    return ctx.unsupported("ratio " + std::to_string(p.Ratio) +
                           " is not in [0, 1)");
  return p;
}

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_ELEMENTWISECHECK_H
