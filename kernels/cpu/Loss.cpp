//===- Loss.cpp - Cross-entropy losses and their gradient on the CPU ------===//
//
// Scores are [N, C, d1, ...] and labels [N, d1, ...]; the kernels see them as
// [N, C, D] and [N, D]. Every target i has a weight w_i: 0 when its label is
// `ignore_index`, else weight[label] (1 without a weight input). The loss of
// a target is -w_i * log_prob[label]; reduction "none" returns them, "sum"
// adds them and "mean" divides the sum by sum_i w_i — ONNX's rule, which
// without weights is the count of targets that are not ignored.
//
// SoftmaxCrossEntropyLossGrad(dloss, scores, labels, weight?) is the
// derivative autodiff emits: d scores = (softmax(scores) - onehot(label)) *
// w_i * g_i / normalizer, where g_i is dloss (a scalar for mean and sum,
// one value per target for none) and the normalizer is sum_i w_i for mean,
// else 1. Ignored targets get zero rows.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/LossShape.h"
#include "kernels/common/OutputHead.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/Parallel.h"
#include "kernels/cpu/VecMath.h"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace headroom;
using namespace headroom::cpu;
using llvm::Error;
using llvm::Expected;

namespace {

int64_t labelAt(const TensorView &labels, int64_t i) {
  return labels.Type == DType::I64 ? labels.as<int64_t>()[i]
                                   : labels.as<int32_t>()[i];
}

/// Per-target weights w_i (see the file header), after checking that every
/// label that is not ignored is a class index.
template <typename T>
Expected<std::vector<T>>
targetWeights(const KernelContext &ctx, const LossShape &s,
              const TensorView &labels, const TensorView *weight) {
  std::vector<T> w(s.N * s.D);
  const T *classWeight =
      weight && weight->present() ? weight->as<T>() : nullptr;
  for (int64_t i = 0; i < s.N * s.D; ++i) {
    int64_t label = labelAt(labels, i);
    if (s.HasIgnore && label == s.IgnoreIndex) {
      w[i] = 0;
      continue;
    }
    if (label < 0 || label >= s.C)
      return ctx.unsupported("label " + llvm::Twine(label) +
                             " is not a class index in [0, " +
                             llvm::Twine(s.C) + ")");
    w[i] = classWeight ? classWeight[label] : T(1);
  }
  return w;
}

/// log_softmax over axis 1 of [N, C, D] scores, a row of D at a time.
template <typename T>
void logSoftmaxAxis1(const T *x, T *y, const LossShape &s) {
  if constexpr (std::is_same_v<T, float>)
    if (s.D == 1) { // [N, C]: contiguous rows, vectorized exp
      for (int64_t n = 0; n < s.N; ++n) {
        const float *in = x + n * s.C;
        float *out = y + n * s.C;
        float shift = s.C ? maxArray(in, s.C) : 0;
        float logSum = std::log(sumExpShifted(in, shift, s.C));
        for (int64_t c = 0; c < s.C; ++c)
          out[c] = (in[c] - shift) - logSum;
      }
      return;
    }
  std::vector<T> shift(s.D);
  for (int64_t n = 0; n < s.N; ++n) {
    const T *in = x + n * s.C * s.D;
    T *out = y + n * s.C * s.D;
    std::copy(in, in + s.D, shift.begin());
    for (int64_t c = 1; c < s.C; ++c)
      for (int64_t d = 0; d < s.D; ++d)
        shift[d] = std::max(shift[d], in[c * s.D + d]);
    std::vector<T> sum(s.D, T(0));
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t d = 0; d < s.D; ++d)
        sum[d] += std::exp(in[c * s.D + d] - shift[d]);
    // (x - max) - log(sum) keeps f32 precision for large logits.
    for (int64_t d = 0; d < s.D; ++d)
      sum[d] = std::log(sum[d]);
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t d = 0; d < s.D; ++d)
        out[c * s.D + d] = (in[c * s.D + d] - shift[d]) - sum[d];
  }
}

/// Writes the reduced negative log-likelihood, given the log-probability of
/// each target's label: logProbAt(n, d, label).
template <typename T, typename LogProbAt>
void nllReduceWith(const LogProbAt &logProbAt, const std::vector<T> &w,
                   const TensorView &labels, const LossShape &s, T *loss) {
  double total = 0, weightSum = 0;
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t d = 0; d < s.D; ++d) {
      int64_t i = n * s.D + d;
      T l = w[i] == 0 ? T(0) : -w[i] * logProbAt(n, d, labelAt(labels, i));
      if (s.Red == Reduction::None)
        loss[i] = l;
      total += l;
      weightSum += w[i];
    }
  if (s.Red == Reduction::Sum)
    loss[0] = T(total);
  if (s.Red == Reduction::Mean)
    loss[0] = T(total / weightSum);
}

/// The same with the log-probabilities given as an [N, C, D] array.
template <typename T>
void nllReduce(const T *logProb, const std::vector<T> &w,
               const TensorView &labels, const LossShape &s, T *loss) {
  nllReduceWith<T>([&](int64_t n, int64_t d,
                       int64_t c) { return logProb[(n * s.C + c) * s.D + d]; },
                   w, labels, s, loss);
}

template <typename T> Error nllLoss(const KernelContext &ctx) {
  const TensorView &input = ctx.Inputs[0], &labels = ctx.Inputs[1];
  const TensorView *weight = ctx.hasInput(2) ? &ctx.Inputs[2] : nullptr;
  auto s = checkedLoss(ctx, 0, ctx.Outputs[0]);
  if (!s)
    return s.takeError();
  auto w = targetWeights<T>(ctx, *s, labels, weight);
  if (!w)
    return w.takeError();
  nllReduce(input.as<T>(), *w, labels, *s, ctx.Outputs[0].as<T>());
  return Error::success();
}

template <typename T> Error softmaxCrossEntropy(const KernelContext &ctx) {
  const TensorView &scores = ctx.Inputs[0], &labels = ctx.Inputs[1];
  const TensorView *weight = ctx.hasInput(2) ? &ctx.Inputs[2] : nullptr;
  auto s = checkedLoss(ctx, 0, ctx.Outputs[0]);
  if (!s)
    return s.takeError();
  auto w = targetWeights<T>(ctx, *s, labels, weight);
  if (!w)
    return w.takeError();
  // log_prob goes straight to the optional second result when it is wanted.
  if (ctx.Outputs.size() > 1 && ctx.Outputs[1].present()) {
    if (ctx.Outputs[1].numElements() != scores.numElements())
      return ctx.unsupported("log_prob type does not match the scores");
    T *logProb = ctx.Outputs[1].as<T>();
    logSoftmaxAxis1(scores.as<T>(), logProb, *s);
    nllReduce(logProb, *w, labels, *s, ctx.Outputs[0].as<T>());
    return Error::success();
  }
  // Otherwise only each target's log-probability is needed: x[label] - max -
  // log(sum exp(x - max)) over the classes, with no scores-sized scratch
  // (the plan's memory is all the memory a step uses).
  const T *x = scores.as<T>();
  if constexpr (std::is_same_v<T, float>)
    if (s->D == 1) {
      // Rows of classes, each on its own across the kernel threads; the
      // reduction over targets stays in order.
      std::vector<float> logProb(s->N);
      parallelFor(s->N, std::max<int64_t>(1, kParallelGrain / (s->C + 1)),
                  [&](int64_t begin, int64_t end) {
                    for (int64_t n = begin; n < end; ++n) {
                      if ((*w)[n] == 0)
                        continue;
                      const float *row = x + n * s->C;
                      float shift = maxArray(row, s->C);
                      float sum = sumExpShifted(row, shift, s->C);
                      logProb[n] =
                          (row[labelAt(labels, n)] - shift) - std::log(sum);
                    }
                  });
      nllReduceWith<T>([&](int64_t n, int64_t, int64_t) { return logProb[n]; },
                       *w, labels, *s, ctx.Outputs[0].as<T>());
      return Error::success();
    }
  auto logProbAt = [&](int64_t n, int64_t d, int64_t label) {
    const T *row = x + n * s->C * s->D + d;
    T shift = row[0];
    if constexpr (std::is_same_v<T, float>) {
      if (s->D == 1)
        shift = maxArray(row, s->C);
      else
        for (int64_t c = 1; c < s->C; ++c)
          shift = std::max(shift, row[c * s->D]);
    } else {
      for (int64_t c = 1; c < s->C; ++c)
        shift = std::max(shift, row[c * s->D]);
    }
    T sum = 0;
    if constexpr (std::is_same_v<T, float>) {
      if (s->D == 1)
        sum = sumExpShifted(row, shift, s->C);
      else
        for (int64_t c = 0; c < s->C; ++c)
          sum += std::exp(row[c * s->D] - shift);
    } else {
      for (int64_t c = 0; c < s->C; ++c)
        sum += std::exp(row[c * s->D] - shift);
    }
    return (row[label * s->D] - shift) - std::log(sum);
  };
  nllReduceWith<T>(logProbAt, *w, labels, *s, ctx.Outputs[0].as<T>());
  return Error::success();
}

template <typename T> Error softmaxCrossEntropyGrad(const KernelContext &ctx) {
  const TensorView &dloss = ctx.Inputs[0], &scores = ctx.Inputs[1],
                   &labels = ctx.Inputs[2];
  const TensorView *weight = ctx.hasInput(3) ? &ctx.Inputs[3] : nullptr;
  const TensorView &dscores = ctx.Outputs[0];
  auto s = checkedLoss(ctx, 1, dloss);
  if (!s)
    return s.takeError();
  if (dloss.Type != scores.Type || dscores.Type != scores.Type ||
      dscores.numElements() != scores.numElements())
    return ctx.unsupported("dloss and d scores must have the scores' type");
  auto w = targetWeights<T>(ctx, *s, labels, weight);
  if (!w)
    return w.takeError();
  double norm = 1;
  if (s->Red == Reduction::Mean) {
    norm = 0;
    for (T wi : *w)
      norm += wi;
  }
  T *out = dscores.as<T>();
  const T *g = dloss.as<T>();
  if constexpr (std::is_same_v<T, float>)
    if (s->D == 1) {
      // One pass per row after its max and sum: exp(log_softmax) * scale,
      // rounded as the general path rounds it; rows across the threads.
      const float *x = scores.as<float>();
      parallelFor(s->N, std::max<int64_t>(1, kParallelGrain / (s->C + 1)),
                  [&](int64_t begin, int64_t end) {
                    for (int64_t n = begin; n < end; ++n) {
                      float gn = s->Red == Reduction::None ? g[n] : g[0];
                      float scale =
                          (*w)[n] == 0 ? 0.0f : float((*w)[n] * gn / norm);
                      const float *in = x + n * s->C;
                      float *row = out + n * s->C;
                      float shift = s->C ? maxArray(in, s->C) : 0;
                      float logSum = std::log(sumExpShifted(in, shift, s->C));
                      softmaxScaled(in, shift, logSum, scale, row, s->C);
                      if ((*w)[n] != 0)
                        row[labelAt(labels, n)] -= scale;
                    }
                  });
      return Error::success();
    }
  // softmax = exp(log_softmax), computed in place in the result.
  logSoftmaxAxis1(scores.as<T>(), out, *s);
  std::vector<T> scale(s->D);
  for (int64_t n = 0; n < s->N; ++n) {
    T *row = out + n * s->C * s->D;
    for (int64_t d = 0; d < s->D; ++d) {
      int64_t i = n * s->D + d;
      T gi = s->Red == Reduction::None ? g[i] : g[0];
      // An ignored target contributes nothing, even when norm is 0.
      scale[d] = (*w)[i] == 0 ? T(0) : T((*w)[i] * gi / norm);
    }
    if constexpr (std::is_same_v<T, float>) {
      if (s->D == 1)
        expScaled(row, scale[0], row, s->C);
      else
        for (int64_t c = 0; c < s->C; ++c)
          for (int64_t d = 0; d < s->D; ++d)
            row[c * s->D + d] = std::exp(row[c * s->D + d]) * scale[d];
    } else {
      for (int64_t c = 0; c < s->C; ++c)
        for (int64_t d = 0; d < s->D; ++d)
          row[c * s->D + d] = std::exp(row[c * s->D + d]) * scale[d];
    }
    for (int64_t d = 0; d < s->D; ++d) {
      int64_t i = n * s->D + d;
      if ((*w)[i] != 0)
        row[labelAt(labels, i) * s->D + d] -= scale[d];
    }
  }
  return Error::success();
}

Error nllLossKernel(const KernelContext &ctx) {
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[0].Type, nllLoss, ctx);
}

Error softmaxCrossEntropyKernel(const KernelContext &ctx) {
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[0].Type, softmaxCrossEntropy, ctx);
}

Error softmaxCrossEntropyGradKernel(const KernelContext &ctx) {
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[1].Type, softmaxCrossEntropyGrad,
                           ctx);
}

} // namespace

namespace {

/// The workspace of LinearCrossEntropy(Grad): the chunk's logits (and
/// gradient), then the most any of its calls needs
/// (kernels/common/OutputHead.h).
uint64_t outputHeadWorkspace(const KernelContext &ctx) {
  auto l = headLayout(ctx);
  if (!l) {
    llvm::consumeError(l.takeError());
    return 0;
  }
  uint64_t calls = 0;
  KernelContext query = ctx;
  query.Workspace = nullptr;
  query.WorkspaceBytes = 0;
  llvm::Error e = runOutputHead(query, *l, [&](const HeadCall &c) {
    KernelContext sub{c.Op, c.Ins, c.Outs, c.Attrs, ctx.Seed};
    calls = std::max(calls, kernelWorkspaceBytes(sub));
    return llvm::Error::success();
  });
  llvm::consumeError(std::move(e));
  return l->CallsOffset + calls;
}

/// LinearCrossEntropy(x, w, labels) -> loss [N] and its gradient (dloss,
/// x, w, labels) -> (dx, dw?): the chunk loop of kernels/common/OutputHead.h
/// over this backend's MatMul, Gemm and cross-entropy kernels.
Error outputHeadKernel(const KernelContext &ctx) {
  auto l = headLayout(ctx);
  if (!l)
    return l.takeError();
  uint64_t need = outputHeadWorkspace(ctx);
  std::vector<uint8_t> own;
  KernelContext c = ctx;
  if (!ctx.Workspace) { // a direct call: its own scratch
    own.resize(need);
    c.Workspace = own.data();
    c.WorkspaceBytes = need;
  } else if (ctx.WorkspaceBytes < need) {
    return ctx.unsupported("the planned workspace of " +
                           llvm::Twine(ctx.WorkspaceBytes) +
                           " bytes is smaller than the " + llvm::Twine(need) +
                           " bytes this call needs");
  }
  return runOutputHead(c, *l, [&](const HeadCall &call) {
    KernelContext sub{call.Op, call.Ins, call.Outs, call.Attrs, ctx.Seed};
    sub.Workspace = call.Workspace;
    sub.WorkspaceBytes = call.WorkspaceBytes;
    return runKernel(sub);
  });
}

} // namespace

void headroom::cpu::registerLossKernels() {
  registerKernel(OpKind::LinearCrossEntropy, outputHeadKernel);
  registerKernel(OpKind::LinearCrossEntropyGrad, outputHeadKernel);
  registerWorkspace(OpKind::LinearCrossEntropy, outputHeadWorkspace);
  registerWorkspace(OpKind::LinearCrossEntropyGrad, outputHeadWorkspace);
  registerKernel(OpKind::NegativeLogLikelihoodLoss, nllLossKernel,
                 FloatSupport::F32F64);
  registerKernel(OpKind::SoftmaxCrossEntropyLoss, softmaxCrossEntropyKernel,
                 FloatSupport::F32F64);
  registerKernel(OpKind::SoftmaxCrossEntropyLossGrad,
                 softmaxCrossEntropyGradKernel, FloatSupport::F32F64);
}
