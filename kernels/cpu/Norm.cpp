//===- Norm.cpp - Normalization kernels -----------------------------------===//
//
// LayerNormalization and BatchNormalization (ONNX opset 17) and the gradient
// kernels autodiff emits for them. The gradients recompute the statistics
// from x instead of reading saved ones, so a forward node need not keep its
// optional Mean/InvStdDev outputs alive for the backward pass.
//
// Statistics are accumulated in double whatever the element type: the
// two-pass mean/variance is then accurate for f32 rows of any length, and the
// result is rounded once to the output's type.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/NormCheck.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/Parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace headroom;
using namespace headroom::cpu;

namespace {

bool isF32OrF64(DType t) { return t == DType::F32 || t == DType::F64; }

/// Element i of an f32 or f64 tensor.
double loadElement(const TensorView &t, int64_t i) {
  return t.Type == DType::F32 ? t.as<float>()[i] : t.as<double>()[i];
}

/// An f32 or f64 tensor converted to T (parameters and statistics: small).
template <typename T> std::vector<T> loadAs(const TensorView &t) {
  std::vector<T> out(t.numElements());
  for (int64_t i = 0, e = out.size(); i < e; ++i)
    out[i] = static_cast<T>(loadElement(t, i));
  return out;
}

/// Writes `v` (numElements of `t` values) to an f32 or f64 tensor.
void storeAll(const TensorView &t, const std::vector<double> &v) {
  for (int64_t i = 0, e = v.size(); i < e; ++i) {
    if (t.Type == DType::F32)
      t.as<float>()[i] = static_cast<float>(v[i]);
    else
      t.as<double>()[i] = v[i];
  }
}

/// Mean and 1/sqrt(var + eps) of `n` values (biased variance, two passes).
template <typename T>
void moments(const T *x, int64_t n, double eps, double &mean, double &inv) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += x[i];
  mean = sum / n;
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = x[i] - mean;
    sq += d * d;
  }
  inv = 1.0 / std::sqrt(sq / n + eps);
}

//===----------------------------------------------------------------------===//
// LayerNormalization
//===----------------------------------------------------------------------===//

using RowShape = ops::NormRows;

template <typename T>
llvm::Error layerNorm(const KernelContext &ctx, RowShape s) {
  const T *x = ctx.Inputs[0].as<T>();
  std::vector<T> scale = loadAs<T>(ctx.Inputs[1]);
  std::vector<T> bias =
      ctx.hasInput(2) ? loadAs<T>(ctx.Inputs[2]) : std::vector<T>(s.Cols, T(0));
  T *y = ctx.Outputs[0].as<T>();
  double eps = ctx.attrFloat("epsilon", 1e-5);
  std::vector<double> means(s.Rows), invs(s.Rows);
  // Rows are independent: split across the kernel threads, same bits.
  parallelFor(s.Rows, std::max<int64_t>(1, kParallelGrain / (s.Cols + 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  const T *xr = x + r * s.Cols;
                  T *yr = y + r * s.Cols;
                  moments(xr, s.Cols, eps, means[r], invs[r]);
                  T mean = means[r], inv = invs[r];
                  for (int64_t c = 0; c < s.Cols; ++c)
                    yr[c] = (xr[c] - mean) * inv * scale[c] + bias[c];
                }
              });
  if (const TensorView *m = optionalOutput(ctx, 1))
    storeAll(*m, means);
  if (const TensorView *m = optionalOutput(ctx, 2))
    storeAll(*m, invs);
  return llvm::Error::success();
}

/// LayerNormalization(X, Scale, B?) {axis, epsilon} -> (Y, Mean?, InvStdDev?).
/// Scale and B hold one value per normalized element; stash_type is ignored
/// since the statistics are always computed in double.
llvm::Error layerNormKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  auto s = checkLayerNorm(ctx, /*grad=*/false, isF32OrF64);
  if (!s)
    return s.takeError();
  return HR_DISPATCH_FLOAT(ctx, x.Type, layerNorm, ctx, *s);
}

template <typename T>
llvm::Error layerNormGrad(const KernelContext &ctx, RowShape s) {
  const T *dy = ctx.Inputs[0].as<T>(), *x = ctx.Inputs[1].as<T>();
  std::vector<T> scale = loadAs<T>(ctx.Inputs[2]);
  T *dx = ctx.Outputs[0].as<T>();
  double eps = ctx.attrFloat("epsilon", 1e-5);
  std::vector<double> dscale(s.Cols, 0), dbias(s.Cols, 0);
  std::vector<T> xhat(s.Cols);
  for (int64_t r = 0; r < s.Rows; ++r) {
    const T *xr = x + r * s.Cols, *dyr = dy + r * s.Cols;
    T *dxr = dx + r * s.Cols;
    double mean, inv;
    moments(xr, s.Cols, eps, mean, inv);
    // With g = dy * scale: dx = inv * (g - mean(g) - xhat * mean(g * xhat)).
    double sumG = 0, sumGX = 0;
    for (int64_t c = 0; c < s.Cols; ++c) {
      xhat[c] = (xr[c] - mean) * inv;
      double g = dyr[c] * scale[c];
      sumG += g;
      sumGX += g * xhat[c];
      dscale[c] += dyr[c] * xhat[c];
      dbias[c] += dyr[c];
    }
    T meanG = sumG / s.Cols, meanGX = sumGX / s.Cols, tinv = inv;
    for (int64_t c = 0; c < s.Cols; ++c)
      dxr[c] = tinv * (dyr[c] * scale[c] - meanG - xhat[c] * meanGX);
  }
  storeAll(ctx.Outputs[1], dscale);
  storeAll(ctx.Outputs[2], dbias);
  return llvm::Error::success();
}

/// LayerNormalizationGrad(dy, x, scale) {axis, epsilon} -> (dx, dscale,
/// dbias); dscale and dbias have scale's shape.
llvm::Error layerNormGradKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[1];
  auto s = checkLayerNorm(ctx, /*grad=*/true, isF32OrF64);
  if (!s)
    return s.takeError();
  return HR_DISPATCH_FLOAT(ctx, x.Type, layerNormGrad, ctx, *s);
}

//===----------------------------------------------------------------------===//
// BatchNormalization
//===----------------------------------------------------------------------===//

using ops::ChannelShape;

/// Per-channel mean and biased variance over N and the spatial axes.
template <typename T>
void channelMoments(const T *x, ChannelShape s, std::vector<double> &mean,
                    std::vector<double> &var) {
  mean.assign(s.C, 0);
  var.assign(s.C, 0);
  double count = s.N * s.Spatial;
  for (int64_t c = 0; c < s.C; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < s.N; ++n) {
      const T *p = x + (n * s.C + c) * s.Spatial;
      for (int64_t i = 0; i < s.Spatial; ++i)
        sum += p[i];
    }
    double m = sum / count, sq = 0;
    for (int64_t n = 0; n < s.N; ++n) {
      const T *p = x + (n * s.C + c) * s.Spatial;
      for (int64_t i = 0; i < s.Spatial; ++i)
        sq += (p[i] - m) * (p[i] - m);
    }
    mean[c] = m;
    var[c] = sq / count;
  }
}

/// y = (x - mean[c]) * scale[c] / sqrt(var[c] + eps) + bias[c]. Subtracting
/// the mean first keeps precision when it is large against the deviation.
template <typename T>
void normalizeChannels(const T *x, T *y, ChannelShape s,
                       const std::vector<double> &mean,
                       const std::vector<double> &var, const TensorView &scale,
                       const TensorView &bias, double eps) {
  for (int64_t c = 0; c < s.C; ++c) {
    T mul = loadElement(scale, c) / std::sqrt(var[c] + eps),
      add = loadElement(bias, c), m = mean[c];
    for (int64_t n = 0; n < s.N; ++n) {
      int64_t off = (n * s.C + c) * s.Spatial;
      for (int64_t i = 0; i < s.Spatial; ++i)
        y[off + i] = (x[off + i] - m) * mul + add;
    }
  }
}

template <typename T>
llvm::Error batchNorm(const KernelContext &ctx, ChannelShape s) {
  const T *x = ctx.Inputs[0].as<T>();
  T *y = ctx.Outputs[0].as<T>();
  double eps = ctx.attrFloat("epsilon", 1e-5);
  std::vector<double> mean(s.C), var(s.C);
  if (!ctx.attrInt("training_mode", 0)) {
    if (optionalOutput(ctx, 1) || optionalOutput(ctx, 2))
      return ctx.unsupported("running statistics outputs are only defined "
                             "in training mode");
    for (int64_t c = 0; c < s.C; ++c) {
      mean[c] = loadElement(ctx.Inputs[3], c);
      var[c] = loadElement(ctx.Inputs[4], c);
    }
    normalizeChannels(x, y, s, mean, var, ctx.Inputs[1], ctx.Inputs[2], eps);
    return llvm::Error::success();
  }
  channelMoments(x, s, mean, var);
  normalizeChannels(x, y, s, mean, var, ctx.Inputs[1], ctx.Inputs[2], eps);
  // The running variance is updated with the *unbiased* batch variance, as
  // PyTorch's BatchNorm does (headroom's models come from PyTorch, and the
  // trained model must match it). ONNX's reference and its node tests
  // (test_batchnorm_*_training_mode) use the biased one; those tests are
  // listed in test/unit/cpu_node_exceptions/norm.txt. Normalization itself
  // uses the biased variance in both.
  double momentum = ctx.attrFloat("momentum", 0.9);
  double count = double(s.N) * double(s.Spatial);
  double unbias = count > 1 ? count / (count - 1) : 1.0;
  std::vector<double> running(s.C);
  for (unsigned k : {1u, 2u}) {
    const TensorView *out = optionalOutput(ctx, k);
    if (!out)
      continue;
    const std::vector<double> &batch = k == 1 ? mean : var;
    double scale = k == 1 ? 1.0 : unbias;
    for (int64_t c = 0; c < s.C; ++c)
      running[c] = loadElement(ctx.Inputs[2 + k], c) * momentum +
                   batch[c] * scale * (1 - momentum);
    storeAll(*out, running);
  }
  return llvm::Error::success();
}

/// BatchNormalization(X, scale, B, input_mean, input_var) {epsilon, momentum,
/// training_mode} -> (Y, running_mean?, running_var?).
llvm::Error batchNormKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  auto s = checkBatchNorm(ctx, /*grad=*/false, isF32OrF64);
  if (!s)
    return s.takeError();
  return HR_DISPATCH_FLOAT(ctx, x.Type, batchNorm, ctx, *s);
}

template <typename T>
llvm::Error batchNormGrad(const KernelContext &ctx, ChannelShape s) {
  const T *dy = ctx.Inputs[0].as<T>(), *x = ctx.Inputs[1].as<T>();
  T *dx = ctx.Outputs[0].as<T>();
  double eps = ctx.attrFloat("epsilon", 1e-5);
  std::vector<double> mean, var, dscale(s.C, 0), dbias(s.C, 0);
  channelMoments(x, s, mean, var);
  double count = s.N * s.Spatial;
  for (int64_t c = 0; c < s.C; ++c) {
    double inv = 1.0 / std::sqrt(var[c] + eps), m = mean[c];
    double sumDy = 0, sumDyX = 0;
    for (int64_t n = 0; n < s.N; ++n) {
      int64_t off = (n * s.C + c) * s.Spatial;
      for (int64_t i = 0; i < s.Spatial; ++i) {
        sumDy += dy[off + i];
        sumDyX += dy[off + i] * (x[off + i] - m);
      }
    }
    dbias[c] = sumDy;
    dscale[c] = sumDyX * inv;
    // dx = scale * inv * (dy - mean(dy) - xhat * mean(dy * xhat)).
    double k = loadElement(ctx.Inputs[2], c) * inv;
    T a = k, b = -k * sumDy / count,
      g = -k * dscale[c] * inv / count; // multiplies (x - mean)
    T tm = m;
    for (int64_t n = 0; n < s.N; ++n) {
      int64_t off = (n * s.C + c) * s.Spatial;
      for (int64_t i = 0; i < s.Spatial; ++i)
        dx[off + i] = a * dy[off + i] + b + g * (x[off + i] - tm);
    }
  }
  storeAll(ctx.Outputs[1], dscale);
  storeAll(ctx.Outputs[2], dbias);
  return llvm::Error::success();
}

/// BatchNormalizationGrad(dy, x, scale) {epsilon} -> (dx, dscale, dbias): the
/// gradient of training-mode BatchNormalization (batch statistics).
llvm::Error batchNormGradKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[1];
  auto s = checkBatchNorm(ctx, /*grad=*/true, isF32OrF64);
  if (!s)
    return s.takeError();
  return HR_DISPATCH_FLOAT(ctx, x.Type, batchNormGrad, ctx, *s);
}

} // namespace

void headroom::cpu::registerNormKernels() {
  registerKernel(OpKind::LayerNormalization, layerNormKernel,
                 FloatSupport::F32F64);
  registerKernel(OpKind::LayerNormalizationGrad, layerNormGradKernel,
                 FloatSupport::F32F64);
  registerKernel(OpKind::BatchNormalization, batchNormKernel,
                 FloatSupport::F32F64);
  registerKernel(OpKind::BatchNormalizationGrad, batchNormGradKernel,
                 FloatSupport::F32F64);
}
