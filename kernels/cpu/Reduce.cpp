//===- Reduce.cpp - Reductions, ArgMax, Softmax and LogSoftmax on the CPU -===//
//
// Reduce* merge the input's axes into alternating runs of reduced and kept
// axes and walk the input once in memory order, so that the innermost loop
// is contiguous: a running reduction into one output element when the last
// run is reduced, an elementwise update of a row of outputs when it is kept.
// The axes come from the optional `axes` input (ReduceSum since opset 13)
// or the `axes` attribute (the others up to opset 17), with the same
// `keepdims` and `noop_with_empty_axes` rules; keepdims does not change the
// layout, only the result type the compiler already computed.
//
// ArgMax, Softmax and LogSoftmax see the input as [outer, n, inner] around
// their one axis. The softmaxes subtract the maximum along the axis before
// exponentiating, so large logits do not overflow.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/KernelUtil.h"
#include "kernels/common/ReduceCheck.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/Parallel.h"
#include "kernels/cpu/VecMath.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace headroom;
using namespace headroom::cpu;
using llvm::ArrayRef;
using llvm::Error;
using llvm::SmallVector;

namespace {

enum class ReduceKind { Sum, Mean, Max, Min, Prod };

/// The input's shape with size-1 axes dropped and adjacent axes of the same
/// kind merged; OutStrides is 0 for a reduced run.
struct ReduceLoops {
  SmallVector<int64_t, 6> Dims, OutStrides;
};

ReduceLoops planReduce(ArrayRef<int64_t> shape, ArrayRef<bool> reduced) {
  ReduceLoops l;
  SmallVector<bool, 6> kinds;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1)
      continue;
    if (!kinds.empty() && kinds.back() == reduced[i]) {
      l.Dims.back() *= shape[i];
      continue;
    }
    l.Dims.push_back(shape[i]);
    kinds.push_back(reduced[i]);
  }
  l.OutStrides.resize(l.Dims.size());
  int64_t stride = 1;
  for (int i = static_cast<int>(l.Dims.size()) - 1; i >= 0; --i) {
    l.OutStrides[i] = kinds[i] ? 0 : stride;
    if (!kinds[i])
      stride *= l.Dims[i];
  }
  return l;
}

/// Folds every input element into its output element with acc(out&, in).
template <typename T, typename Acc>
void reduceWalk(const T *in, T *out, const ReduceLoops &l, Acc acc) {
  if (l.Dims.empty()) {
    acc(out[0], in[0]);
    return;
  }
  int64_t inner = l.Dims.back();
  bool innerReduced = l.OutStrides.back() == 0;
  unsigned outerRank = l.Dims.size() - 1;
  int64_t outerCount = 1;
  for (unsigned d = 0; d < outerRank; ++d)
    outerCount *= l.Dims[d];
  SmallVector<int64_t, 6> index(outerRank, 0);
  int64_t outOff = 0;
  for (int64_t o = 0; o < outerCount; ++o, in += inner) {
    T *y = out + outOff;
    if (innerReduced) {
      T v = *y;
      for (int64_t j = 0; j < inner; ++j)
        acc(v, in[j]);
      *y = v;
    } else {
      for (int64_t j = 0; j < inner; ++j)
        acc(y[j], in[j]);
    }
    for (int d = static_cast<int>(outerRank) - 1; d >= 0; --d) {
      outOff += l.OutStrides[d];
      if (++index[d] < l.Dims[d])
        break;
      outOff -= l.OutStrides[d] * index[d];
      index[d] = 0;
    }
  }
}

template <typename T> T lowestValue() {
  return std::numeric_limits<T>::has_infinity
             ? -std::numeric_limits<T>::infinity()
             : std::numeric_limits<T>::lowest();
}

template <typename T> T highestValue() {
  return std::numeric_limits<T>::has_infinity
             ? std::numeric_limits<T>::infinity()
             : std::numeric_limits<T>::max();
}

template <typename T>
void reduceInto(ReduceKind kind, const T *in, T *out, int64_t outCount,
                const ReduceLoops &l) {
  switch (kind) {
  case ReduceKind::Sum:
  case ReduceKind::Mean:
    std::fill(out, out + outCount, T(0));
    reduceWalk(in, out, l, [](T &v, T x) { v += x; });
    return;
  case ReduceKind::Prod:
    std::fill(out, out + outCount, T(1));
    reduceWalk(in, out, l, [](T &v, T x) { v *= x; });
    return;
  // `x != x` lets a NaN win and stay, as numpy's maximum/minimum do.
  case ReduceKind::Max:
    std::fill(out, out + outCount, lowestValue<T>());
    reduceWalk(in, out, l, [](T &v, T x) { v = (x > v || x != x) ? x : v; });
    return;
  case ReduceKind::Min:
    std::fill(out, out + outCount, highestValue<T>());
    reduceWalk(in, out, l, [](T &v, T x) { v = (x < v || x != x) ? x : v; });
    return;
  }
}

template <typename T> Error reduce(const KernelContext &ctx, ReduceKind kind) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto r = checkedReduceAxes(ctx);
  if (!r)
    return r.takeError();
  const std::vector<int64_t> *axes = &r->Axes;
  if (r->Noop) {
    std::memcpy(y.Data, x.Data, x.sizeInBytes());
    return Error::success();
  }
  SmallVector<bool, 6> reduced(x.rank(), axes->empty());
  for (int64_t a : *axes)
    reduced[a] = true;
  int64_t outCount = 1;
  for (unsigned i = 0; i < x.rank(); ++i)
    outCount *= reduced[i] ? 1 : x.Shape[i];
  if (y.numElements() != outCount)
    return ctx.unsupported("result type does not match the reduced axes");
  T *out = y.as<T>();
  reduceInto(kind, x.as<T>(), out, outCount, planReduce(x.Shape, reduced));
  if (kind == ReduceKind::Mean) {
    T scale = T(outCount) / T(x.numElements());
    for (int64_t i = 0; i < outCount; ++i)
      out[i] *= scale;
  }
  return Error::success();
}

template <ReduceKind Kind> Error reduceKernel(const KernelContext &ctx) {
  DType t = ctx.Inputs[0].Type;
  if (t == DType::F32)
    return reduce<float>(ctx, Kind);
  if (t == DType::F64)
    return reduce<double>(ctx, Kind);
  // Integer means would round; nothing in ONNX's tests or our models needs
  // them, so only the exact integer reductions are offered.
  if (Kind != ReduceKind::Mean && t == DType::I32)
    return reduce<int32_t>(ctx, Kind);
  if (Kind != ReduceKind::Mean && t == DType::I64)
    return reduce<int64_t>(ctx, Kind);
  // Bool maximum and minimum (opset 20): any and all, on the 0/1 bytes; the
  // minimum of nothing starts at 255 and is true.
  if ((Kind == ReduceKind::Max || Kind == ReduceKind::Min) &&
      t == DType::Bool) {
    if (Error e = reduce<uint8_t>(ctx, Kind))
      return e;
    uint8_t *out = ctx.Outputs[0].as<uint8_t>();
    for (int64_t i = 0; i < ctx.Outputs[0].numElements(); ++i)
      out[i] = out[i] != 0;
    return Error::success();
  }
  return ctx.unsupported("element type " + dtypeName(t) + " is not supported");
}

template <typename T> Error argMax(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto s = argMaxSplit(ctx);
  if (!s)
    return s.takeError();
  bool last = ctx.attrInt("select_last_index", 0);
  std::vector<T> best(s->Inner);
  for (int64_t o = 0; o < s->Outer; ++o) {
    const T *in = x.as<T>() + o * s->N * s->Inner;
    int64_t *out = y.as<int64_t>() + o * s->Inner;
    std::copy(in, in + s->Inner, best.begin());
    std::fill(out, out + s->Inner, 0);
    for (int64_t k = 1; k < s->N; ++k) {
      const T *row = in + k * s->Inner;
      for (int64_t i = 0; i < s->Inner; ++i) {
        bool better = last ? row[i] >= best[i] : row[i] > best[i];
        best[i] = better ? row[i] : best[i];
        out[i] = better ? k : out[i];
      }
    }
  }
  return Error::success();
}

Error argMaxKernel(const KernelContext &ctx) {
  switch (ctx.Inputs[0].Type) {
  case DType::F32:
    return argMax<float>(ctx);
  case DType::F64:
    return argMax<double>(ctx);
  case DType::I32:
    return argMax<int32_t>(ctx);
  case DType::I64:
    return argMax<int64_t>(ctx);
  default:
    return ctx.unsupported("element type " + dtypeName(ctx.Inputs[0].Type) +
                           " is not supported");
  }
}

/// Softmax (or log-softmax) of `n` contiguous elements.
template <typename T> void softmaxRow(const T *x, T *y, int64_t n, bool log) {
  T max = lowestValue<T>();
  if constexpr (std::is_same_v<T, float>)
    max = std::max(max, maxArray(x, n));
  else
    for (int64_t k = 0; k < n; ++k)
      max = std::max(max, x[k]);
  T sum = 0;
  if constexpr (std::is_same_v<T, float>) {
    sum = expShifted(x, max, y, n); // vectorized (kernels/cpu/VecMath.h)
  } else {
    for (int64_t k = 0; k < n; ++k) {
      y[k] = std::exp(x[k] - max);
      sum += y[k];
    }
  }
  // (x - max) - log(sum), not x - (max + log(sum)): near large logits the
  // latter rounds log(sum) away in f32.
  if (log) {
    T logSum = std::log(sum);
    for (int64_t k = 0; k < n; ++k)
      y[k] = (x[k] - max) - logSum;
    return;
  }
  T inv = T(1) / sum;
  for (int64_t k = 0; k < n; ++k)
    y[k] *= inv;
}

/// Softmax along the middle axis of one [N, Inner] block, a row of `Inner`
/// at a time so that the inner loops stay contiguous. `max` and `sum` are
/// scratch of size Inner.
template <typename T>
void softmaxStrided(const T *x, T *y, int64_t n, int64_t inner, bool log,
                    T *max, T *sum) {
  std::copy(x, x + inner, max);
  for (int64_t k = 1; k < n; ++k)
    for (int64_t i = 0; i < inner; ++i)
      max[i] = std::max(max[i], x[k * inner + i]);
  std::fill(sum, sum + inner, T(0));
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = 0; i < inner; ++i) {
      y[k * inner + i] = std::exp(x[k * inner + i] - max[i]);
      sum[i] += y[k * inner + i];
    }
  if (log) {
    for (int64_t i = 0; i < inner; ++i)
      sum[i] = std::log(sum[i]);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i)
        y[k * inner + i] = (x[k * inner + i] - max[i]) - sum[i];
    return;
  }
  for (int64_t i = 0; i < inner; ++i)
    sum[i] = T(1) / sum[i];
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = 0; i < inner; ++i)
      y[k * inner + i] *= sum[i];
}

template <typename T> Error softmax(const KernelContext &ctx, bool log) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto s = softmaxSplit(ctx);
  if (!s)
    return s.takeError();
  if (y.numElements() == 0) // an empty axis (or any empty dimension)
    return Error::success();
  // Each outer block is independent (its sums are its own): blocks split
  // across the kernel threads give the same bits on any number of them.
  int64_t block = s->N * s->Inner;
  parallelFor(s->Outer, std::max<int64_t>(1, kParallelGrain / block),
              [&](int64_t begin, int64_t end) {
                std::vector<T> scratch(s->Inner == 1 ? 0 : 2 * s->Inner);
                for (int64_t o = begin; o < end; ++o) {
                  const T *in = x.as<T>() + o * block;
                  T *out = y.as<T>() + o * block;
                  if (s->Inner == 1)
                    softmaxRow(in, out, s->N, log);
                  else
                    softmaxStrided(in, out, s->N, s->Inner, log, scratch.data(),
                                   scratch.data() + s->Inner);
                }
              });
  return Error::success();
}

Error softmaxKernel(const KernelContext &ctx) {
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[0].Type, softmax, ctx,
                           /*log=*/false);
}

Error logSoftmaxKernel(const KernelContext &ctx) {
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[0].Type, softmax, ctx,
                           /*log=*/true);
}

} // namespace

void headroom::cpu::registerReduceKernels() {
  registerKernel(OpKind::ReduceSum, reduceKernel<ReduceKind::Sum>,
                 FloatSupport::F32F64);
  registerKernel(OpKind::ReduceMean, reduceKernel<ReduceKind::Mean>,
                 FloatSupport::F32F64);
  registerKernel(OpKind::ReduceMax, reduceKernel<ReduceKind::Max>,
                 FloatSupport::F32F64);
  registerKernel(OpKind::ReduceMin, reduceKernel<ReduceKind::Min>,
                 FloatSupport::F32F64);
  registerKernel(OpKind::ReduceProd, reduceKernel<ReduceKind::Prod>,
                 FloatSupport::F32F64);
  registerKernel(OpKind::ArgMax, argMaxKernel, FloatSupport::F32F64);
  registerKernel(OpKind::Softmax, softmaxKernel, FloatSupport::F32F64);
  registerKernel(OpKind::LogSoftmax, logSoftmaxKernel, FloatSupport::F32F64);
}
