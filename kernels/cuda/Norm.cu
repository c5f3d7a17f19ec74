//===- Norm.cu - Normalization CUDA kernels -------------------------------===//
//
// LayerNormalization, BatchNormalization and their gradients, with
// kernels/cpu/Norm.cpp's semantics: two-pass mean and biased variance, the
// gradients recomputing the statistics from x, the running variance updated
// with the unbiased batch variance. Statistics accumulate in Accum<T> (float
// for f32/f16/bf16, double for f64) where the CPU uses double; parameters,
// statistics and parameter gradients may be of any float type, as the CPU's
// widening of f16/bf16 lets them be.
//
// No kernel takes a workspace, so each keeps what it reduces within one
// block:
//  - LayerNormalization: a block per row (statistics, then the row).
//  - BatchNormalization(Grad) in training: a block per channel, which
//    reduces over N and the spatial axes and then writes the channel's
//    elements itself (its statistics have nowhere else to live); inference is
//    one thread per element.
//  - LayerNormalizationGrad's dscale/dbias are column sums over the rows,
//    which need each row's statistics: a first row pass writes them into
//    dx's buffer (dx is rewritten last), a column pass sums dy and dy * x̂
//    with a block per tile of 16 bytes of columns (each warp reads whole
//    rows' segments, and model widths give enough tiles to fill the GPU),
//    and a last row pass writes dx. The column sums need no atomics, so
//    they are the same on every run.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/NormCheck.h"
#include "kernels/cuda/Launch.h"
#include "kernels/cuda/Math.h"

#include "compiler/Types.h"

using namespace headroom;
using namespace headroom::cuda;
using llvm::Error;

namespace {

//===----------------------------------------------------------------------===//
// Operands of any float type
//===----------------------------------------------------------------------===//

enum class FloatKind : uint8_t { F32, F64, F16, BF16 };

bool isFloatKind(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 ||
         t == DType::BF16;
}

/// A parameter, statistics or parameter-gradient buffer of any float type,
/// read and written in the kernel's compute type (a uniform branch per
/// element: these operands are small next to x). Null when absent.
struct FloatPtr {
  void *P = nullptr;
  FloatKind Kind = FloatKind::F32;

  HR_HD explicit operator bool() const { return P != nullptr; }

  template <typename C> HR_HD C load(int64_t i) const {
    switch (Kind) {
    case FloatKind::F32:
      return C(static_cast<const float *>(P)[i]);
    case FloatKind::F64:
      return C(static_cast<const double *>(P)[i]);
    case FloatKind::F16:
      return C(ld(static_cast<const Half *>(P), i));
    default:
      return C(ld(static_cast<const BFloat16 *>(P), i));
    }
  }

  template <typename C> HR_HD void store(int64_t i, C v) const {
    switch (Kind) {
    case FloatKind::F32:
      static_cast<float *>(P)[i] = float(v);
      return;
    case FloatKind::F64:
      static_cast<double *>(P)[i] = double(v);
      return;
    case FloatKind::F16:
      st(static_cast<Half *>(P), i, float(v));
      return;
    default:
      st(static_cast<BFloat16 *>(P), i, float(v));
    }
  }
};

/// The FloatPtr of `t` (checked to be a float type), or a null one.
FloatPtr floatPtr(const TensorView *t) {
  FloatPtr p;
  if (!t || !t->present())
    return p;
  p.P = t->Data;
  switch (t->Type) {
  case DType::F64:
    p.Kind = FloatKind::F64;
    break;
  case DType::F16:
    p.Kind = FloatKind::F16;
    break;
  case DType::BF16:
    p.Kind = FloatKind::BF16;
    break;
  default:
    p.Kind = FloatKind::F32;
  }
  return p;
}

/// Mean and biased variance of g(j) for j < n (two passes), for every
/// thread of the block.
template <typename A, typename G>
HR_HD void moments(const Row &r, int64_t n, G g, A &mean, A &var) {
  A m = r.sum<A>(n, g) / A(n);
  A sq = r.sum<A>(n, [&](int64_t j) {
    A d = g(j) - m;
    return d * d;
  });
  mean = m;
  var = sq / A(n);
}

/// 1/sqrt(var + eps).
template <typename A> HR_HD A invStd(A var, A eps) {
  return A(1) / msqrt(var + eps);
}

//===----------------------------------------------------------------------===//
// LayerNormalization
//===----------------------------------------------------------------------===//

using RowShape = ops::NormRows;

template <typename T> struct LayerNormBody {
  const T *X;
  T *Y;
  FloatPtr Scale, Bias, Mean, Inv;
  int64_t Cols;
  Accum<T> Eps;

  HR_HD void operator()(int64_t row, const Row &r) const {
    using C = typename Elem<T>::Compute;
    using A = Accum<T>;
    const T *x = X + row * Cols;
    T *y = Y + row * Cols;
    A mean, var;
    moments(
        r, Cols, [&](int64_t j) { return A(ld(x, j)); }, mean, var);
    A inv = invStd(var, Eps);
    C m = C(mean), s = C(inv);
    r.each(Cols, [&](int64_t j) {
      C b = Bias ? Bias.load<C>(j) : C(0);
      st(y, j, (ld(x, j) - m) * s * Scale.load<C>(j) + b);
    });
    if (Mean || Inv)
      r.each(1, [&](int64_t) {
        if (Mean)
          Mean.store(row, mean);
        if (Inv)
          Inv.store(row, inv);
      });
  }
};

struct LayerNormApply {
  const KernelContext &Ctx;
  RowShape S;
  template <typename T> Error apply() const {
    LayerNormBody<T> body{Ctx.Inputs[0].as<T>(),
                          Ctx.Outputs[0].as<T>(),
                          floatPtr(&Ctx.Inputs[1]),
                          Ctx.hasInput(2) ? floatPtr(&Ctx.Inputs[2])
                                          : FloatPtr(),
                          floatPtr(optionalOutput(Ctx, 1)),
                          floatPtr(optionalOutput(Ctx, 2)),
                          S.Cols,
                          Accum<T>(Ctx.attrFloat("epsilon", 1e-5))};
    forEachRow(Ctx, S.Rows, body);
    return Error::success();
  }
};

/// LayerNormalization(X, Scale, B?) {axis, epsilon} -> (Y, Mean?, InvStdDev?).
Error layerNorm(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  auto s = checkLayerNorm(ctx, /*grad=*/false, isFloatKind);
  if (!s)
    return s.takeError();
  return dispatch<kernels::FloatTypes>(ctx, x.Type, LayerNormApply{ctx, *s});
}

/// Writes each row's mean and 1/sqrt(var + eps) to Stats[2 * row] and
/// Stats[2 * row + 1], for the column pass.
template <typename T> struct RowStatsBody {
  const T *X;
  Accum<T> *Stats;
  int64_t Cols;
  Accum<T> Eps;

  HR_HD void operator()(int64_t row, const Row &r) const {
    using A = Accum<T>;
    const T *x = X + row * Cols;
    A mean, var;
    moments(
        r, Cols, [&](int64_t j) { return A(ld(x, j)); }, mean, var);
    r.each(1, [&](int64_t) {
      Stats[2 * row] = mean;
      Stats[2 * row + 1] = invStd(var, Eps);
    });
  }
};

/// dscale = sum over rows of dy * x̂, dbias = sum of dy, for a tile of
/// kTileCols columns: thread t sums column t % kTileCols over every
/// kLanes-th row from t / kTileCols, and the tile's first threads add up
/// the lanes. The emulator runs the block's threads one after the other
/// with the same partition, so it adds in the GPU's order. Without Stats
/// (rows too narrow to hold them in dx) a thread computes its rows' own.
template <typename T> struct ParamGradBody {
  static constexpr int kTileCols = 16 / int(sizeof(T));
  static constexpr int kLanes = kBlockThreads / kTileCols;
  const T *Dy, *X;
  const Accum<T> *Stats;
  FloatPtr DScale, DBias;
  int64_t Rows, Cols;
  Accum<T> Eps;

  HR_HD void rowStats(int64_t row, Accum<T> &mean, Accum<T> &inv) const {
    using A = Accum<T>;
    if (Stats) {
      mean = Stats[2 * row];
      inv = Stats[2 * row + 1];
      return;
    }
    const T *x = X + row * Cols;
    A sum = 0, sq = 0;
    for (int64_t j = 0; j < Cols; ++j)
      sum += A(ld(x, j));
    mean = sum / A(Cols);
    for (int64_t j = 0; j < Cols; ++j) {
      A d = A(ld(x, j)) - mean;
      sq += d * d;
    }
    inv = invStd(sq / A(Cols), Eps);
  }

  HR_HD void partial(int64_t tile, int t, Accum<T> &ds, Accum<T> &db) const {
    using C = typename Elem<T>::Compute;
    using A = Accum<T>;
    A s = 0, b = 0;
    int64_t c = tile * kTileCols + t % kTileCols;
    if (c < Cols)
      for (int64_t row = t / kTileCols, i = row * Cols + c; row < Rows;
           row += kLanes, i += kLanes * Cols) {
        A mean, inv;
        rowStats(row, mean, inv);
        C dy = ld(Dy, i), xhat = C((A(ld(X, i)) - mean) * inv);
        s += A(dy * xhat);
        b += A(dy);
      }
    ds = s;
    db = b;
  }

  HR_HD void finish(int64_t tile, int k, const Accum<T> *ds,
                    const Accum<T> *db) const {
    using A = Accum<T>;
    int64_t c = tile * kTileCols + k;
    if (c >= Cols)
      return;
    A s = 0, b = 0;
    for (int l = 0; l < kLanes; ++l) {
      s += ds[l * kTileCols + k];
      b += db[l * kTileCols + k];
    }
    DScale.store(c, s);
    DBias.store(c, b);
  }

  HR_HD void operator()(int64_t tile, const Row &) const {
#if HR_ON_DEVICE
    __shared__ Accum<T> ds[kBlockThreads], db[kBlockThreads];
    partial(tile, threadIdx.x, ds[threadIdx.x], db[threadIdx.x]);
    __syncthreads();
    if (threadIdx.x < kTileCols)
      finish(tile, threadIdx.x, ds, db);
    __syncthreads(); // the block's next tile reuses ds and db
#else
    Accum<T> ds[kBlockThreads], db[kBlockThreads];
    for (int t = 0; t < kBlockThreads; ++t)
      partial(tile, t, ds[t], db[t]);
    for (int k = 0; k < kTileCols; ++k)
      finish(tile, k, ds, db);
#endif
  }
};

/// With g = dy * scale: dx = inv * (g - mean(g) - x̂ * mean(g * x̂)).
template <typename T> struct LayerNormGradBody {
  const T *Dy, *X;
  T *Dx;
  FloatPtr Scale;
  int64_t Cols;
  Accum<T> Eps;

  HR_HD void operator()(int64_t row, const Row &r) const {
    using C = typename Elem<T>::Compute;
    using A = Accum<T>;
    const T *x = X + row * Cols, *dy = Dy + row * Cols;
    T *dx = Dx + row * Cols;
    A mean, var;
    moments(
        r, Cols, [&](int64_t j) { return A(ld(x, j)); }, mean, var);
    A inv = invStd(var, Eps);
    auto xhat = [&](int64_t j) { return C((A(ld(x, j)) - mean) * inv); };
    auto g = [&](int64_t j) { return ld(dy, j) * Scale.load<C>(j); };
    A sumG = r.sum<A>(Cols, [&](int64_t j) { return A(g(j)); });
    A sumGX = r.sum<A>(Cols, [&](int64_t j) { return A(g(j)) * A(xhat(j)); });
    C meanG = C(sumG / A(Cols)), meanGX = C(sumGX / A(Cols)), tinv = C(inv);
    r.each(Cols, [&](int64_t j) {
      st(dx, j, tinv * (g(j) - meanG - xhat(j) * meanGX));
    });
  }
};

struct LayerNormGradApply {
  const KernelContext &Ctx;
  RowShape S;
  template <typename T> Error apply() const {
    const T *dy = Ctx.Inputs[0].as<T>(), *x = Ctx.Inputs[1].as<T>();
    T *dx = Ctx.Outputs[0].as<T>();
    Accum<T> eps = Accum<T>(Ctx.attrFloat("epsilon", 1e-5));
    // dx holds the rows' statistics until the column pass has read them,
    // when it is large enough (dx's buffer is aligned for any element type).
    using A = Accum<T>;
    A *stats = S.Cols * int64_t(sizeof(T)) >= 2 * int64_t(sizeof(A))
                   ? reinterpret_cast<A *>(dx)
                   : nullptr;
    if (stats)
      forEachRow(Ctx, S.Rows, RowStatsBody<T>{x, stats, S.Cols, eps});
    ParamGradBody<T> params{dy,
                            x,
                            stats,
                            floatPtr(&Ctx.Outputs[1]),
                            floatPtr(&Ctx.Outputs[2]),
                            S.Rows,
                            S.Cols,
                            eps};
    int64_t tiles = (S.Cols + ParamGradBody<T>::kTileCols - 1) /
                    ParamGradBody<T>::kTileCols;
    forEachRow(Ctx, tiles, params);
    forEachRow(
        Ctx, S.Rows,
        LayerNormGradBody<T>{dy, x, dx, floatPtr(&Ctx.Inputs[2]), S.Cols, eps});
    return Error::success();
  }
};

/// LayerNormalizationGrad(dy, x, scale) {axis, epsilon} -> (dx, dscale,
/// dbias); dscale and dbias have scale's shape.
Error layerNormGrad(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[1];
  auto s = checkLayerNorm(ctx, /*grad=*/true, isFloatKind);
  if (!s)
    return s.takeError();
  return dispatch<kernels::FloatTypes>(ctx, x.Type,
                                       LayerNormGradApply{ctx, *s});
}

//===----------------------------------------------------------------------===//
// BatchNormalization
//===----------------------------------------------------------------------===//

using ops::ChannelShape;

/// The offset of a channel's j-th element (j < N * Spatial), in 32-bit
/// arithmetic when the tensor allows (64-bit division is slow on the GPU).
struct ChannelIndex {
  int64_t Spatial, Stride; // Stride: C * Spatial
  bool Narrow;

  HR_HD int64_t operator()(int64_t c, int64_t j) const {
    if (Narrow) {
      uint32_t q = uint32_t(j) / uint32_t(Spatial);
      return int64_t(q) * Stride + c * Spatial +
             (uint32_t(j) - q * uint32_t(Spatial));
    }
    int64_t q = j / Spatial;
    return q * Stride + c * Spatial + (j - q * Spatial);
  }
};

ChannelIndex channelIndex(ChannelShape s) {
  int64_t count = s.N * s.Spatial;
  return {s.Spatial, s.C * s.Spatial,
          count <= std::numeric_limits<uint32_t>::max() &&
              s.Spatial <= std::numeric_limits<uint32_t>::max()};
}

/// Training mode: a block per channel computes the batch statistics, writes
/// the channel's y and the running statistics.
template <typename T> struct BatchNormTrainBody {
  const T *X;
  T *Y;
  FloatPtr Scale, Bias, InMean, InVar, RunMean, RunVar;
  ChannelIndex Idx;
  int64_t Count;
  Accum<T> Eps;
  double Momentum, Unbias;

  HR_HD void operator()(int64_t c, const Row &r) const {
    using C = typename Elem<T>::Compute;
    using A = Accum<T>;
    A mean, var;
    moments(
        r, Count, [&](int64_t j) { return A(ld(X, Idx(c, j))); }, mean, var);
    C mul = C(Scale.load<A>(c) / msqrt(var + Eps)), add = Bias.load<C>(c),
      m = C(mean);
    r.each(Count, [&](int64_t j) {
      int64_t i = Idx(c, j);
      st(Y, i, (ld(X, i) - m) * mul + add);
    });
    if (RunMean || RunVar)
      r.each(1, [&](int64_t) {
        if (RunMean)
          RunMean.store(c, InMean.load<double>(c) * Momentum +
                               double(mean) * (1 - Momentum));
        if (RunVar)
          RunVar.store(c, InVar.load<double>(c) * Momentum +
                              double(var) * Unbias * (1 - Momentum));
      });
  }
};

/// Inference mode: one thread per element, with the given statistics.
template <typename T> struct BatchNormInferBody {
  const T *X;
  T *Y;
  FloatPtr Scale, Bias, Mean, Var;
  int64_t C, Spatial;
  Accum<T> Eps;

  HR_HD void operator()(int64_t i) const {
    using Cm = typename Elem<T>::Compute;
    using A = Accum<T>;
    int64_t c = (i / Spatial) % C;
    Cm mul = Cm(Scale.load<A>(c) / msqrt(Var.load<A>(c) + Eps)),
       add = Bias.load<Cm>(c), m = Mean.load<Cm>(c);
    st(Y, i, (ld(X, i) - m) * mul + add);
  }
};

struct BatchNormApply {
  const KernelContext &Ctx;
  ChannelShape S;
  template <typename T> Error apply() const {
    const T *x = Ctx.Inputs[0].as<T>();
    T *y = Ctx.Outputs[0].as<T>();
    Accum<T> eps = Accum<T>(Ctx.attrFloat("epsilon", 1e-5));
    FloatPtr scale = floatPtr(&Ctx.Inputs[1]), bias = floatPtr(&Ctx.Inputs[2]),
             mean = floatPtr(&Ctx.Inputs[3]), var = floatPtr(&Ctx.Inputs[4]);
    if (!Ctx.attrInt("training_mode", 0)) {
      if (optionalOutput(Ctx, 1) || optionalOutput(Ctx, 2))
        return Ctx.unsupported("running statistics outputs are only defined "
                               "in training mode");
      forEach(Ctx, Ctx.Outputs[0].numElements(),
              BatchNormInferBody<T>{x, y, scale, bias, mean, var, S.C,
                                    S.Spatial, eps});
      return Error::success();
    }
    // The running variance takes the unbiased batch variance, as PyTorch's
    // BatchNorm does (see kernels/cpu/Norm.cpp).
    double count = double(S.N) * double(S.Spatial);
    BatchNormTrainBody<T> body{x,
                               y,
                               scale,
                               bias,
                               mean,
                               var,
                               floatPtr(optionalOutput(Ctx, 1)),
                               floatPtr(optionalOutput(Ctx, 2)),
                               channelIndex(S),
                               S.N * S.Spatial,
                               eps,
                               Ctx.attrFloat("momentum", 0.9),
                               count > 1 ? count / (count - 1) : 1.0};
    forEachRow(Ctx, S.C, body);
    return Error::success();
  }
};

/// BatchNormalization(X, scale, B, input_mean, input_var) {epsilon, momentum,
/// training_mode} -> (Y, running_mean?, running_var?).
Error batchNorm(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  auto s = checkBatchNorm(ctx, /*grad=*/false, isFloatKind);
  if (!s)
    return s.takeError();
  return dispatch<kernels::FloatTypes>(ctx, x.Type, BatchNormApply{ctx, *s});
}

/// A block per channel: the statistics, sum(dy) and sum(dy * (x - mean)),
/// then dx = scale * inv * (dy - mean(dy) - x̂ * mean(dy * x̂)).
template <typename T> struct BatchNormGradBody {
  const T *Dy, *X;
  T *Dx;
  FloatPtr Scale, DScale, DBias;
  ChannelIndex Idx;
  int64_t Count;
  Accum<T> Eps;

  HR_HD void operator()(int64_t c, const Row &r) const {
    using C = typename Elem<T>::Compute;
    using A = Accum<T>;
    A mean, var;
    moments(
        r, Count, [&](int64_t j) { return A(ld(X, Idx(c, j))); }, mean, var);
    A inv = invStd(var, Eps);
    A sumDy = r.sum<A>(Count, [&](int64_t j) { return A(ld(Dy, Idx(c, j))); });
    A sumDyX = r.sum<A>(Count, [&](int64_t j) {
      int64_t i = Idx(c, j);
      return A(ld(Dy, i)) * (A(ld(X, i)) - mean);
    });
    A dscale = sumDyX * inv, k = Scale.load<A>(c) * inv;
    C a = C(k), b = C(-k * sumDy / A(Count)),
      g = C(-k * dscale * inv / A(Count)), m = C(mean);
    r.each(Count, [&](int64_t j) {
      int64_t i = Idx(c, j);
      st(Dx, i, a * ld(Dy, i) + b + g * (ld(X, i) - m));
    });
    r.each(1, [&](int64_t) {
      DScale.store(c, dscale);
      DBias.store(c, sumDy);
    });
  }
};

struct BatchNormGradApply {
  const KernelContext &Ctx;
  ChannelShape S;
  template <typename T> Error apply() const {
    BatchNormGradBody<T> body{Ctx.Inputs[0].as<T>(),
                              Ctx.Inputs[1].as<T>(),
                              Ctx.Outputs[0].as<T>(),
                              floatPtr(&Ctx.Inputs[2]),
                              floatPtr(&Ctx.Outputs[1]),
                              floatPtr(&Ctx.Outputs[2]),
                              channelIndex(S),
                              S.N * S.Spatial,
                              Accum<T>(Ctx.attrFloat("epsilon", 1e-5))};
    forEachRow(Ctx, S.C, body);
    return Error::success();
  }
};

/// BatchNormalizationGrad(dy, x, scale) {epsilon} -> (dx, dscale, dbias): the
/// gradient of training-mode BatchNormalization (batch statistics).
Error batchNormGrad(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[1];
  auto s = checkBatchNorm(ctx, /*grad=*/true, isFloatKind);
  if (!s)
    return s.takeError();
  return dispatch<kernels::FloatTypes>(ctx, x.Type,
                                       BatchNormGradApply{ctx, *s});
}

} // namespace

void cuda::registerNormKernels() {
  registerKernel(OpKind::LayerNormalization, layerNorm);
  registerKernel(OpKind::LayerNormalizationGrad, layerNormGrad);
  registerKernel(OpKind::BatchNormalization, batchNorm);
  registerKernel(OpKind::BatchNormalizationGrad, batchNormGrad);
}
