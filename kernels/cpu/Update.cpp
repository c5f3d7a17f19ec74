//===- Update.cpp - In-place state updates --------------------------------===//
//
// Kernels of the update ops, which write a state slot in place: the executor
// passes the slot as Outputs[0] and the kernel reads its old value there.
//   SgdUpdate   w -= lr * (scale * g + weight_decay * w), unless `enabled`
//               (operand 2) is false
//   MomentumUpdate  on (w, buf): d = scale * g + weight_decay * w;
//               buf = momentum * buf + d; w -= lr * (nesterov ? d +
//               momentum * buf : buf)
//   AdamWUpdate on (w, m, v): d = scale * g; w *= decay (when given);
//               m = beta1 * m + one_minus_beta1 * d; v = beta2 * v +
//               one_minus_beta2 * d * d; w -= step_size * m / (sqrt(v) /
//               sqrt_bc2 + eps)
//   AdamW8bitUpdate  AdamWUpdate with bitsandbytes' block-wise 8-bit
//               moments (kernels/common/Blockwise8bit.h), on (w, m, v,
//               m_absmax, v_absmax)
//   Accumulate  acc += scale * g   (acc = scale * g when first = 1)
// and, beside AdamW8bitUpdate since it shares the 8-bit maps, the one op
// that reads quantized frozen state:
//   Nf4Dequantize  (codes, absmax, nested_absmax, offset) -> the weight in
//               its compute type (kernels/common/Nf4.h)
// The optimizer updates skip the step when `enabled` is false. They round
// as torch.optim's ops do (one rounding per operation, in its order), so
// LOMO's weights are SGD's bit for bit and the fused momentum and AdamW are
// the primitive ops' arithmetic in one pass over memory. Each element is
// independent: the loops split across the kernel threads.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/AdamW8bitCheck.h"
#include "kernels/common/KernelUtil.h"
#include "kernels/common/Nf4.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/Parallel.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>

using namespace headroom;
using namespace headroom::cpu;

namespace {

/// The op writes `slots` state slots, given as its outputs.
llvm::Error checkState(const KernelContext &ctx, size_t slots = 1) {
  if (ctx.Outputs.size() != slots ||
      llvm::any_of(ctx.Outputs,
                   [](const TensorView &o) { return !o.present(); }))
    return ctx.unsupported(slots == 1 ? "needs its state slot as the output"
                                      : "needs its " + llvm::Twine(slots) +
                                            " state slots as the outputs");
  if (ctx.Inputs[0].type() != ctx.Outputs[0].type())
    return ctx.unsupported("gradient " + ctx.Inputs[0].type().str() +
                           " does not match the state " +
                           ctx.Outputs[0].type().str());
  return llvm::Error::success();
}

/// The operands after the gradient: `scalars` scalars of the state's type
/// (the last one the gradient's scale) and the `enabled` flag. Sets *skip
/// when the flag is false.
llvm::Error checkUpdateOperands(const KernelContext &ctx, size_t slots,
                                unsigned scalars, bool *skip) {
  if (auto e = checkState(ctx, slots))
    return e;
  for (const TensorView &out : ctx.Outputs.drop_front())
    if (out.type() != ctx.Outputs[0].type())
      return ctx.unsupported("state " + out.type().str() +
                             " does not match the weight " +
                             ctx.Outputs[0].type().str());
  for (unsigned i = 1; i <= scalars && ctx.hasInput(i); ++i)
    if (ctx.Inputs[i].numElements() != 1 ||
        ctx.Inputs[i].Type != ctx.Outputs[0].Type)
      return ctx.unsupported("operand " + llvm::Twine(i) +
                             " must be a scalar of the state's type");
  *skip = false;
  if (!ctx.hasInput(scalars + 1))
    return llvm::Error::success();
  const TensorView &flag = ctx.Inputs[scalars + 1];
  if (flag.Type != DType::Bool || flag.numElements() != 1)
    return ctx.unsupported("enabled must be a bool scalar");
  *skip = !*flag.as<uint8_t>();
  return llvm::Error::success();
}

template <typename T> llvm::Error sgdUpdate(const KernelContext &ctx) {
  const T *g = ctx.Inputs[0].as<T>();
  T *w = ctx.Outputs[0].as<T>();
  bool scaled = ctx.hasInput(1);
  T scale = scaled ? *ctx.Inputs[1].as<T>() : T(1);
  T lr = static_cast<T>(ctx.attrFloat("lr", 0.0));
  T wd = static_cast<T>(ctx.attrFloat("weight_decay", 0.0));
  // Only the operations the sgd ops do: x * 1 and x + 0 * w are exact, but
  // -0 and NaN/Inf weights would tell.
  bool decays = wd != T(0);
  parallelFor(ctx.Outputs[0].numElements(), kParallelGrain,
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                  T d = scaled ? g[i] * scale : g[i];
                  if (decays)
                    d = d + w[i] * wd;
                  w[i] = w[i] - d * lr;
                }
              });
  return llvm::Error::success();
}

llvm::Error sgdUpdateKernel(const KernelContext &ctx) {
  bool skip;
  if (auto e = checkUpdateOperands(ctx, /*slots=*/1, /*scalars=*/1, &skip))
    return e;
  if (skip) // a skipped step: w stays as it is
    return llvm::Error::success();
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

template <typename T> llvm::Error momentumUpdate(const KernelContext &ctx) {
  const T *g = ctx.Inputs[0].as<T>();
  T *w = ctx.Outputs[0].as<T>(), *buf = ctx.Outputs[1].as<T>();
  bool scaled = ctx.hasInput(1);
  T scale = scaled ? *ctx.Inputs[1].as<T>() : T(1);
  T lr = static_cast<T>(ctx.attrFloat("lr", 0.0));
  T wd = static_cast<T>(ctx.attrFloat("weight_decay", 0.0));
  T mu = static_cast<T>(ctx.attrFloat("momentum", 0.0));
  bool nesterov = ctx.attrInt("nesterov", 0);
  parallelFor(ctx.Outputs[0].numElements(), kParallelGrain,
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                  // Only the operations the primitive ops would do: x * 1
                  // and x + 0 * w are exact, but -0 and NaN would tell.
                  T d = scaled ? g[i] * scale : g[i];
                  if (wd != T(0))
                    d = d + w[i] * wd;
                  T b = buf[i] * mu + d;
                  buf[i] = b;
                  w[i] = w[i] - (nesterov ? d + b * mu : b) * lr;
                }
              });
  return llvm::Error::success();
}

llvm::Error momentumUpdateKernel(const KernelContext &ctx) {
  bool skip;
  if (auto e = checkUpdateOperands(ctx, /*slots=*/2, /*scalars=*/1, &skip))
    return e;
  if (skip)
    return llvm::Error::success();
  return HR_DISPATCH_FLOAT(ctx, ctx.Outputs[0].Type, momentumUpdate, ctx);
}

template <typename T> llvm::Error adamwUpdate(const KernelContext &ctx) {
  const T *g = ctx.Inputs[0].as<T>();
  T stepSize = *ctx.Inputs[1].as<T>(), sqrtBc2 = *ctx.Inputs[2].as<T>();
  bool scaled = ctx.hasInput(3);
  T scale = scaled ? *ctx.Inputs[3].as<T>() : T(1);
  T *w = ctx.Outputs[0].as<T>(), *m = ctx.Outputs[1].as<T>(),
    *v = ctx.Outputs[2].as<T>();
  // No decay (or a factor of 1) skips the multiply: bit for bit the same.
  T decay = static_cast<T>(ctx.attrFloat("decay", 1.0));
  T b1 = static_cast<T>(ctx.attrFloat("beta1", 0.9));
  T c1 = static_cast<T>(ctx.attrFloat("one_minus_beta1", 0.1));
  T b2 = static_cast<T>(ctx.attrFloat("beta2", 0.999));
  T c2 = static_cast<T>(ctx.attrFloat("one_minus_beta2", 0.001));
  T eps = static_cast<T>(ctx.attrFloat("eps", 1e-8));
  bool decays = decay != T(1);
  parallelFor(ctx.Outputs[0].numElements(), kParallelGrain,
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                  T d = scaled ? g[i] * scale : g[i];
                  T wi = decays ? w[i] * decay : w[i];
                  T mi = m[i] * b1 + d * c1;
                  T vi = v[i] * b2 + (d * d) * c2;
                  m[i] = mi;
                  v[i] = vi;
                  T denom = std::sqrt(vi) / sqrtBc2 + eps;
                  w[i] = wi - (mi / denom) * stepSize;
                }
              });
  return llvm::Error::success();
}

llvm::Error adamwUpdateKernel(const KernelContext &ctx) {
  bool skip;
  if (auto e = checkUpdateOperands(ctx, /*slots=*/3, /*scalars=*/3, &skip))
    return e;
  if (!ctx.hasInput(1) || !ctx.hasInput(2))
    return ctx.unsupported("needs the step size and sqrt_bc2");
  if (skip)
    return llvm::Error::success();
  return HR_DISPATCH_FLOAT(ctx, ctx.Outputs[0].Type, adamwUpdate, ctx);
}

/// AdamW8bitUpdate(g, step_size, sqrt_bc2, scale?, enabled?) on an f32
/// weight (a bf16/f16 one arrives widened) with u8 moments of its shape and
/// one f32 absmax per kStateBlock elements of each: blocks split across the
/// kernel threads.
llvm::Error adamw8bitUpdateKernel(const KernelContext &ctx) {
  if (auto e = checkAdamW8bit(ctx))
    return e;
  const TensorView &w = ctx.Outputs[0];
  if (w.Type != DType::F32)
    return ctx.unsupported("needs an f32 weight (bf16 and f16 are widened)");
  if (ctx.hasInput(4) && !*ctx.Inputs[4].as<uint8_t>())
    return llvm::Error::success(); // a skipped step
  int64_t n = w.numElements(), blocks = stateBlocks(n);
  AdamWStep step = adamwStepAttributes(ctx);
  step.StepSize = *ctx.Inputs[1].as<float>();
  step.SqrtBc2 = *ctx.Inputs[2].as<float>();
  if (ctx.hasInput(3))
    step.Scale = *ctx.Inputs[3].as<float>();
  const float *g = ctx.Inputs[0].as<float>();
  float *wt = w.as<float>();
  uint8_t *mc = ctx.Outputs[1].as<uint8_t>(),
          *vc = ctx.Outputs[2].as<uint8_t>();
  float *ma = ctx.Outputs[3].as<float>(), *va = ctx.Outputs[4].as<float>();
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    float m[kStateBlock], v[kStateBlock];
    for (int64_t blk = begin; blk < end; ++blk) {
      int64_t first = blk * kStateBlock, len = std::min(kStateBlock, n - first);
      float mMax = 0.0f, vMax = 0.0f;
      for (int64_t j = 0; j < len; ++j) {
        int64_t i = first + j;
        float d = step.grad(g[i]);
        m[j] = step.firstMoment(kSignedDynamicMap[mc[i]] * ma[blk], d);
        v[j] = step.secondMoment(kUnsignedDynamicMap[vc[i]] * va[blk], d);
        // A NaN moment makes its block's absmax NaN, as the GPU's r.max.
        float am = std::fabs(m[j]), av = std::fabs(v[j]);
        mMax = am > mMax || am != am ? am : mMax;
        vMax = av > vMax || av != av ? av : vMax;
        wt[i] = step.weight(wt[i], m[j], v[j]);
      }
      for (int64_t j = 0; j < len; ++j) {
        mc[first + j] = quantizeSigned(kSignedDynamicMap, m[j], mMax);
        vc[first + j] = quantizeUnsigned(kUnsignedDynamicMap, v[j], vMax);
      }
      ma[blk] = mMax;
      va[blk] = vMax;
    }
  });
  return llvm::Error::success();
}

llvm::Error accumulateKernel(const KernelContext &ctx) {
  if (auto e = checkState(ctx))
    return e;
  return HR_DISPATCH_FLOAT(ctx, ctx.Outputs[0].Type, accumulate, ctx);
}

template <typename T> llvm::Error nf4Dequantize(const KernelContext &ctx) {
  const uint8_t *packed = ctx.Inputs[0].as<uint8_t>(),
                *codes = ctx.Inputs[1].as<uint8_t>();
  const float *nested = ctx.Inputs[2].as<float>();
  float offset = *ctx.Inputs[3].as<float>();
  T *out = ctx.Outputs[0].as<T>();
  int64_t blocks = nf4Blocks(ctx.Outputs[0].numElements()),
          n = ctx.Outputs[0].numElements();
  parallelFor(blocks, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * kNf4Block, last = std::min(end * kNf4Block, n);
         i < last; ++i)
      out[i] = Elem<T>::store(dequantizeNf4(kNf4Map, kSignedDynamicMap, packed,
                                            codes, nested, offset, i));
  });
  return llvm::Error::success();
}

/// Nf4Dequantize(codes, absmax, nested_absmax, offset) -> an f32, bf16 or
/// f16 weight, written in its type (no f32 copy in between).
llvm::Error nf4DequantizeKernel(const KernelContext &ctx) {
  if (auto e = checkNf4Dequantize(ctx))
    return e;
  DType t = ctx.Outputs[0].Type;
  return t == DType::F32    ? nf4Dequantize<float>(ctx)
         : t == DType::BF16 ? nf4Dequantize<BFloat16>(ctx)
                            : nf4Dequantize<Half>(ctx);
}

} // namespace

void headroom::cpu::registerUpdateKernels() {
  registerKernel(OpKind::SgdUpdate, sgdUpdateKernel, FloatSupport::F32F64);
  registerKernel(OpKind::MomentumUpdate, momentumUpdateKernel,
                 FloatSupport::F32F64);
  registerKernel(OpKind::AdamWUpdate, adamwUpdateKernel, FloatSupport::F32F64);
  registerKernel(OpKind::AdamW8bitUpdate, adamw8bitUpdateKernel,
                 FloatSupport::F32F64);
  registerKernel(OpKind::Accumulate, accumulateKernel, FloatSupport::F32F64);
  registerKernel(OpKind::Nf4Dequantize, nf4DequantizeKernel);
}
