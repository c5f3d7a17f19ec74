//===- Update.cpp - In-place state updates --------------------------------===//
//
// Kernels of the update ops, which write a state slot in place: the executor
// passes the slot as Outputs[0] and the kernel reads its old value there.
//   SgdUpdate   w -= lr * (scale * g + weight_decay * w), unless `enabled`
//               (operand 2) is false
//   Accumulate  acc += scale * g   (acc = scale * g when first = 1)
// SgdUpdate rounds exactly as the `optimizer` pass's sgd ops do (one rounding
// per operation, in torch.optim.SGD's order), so LOMO's weights are SGD's
// bit for bit.
//
//===----------------------------------------------------------------------===//
#include "kernels/cpu/Kernel.h"

using namespace headroom;
using namespace headroom::cpu;

namespace {

llvm::Error checkState(const KernelContext &ctx) {
  if (ctx.Outputs.size() != 1 || !ctx.Outputs[0].present())
    return ctx.unsupported("needs its state slot as the output");
  if (ctx.Inputs[0].type() != ctx.Outputs[0].type())
    return ctx.unsupported("gradient " + ctx.Inputs[0].type().str() +
                           " does not match the state " +
                           ctx.Outputs[0].type().str());
  return llvm::Error::success();
}

template <typename T> llvm::Error sgdUpdate(const KernelContext &ctx) {
  const T *g = ctx.Inputs[0].as<T>();
  T *w = ctx.Outputs[0].as<T>();
  bool scaled = ctx.hasInput(1);
  T scale = scaled ? *ctx.Inputs[1].as<T>() : T(1);
  T lr = static_cast<T>(ctx.attrFloat("lr", 0.0));
  T wd = static_cast<T>(ctx.attrFloat("weight_decay", 0.0));
  int64_t n = ctx.Outputs[0].numElements();
  // Four cases so that no operation the sgd ops skip is done here: x * 1 and
  // x + 0 * w are exact, but -0 and NaN/Inf weights would tell.
  if (scaled && wd != T(0)) {
    for (int64_t i = 0; i < n; ++i) {
      T d = g[i] * scale;
      d = d + w[i] * wd;
      w[i] = w[i] - d * lr;
    }
  } else if (scaled) {
    for (int64_t i = 0; i < n; ++i)
      w[i] = w[i] - (g[i] * scale) * lr;
  } else if (wd != T(0)) {
    for (int64_t i = 0; i < n; ++i) {
      T d = g[i] + w[i] * wd;
      w[i] = w[i] - d * lr;
    }
  } else {
    for (int64_t i = 0; i < n; ++i)
      w[i] = w[i] - g[i] * lr;
  }
  return llvm::Error::success();
}

llvm::Error sgdUpdateKernel(const KernelContext &ctx) {
  if (auto e = checkState(ctx))
    return e;
  if (ctx.hasInput(1) && (ctx.Inputs[1].numElements() != 1 ||
                          ctx.Inputs[1].Type != ctx.Outputs[0].Type))
    return ctx.unsupported("scale must be a scalar of the state's type");
  if (ctx.hasInput(2)) {
    if (ctx.Inputs[2].Type != DType::Bool || ctx.Inputs[2].numElements() != 1)
      return ctx.unsupported("enabled must be a bool scalar");
    if (!*ctx.Inputs[2].as<uint8_t>())
      return llvm::Error::success(); // a skipped step: w stays as it is
  }
  return HR_DISPATCH_FLOAT(ctx, ctx.Outputs[0].Type, sgdUpdate, ctx);
}

template <typename T> llvm::Error accumulate(const KernelContext &ctx) {
  const T *g = ctx.Inputs[0].as<T>();
  T *acc = ctx.Outputs[0].as<T>();
  T scale = static_cast<T>(ctx.attrFloat("scale", 1.0));
  int64_t n = ctx.Outputs[0].numElements();
  if (ctx.attrInt("first", 0))
    for (int64_t i = 0; i < n; ++i)
      acc[i] = g[i] * scale;
  else
    for (int64_t i = 0; i < n; ++i)
      acc[i] = acc[i] + g[i] * scale;
  return llvm::Error::success();
}

llvm::Error accumulateKernel(const KernelContext &ctx) {
  if (auto e = checkState(ctx))
    return e;
  return HR_DISPATCH_FLOAT(ctx, ctx.Outputs[0].Type, accumulate, ctx);
}

} // namespace

void headroom::cpu::registerUpdateKernels() {
  registerKernel("SgdUpdate", sgdUpdateKernel, FloatSupport::F32F64);
  registerKernel("Accumulate", accumulateKernel, FloatSupport::F32F64);
}
