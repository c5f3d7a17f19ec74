//===- AdamW8bitCheck.h - The quantized ops' operands, host side ----------===//
//
// What the CPU and CUDA kernels of AdamW8bitUpdate check of their operands
// and read of their attributes, written once (the arithmetic itself is
// kernels/common/Blockwise8bit.h): five state slots (the weight, u8 codes of
// its shape, f32 absmaxes of one element per kStateBlock), a gradient of the
// weight's type, f32 step size, sqrt_bc2 and scale, a bool `enabled`. And
// Nf4Dequantize's (kernels/common/Nf4.h): the layout of
// compiler/StateQuantization.h, one f32, bf16 or f16 result.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_ADAMW8BITCHECK_H
#define HEADROOM_KERNELS_COMMON_ADAMW8BITCHECK_H

#include "kernels/common/Blockwise8bit.h"
#include "kernels/common/Kernel.h"

namespace headroom {
namespace kernels {

inline llvm::Error checkAdamW8bit(const KernelContext &ctx) {
  if (ctx.Outputs.size() != 5 ||
      llvm::any_of(ctx.Outputs,
                   [](const TensorView &o) { return !o.present(); }))
    return ctx.unsupported("needs its 5 state slots as the outputs");
  const TensorView &w = ctx.Outputs[0];
  if (ctx.Inputs[0].type() != w.type())
    return ctx.unsupported("gradient " + ctx.Inputs[0].type().str() +
                           " does not match the state " + w.type().str());
  int64_t blocks = stateBlocks(w.numElements());
  for (int i : {1, 2})
    if (ctx.Outputs[i].type() != TensorType(DType::U8, w.Shape))
      return ctx.unsupported("moment " + ctx.Outputs[i].type().str() +
                             " is not u8 of the weight's shape");
  for (int i : {3, 4})
    if (ctx.Outputs[i].type() != TensorType(DType::F32, {blocks}))
      return ctx.unsupported("absmax " + ctx.Outputs[i].type().str() +
                             " is not f32[" + llvm::Twine(blocks) + "]");
  if (!ctx.hasInput(1) || !ctx.hasInput(2))
    return ctx.unsupported("needs the step size and sqrt_bc2");
  for (unsigned i = 1; i <= 3 && ctx.hasInput(i); ++i)
    if (ctx.Inputs[i].numElements() != 1 || ctx.Inputs[i].Type != DType::F32)
      return ctx.unsupported("operand " + llvm::Twine(i) +
                             " must be an f32 scalar");
  if (ctx.hasInput(4) &&
      (ctx.Inputs[4].Type != DType::Bool || ctx.Inputs[4].numElements() != 1))
    return ctx.unsupported("enabled must be a bool scalar");
  return llvm::Error::success();
}

/// Nf4Dequantize's four operands against its one result.
inline llvm::Error checkNf4Dequantize(const KernelContext &ctx) {
  std::vector<TensorType> types;
  for (const TensorView &v : ctx.Inputs)
    types.push_back(v.type());
  if (ctx.Outputs.size() != 1)
    return ctx.unsupported("needs one output");
  std::string why = nf4OperandError(types, ctx.Outputs[0].type());
  return why.empty() ? llvm::Error::success() : ctx.unsupported(why);
}

/// The step's factors from AdamWUpdate's attributes; StepSize, SqrtBc2 and
/// Scale are the operands' (read where they live: host or device).
inline AdamWStep adamwStepAttributes(const KernelContext &ctx) {
  float decay = static_cast<float>(ctx.attrFloat("decay", 1.0));
  return AdamWStep{decay,
                   static_cast<float>(ctx.attrFloat("beta1", 0.9)),
                   static_cast<float>(ctx.attrFloat("one_minus_beta1", 0.1)),
                   static_cast<float>(ctx.attrFloat("beta2", 0.999)),
                   static_cast<float>(ctx.attrFloat("one_minus_beta2", 0.001)),
                   static_cast<float>(ctx.attrFloat("eps", 1e-8)),
                   0.0f,
                   1.0f,
                   1.0f,
                   decay != 1.0f,
                   ctx.hasInput(3)};
}

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_ADAMW8BITCHECK_H
