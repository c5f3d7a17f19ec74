//===- ConvPool.cu - Convolution and pooling CUDA kernels -----------------===//
//
// Conv, MaxPool, AveragePool and GlobalAveragePool and the gradient kernels
// autodiff emits for them, with kernels/cpu/ConvPool.cpp's semantics: the
// same attributes and defaults, the same window geometry (resolved on the
// host and checked against the result shape the compiler computed) and the
// same errors. The gradient ops carry their forward op's attributes; their
// result type gives the shape of the forward operand they differentiate.
//
// The cuda target plans no workspace for these (an im2col matrix would be
// tensor-sized), so every kernel is direct.
//  - Conv: a thread per output element, looping over its group's input
//    channels and the kernel taps inside the input.
//  - ConvGradInput: a thread per dx element gathering the (output, tap)
//    pairs that read it, so no atomics and a fixed summation order.
//  - ConvGradWeight: a block per weight element, summing dy * x over the
//    batch and the outputs whose tap lies inside the input.
//  - MaxPool, AveragePool: a thread per output element.
//  - MaxPoolGrad, AveragePoolGrad: a thread per dx element gathering the
//    windows that contain it, in ascending output order, as the CPU's
//    scatter adds them. MaxPoolGrad recomputes each such window's argmax
//    (the first maximum in row-major window order, the CPU's rule for ties)
//    instead of scattering with atomics: the windows containing one input
//    are few, and the result is deterministic and rounds like the CPU's.
//  - GlobalAveragePool: a block per [N, C] plane.
//
// Spatial geometry is padded to three axes with leading unit axes (size 1,
// kernel 1, stride 1, no padding), so one instantiation serves 1-D, 2-D and
// 3-D windows; more spatial axes, which the CPU also takes, are refused.
//
//===----------------------------------------------------------------------===//
#include "compiler/ops/ConvPool.h"
#include "kernels/common/ReduceCheck.h"
#include "kernels/cuda/Launch.h"

#include "compiler/Types.h"

#include "llvm/ADT/SmallVector.h"

using namespace headroom;
using namespace headroom::cuda;
using llvm::Error;

namespace {

/// Spatial axes the device geometry holds.
constexpr int kAxes = 3;

/// ceil(a / b) for b > 0 and any a.
HR_HD inline int64_t ceilDiv(int64_t a, int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -(-a / b);
}
HR_HD inline int64_t clampTo(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

//===----------------------------------------------------------------------===//
// Window geometry
//===----------------------------------------------------------------------===//

/// The spatial geometry of a convolution or pooling, passed by value to the
/// device: per axis, the input index of tap k of output o is
/// o * S - PadBegin + k * D.
struct Win {
  int64_t In[kAxes], K[kAxes], Out[kAxes], S[kAxes], D[kAxes];
  int64_t PadBegin[kAxes], PadEnd[kAxes];
  int64_t InSize, KSize, OutSize;
};

/// The taps [Lo, Hi) of an output's window along one axis that lie inside
/// the input; tap k reads input index Start + k * D.
struct Span {
  int64_t Start, Lo, Hi;
};

HR_HD inline Span span(const Win &w, int a, int64_t o) {
  int64_t s = o * w.S[a] - w.PadBegin[a], d = w.D[a], k = w.K[a];
  int64_t lo = s >= 0 ? 0 : (ceilDiv(-s, d) < k ? ceilDiv(-s, d) : k);
  return {s, lo, clampTo(ceilDiv(w.In[a] - s, d), lo, k)};
}

/// The window's taps inside the padded input along axis a (AveragePool's
/// count_include_pad divisor).
HR_HD inline int64_t paddedTaps(const Win &w, int a, int64_t o) {
  int64_t s = o * w.S[a] - w.PadBegin[a];
  return clampTo(ceilDiv(w.In[a] + w.PadEnd[a] - s, w.D[a]), 0, w.K[a]);
}

/// Row-major multi-index of flat index p over `dims`.
HR_HD inline void split(int64_t p, const int64_t *dims, int64_t *index) {
  for (int a = kAxes - 1; a >= 0; --a) {
    int64_t q = p / dims[a];
    index[a] = p - q * dims[a];
    p = q;
  }
}

HR_HD inline int64_t flat(const int64_t *index, const int64_t *dims) {
  int64_t p = 0;
  for (int a = 0; a < kAxes; ++a)
    p = p * dims[a] + index[a];
  return p;
}

/// The plane offset of the first maximum of output `o`'s window (row-major
/// window order, later taps only when strictly greater: the CPU's rule).
/// The window has a tap inside the input (the host checks).
template <typename T>
HR_HD int64_t windowArgmax(const T *x, const Win &w, const int64_t *o) {
  Span s0 = span(w, 0, o[0]), s1 = span(w, 1, o[1]), s2 = span(w, 2, o[2]);
  int64_t best = -1;
  typename Elem<T>::Compute bestV{};
  for (int64_t k0 = s0.Lo; k0 < s0.Hi; ++k0) {
    int64_t r0 = s0.Start + k0 * w.D[0];
    for (int64_t k1 = s1.Lo; k1 < s1.Hi; ++k1) {
      int64_t r1 = r0 * w.In[1] + s1.Start + k1 * w.D[1];
      for (int64_t k2 = s2.Lo; k2 < s2.Hi; ++k2) {
        int64_t off = r1 * w.In[2] + s2.Start + k2 * w.D[2];
        auto v = ld(x, off);
        if (best < 0 || v > bestV) {
          best = off;
          bestV = v;
        }
      }
    }
  }
  return best;
}

/// The outputs [Lo, Hi] along axis a whose window may hold input index i;
/// output o does when (i + PadBegin - o * S) is a multiple of D.
struct Candidates {
  int64_t Lo, Hi;
};

HR_HD inline Candidates candidates(const Win &w, int a, int64_t i) {
  int64_t t = i + w.PadBegin[a];
  int64_t lo = ceilDiv(t - (w.K[a] - 1) * w.D[a], w.S[a]);
  int64_t hi = t / w.S[a];
  return {lo < 0 ? 0 : lo, hi < w.Out[a] - 1 ? hi : w.Out[a] - 1};
}

HR_HD inline bool holds(const Win &w, int a, int64_t i, int64_t o) {
  return (i + w.PadBegin[a] - o * w.S[a]) % w.D[a] == 0;
}

//===----------------------------------------------------------------------===//
// Host-side geometry (kernels/cpu's makeWindow)
//===----------------------------------------------------------------------===//

/// The device's fixed-rank copy of window `g`.
Error fillWin(const KernelContext &ctx, const ops::Window &g, Win &w) {
  unsigned rank = g.rank();
  if (rank > unsigned(kAxes))
    return ctx.unsupported(llvm::Twine(rank) +
                           " spatial axes are not supported on cuda (at "
                           "most 3)");
  // Leading unit axes pad the geometry to kAxes.
  unsigned lead = kAxes - rank;
  for (unsigned a = 0; a < unsigned(kAxes); ++a) {
    bool unit = a < lead;
    unsigned b = a - lead;
    w.In[a] = unit ? 1 : g.In[b];
    w.K[a] = unit ? 1 : g.Kernel[b];
    w.Out[a] = unit ? 1 : g.Out[b];
    w.S[a] = unit ? 1 : g.Strides[b];
    w.D[a] = unit ? 1 : g.Dilations[b];
    w.PadBegin[a] = unit ? 0 : g.PadBegin[b];
    w.PadEnd[a] = unit ? 0 : g.PadEnd[b];
  }
  w.InSize = w.KSize = w.OutSize = 1;
  for (int a = 0; a < kAxes; ++a) {
    w.InSize *= w.In[a];
    w.KSize *= w.K[a];
    w.OutSize *= w.Out[a];
  }
  return Error::success();
}

/// Whether some output's window has no tap inside the input (Padded false)
/// or inside the padded input (Padded true). Windows are products of
/// per-axis spans, so one empty span along any axis makes one.
bool hasEmptyWindow(const Win &w, bool padded) {
  if (w.OutSize == 0)
    return false;
  for (int a = 0; a < kAxes; ++a)
    for (int64_t o = 0; o < w.Out[a]; ++o) {
      Span s = span(w, a, o);
      if (padded ? paddedTaps(w, a, o) == 0 : s.Hi == s.Lo)
        return true;
    }
  return false;
}

//===----------------------------------------------------------------------===//
// Conv and its gradients
//===----------------------------------------------------------------------===//

/// Conv's operands: x [N, C, In...], w [M, C/G, Kernel...], y [N, M, Out...].
struct ConvShape {
  int64_t N = 0, C = 0, M = 0, G = 1, Cg = 0, Mg = 0;
  Win W;
};

Error convShape(const KernelContext &ctx, const TensorView &x,
                const TensorView &w, const TensorView &y, ConvShape &s) {
  auto g = orUnsupported(
      ctx, ops::convShape(ctx.Attrs, x.type(), w.type(), y.type()));
  if (!g)
    return g.takeError();
  s.N = g->N;
  s.C = g->C;
  s.M = g->M;
  s.G = g->G;
  s.Cg = g->cg();
  s.Mg = g->mg();
  return fillWin(ctx, g->W, s.W);
}

/// y[n, m, o] = b[m] + sum over c < Cg and taps k inside the input of
/// x[n, g Cg + c, o S - PadBegin + k D] w[m, c, k], g = m / Mg.
template <typename T> struct ConvBody {
  const T *X, *W, *B;
  T *Y;
  Win G;
  int64_t C, M, Cg, Mg;
  HR_HD void operator()(int64_t i) const {
    using A = Accum<T>;
    int64_t nm = i / G.OutSize, p = i - nm * G.OutSize;
    int64_t m = nm % M, n = nm / M;
    int64_t o[kAxes];
    split(p, G.Out, o);
    Span s0 = span(G, 0, o[0]), s1 = span(G, 1, o[1]), s2 = span(G, 2, o[2]);
    const T *x = X + (n * C + (m / Mg) * Cg) * G.InSize;
    const T *w = W + m * Cg * G.KSize;
    A acc = 0;
    for (int64_t c = 0; c < Cg; ++c, x += G.InSize, w += G.KSize)
      for (int64_t k0 = s0.Lo; k0 < s0.Hi; ++k0) {
        int64_t r0 = s0.Start + k0 * G.D[0];
        for (int64_t k1 = s1.Lo; k1 < s1.Hi; ++k1) {
          int64_t r1 = r0 * G.In[1] + s1.Start + k1 * G.D[1];
          int64_t t1 = (k0 * G.K[1] + k1) * G.K[2];
          for (int64_t k2 = s2.Lo; k2 < s2.Hi; ++k2)
            acc += A(ld(x, r1 * G.In[2] + s2.Start + k2 * G.D[2])) *
                   A(ld(w, t1 + k2));
        }
      }
    if (B)
      acc += A(ld(B, m));
    st(Y, i, acc);
  }
};

struct ConvApply {
  const KernelContext &Ctx;
  const ConvShape &S;
  template <typename T> Error apply() const {
    ConvBody<T> body{Ctx.Inputs[0].as<T>(),
                     Ctx.Inputs[1].as<T>(),
                     Ctx.hasInput(2) ? Ctx.Inputs[2].as<T>() : nullptr,
                     Ctx.Outputs[0].as<T>(),
                     S.W,
                     S.C,
                     S.M,
                     S.Cg,
                     S.Mg};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

/// Conv(X, W, B?) {auto_pad, dilations, group, kernel_shape, pads, strides}.
Error convKernel(const KernelContext &ctx) {
  ConvShape s;
  if (Error e = convShape(ctx, ctx.Inputs[0], ctx.Inputs[1], ctx.Outputs[0], s))
    return e;
  if (ctx.hasInput(2) && (ctx.Inputs[2].Type != ctx.Inputs[0].Type ||
                          ctx.Inputs[2].numElements() != s.M))
    return ctx.unsupported("bias of type " + ctx.Inputs[2].type().str() +
                           " does not match " + llvm::Twine(s.M) +
                           " output channels");
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[0].Type,
                                       ConvApply{ctx, s});
}

/// dx[n, c, i] = sum over taps k and outputs o with o S - PadBegin + k D = i
/// of sum over m < Mg of dy[n, g Mg + m, o] w[g Mg + m, c - g Cg, k].
template <typename T> struct ConvGradInputBody {
  const T *DY, *W;
  T *DX;
  Win G;
  int64_t C, M, Cg, Mg;
  HR_HD void operator()(int64_t i) const {
    using A = Accum<T>;
    int64_t nc = i / G.InSize, p = i - nc * G.InSize;
    int64_t c = nc % C, n = nc / C, g = c / Cg;
    int64_t x[kAxes];
    split(p, G.In, x);
    const T *dy = DY + (n * M + g * Mg) * G.OutSize;
    const T *w = W + (g * Mg * Cg + (c - g * Cg)) * G.KSize;
    int64_t wStride = Cg * G.KSize;
    A acc = 0;
    // t = o S for tap k: it falls as k grows, so the loops stop at t < 0.
    for (int64_t k0 = 0; k0 < G.K[0]; ++k0) {
      int64_t t0 = x[0] + G.PadBegin[0] - k0 * G.D[0];
      if (t0 < 0)
        break;
      int64_t o0 = t0 / G.S[0];
      if (o0 * G.S[0] != t0 || o0 >= G.Out[0])
        continue;
      for (int64_t k1 = 0; k1 < G.K[1]; ++k1) {
        int64_t t1 = x[1] + G.PadBegin[1] - k1 * G.D[1];
        if (t1 < 0)
          break;
        int64_t o1 = t1 / G.S[1];
        if (o1 * G.S[1] != t1 || o1 >= G.Out[1])
          continue;
        for (int64_t k2 = 0; k2 < G.K[2]; ++k2) {
          int64_t t2 = x[2] + G.PadBegin[2] - k2 * G.D[2];
          if (t2 < 0)
            break;
          int64_t o2 = t2 / G.S[2];
          if (o2 * G.S[2] != t2 || o2 >= G.Out[2])
            continue;
          int64_t op = (o0 * G.Out[1] + o1) * G.Out[2] + o2;
          int64_t kp = (k0 * G.K[1] + k1) * G.K[2] + k2;
          for (int64_t m = 0; m < Mg; ++m)
            acc += A(ld(dy, m * G.OutSize + op)) * A(ld(w, m * wStride + kp));
        }
      }
    }
    st(DX, i, acc);
  }
};

struct ConvGradInputApply {
  const KernelContext &Ctx;
  const ConvShape &S;
  template <typename T> Error apply() const {
    ConvGradInputBody<T> body{Ctx.Inputs[0].as<T>(),
                              Ctx.Inputs[1].as<T>(),
                              Ctx.Outputs[0].as<T>(),
                              S.W,
                              S.C,
                              S.M,
                              S.Cg,
                              S.Mg};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

/// ConvGradInput(dy, w) {Conv's attributes} -> dx, x's type.
Error convGradInputKernel(const KernelContext &ctx) {
  ConvShape s;
  if (Error e = convShape(ctx, ctx.Outputs[0], ctx.Inputs[1], ctx.Inputs[0], s))
    return e;
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[0].Type,
                                       ConvGradInputApply{ctx, s});
}

/// Row (m, c, k) of dw [M, Cg, Kernel...]: the sum over samples n and the
/// outputs o whose tap k lies inside the input of dy[n, m, o] x[n, g Cg + c,
/// o S - PadBegin + k D]. Only those outputs are enumerated, so the block's
/// loop has no padding branch.
template <typename T> struct ConvGradWeightRow {
  const T *DY, *X;
  T *DW;
  Win G;
  int64_t N, C, M, Cg, Mg;
  HR_HD void operator()(int64_t row, const Row &r) const {
    using A = Accum<T>;
    int64_t mc = row / G.KSize, kp = row - mc * G.KSize;
    int64_t c = mc % Cg, m = mc / Cg;
    int64_t k[kAxes];
    split(kp, G.K, k);
    // Along axis a, output o reads input o S + off; lo/hi bound the o
    // inside the input (kernels/cpu's insideRange).
    int64_t off[kAxes], lo[kAxes], ext[kAxes];
    for (int a = 0; a < kAxes; ++a) {
      off[a] = k[a] * G.D[a] - G.PadBegin[a];
      int64_t l = off[a] >= 0 ? 0 : ceilDiv(-off[a], G.S[a]);
      l = l < G.Out[a] ? l : G.Out[a];
      lo[a] = l;
      ext[a] = clampTo(ceilDiv(G.In[a] - off[a], G.S[a]), l, G.Out[a]) - l;
    }
    const T *dy = DY + m * G.OutSize;
    const T *x = X + ((m / Mg) * Cg + c) * G.InSize;
    int64_t dyStride = M * G.OutSize, xStride = C * G.InSize;
    const Win &w = G;
    A sum =
        r.template sum<A>(N * ext[0] * ext[1] * ext[2], [&](int64_t j) -> A {
          int64_t q2 = j % ext[2];
          j /= ext[2];
          int64_t q1 = j % ext[1];
          j /= ext[1];
          int64_t q0 = j % ext[0], n = j / ext[0];
          int64_t o0 = lo[0] + q0, o1 = lo[1] + q1, o2 = lo[2] + q2;
          int64_t op = (o0 * w.Out[1] + o1) * w.Out[2] + o2;
          int64_t ip =
              ((o0 * w.S[0] + off[0]) * w.In[1] + o1 * w.S[1] + off[1]) *
                  w.In[2] +
              o2 * w.S[2] + off[2];
          return A(ld(dy, n * dyStride + op)) * A(ld(x, n * xStride + ip));
        });
    T *dw = DW;
    r.each(1, [&](int64_t) { st(dw, row, sum); });
  }
};

struct ConvGradWeightApply {
  const KernelContext &Ctx;
  const ConvShape &S;
  template <typename T> Error apply() const {
    ConvGradWeightRow<T> body{Ctx.Inputs[0].as<T>(),
                              Ctx.Inputs[1].as<T>(),
                              Ctx.Outputs[0].as<T>(),
                              S.W,
                              S.N,
                              S.C,
                              S.M,
                              S.Cg,
                              S.Mg};
    forEachRow(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

/// ConvGradWeight(dy, x) {Conv's attributes} -> dw, w's type.
Error convGradWeightKernel(const KernelContext &ctx) {
  ConvShape s;
  if (Error e = convShape(ctx, ctx.Inputs[1], ctx.Outputs[0], ctx.Inputs[0], s))
    return e;
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[0].Type,
                                       ConvGradWeightApply{ctx, s});
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

/// The window of a pool with input `x` [N, C, In...] and output `y`
/// [N, C, Out...]; kernel_shape is required.
Error poolWindow(const KernelContext &ctx, const TensorView &x,
                 const TensorView &y, Win &w) {
  auto g = orUnsupported(ctx, ops::poolWindow(ctx.Attrs, x.type(), y.type()));
  if (!g)
    return g.takeError();
  return fillWin(ctx, *g, w);
}

/// The window of a pool whose windows must all read some input.
Error nonEmptyPoolWindow(const KernelContext &ctx, const TensorView &x,
                         const TensorView &y, Win &w) {
  if (Error e = poolWindow(ctx, x, y, w))
    return e;
  if (hasEmptyWindow(w, /*padded=*/false))
    return ctx.unsupported("a window lies entirely in the padding");
  return Error::success();
}

/// y[plane, o] = the window's first maximum; Indices (if given) its flat
/// index over the tensor, row-major or (ColumnMajor) column-major within
/// the plane.
template <typename T> struct MaxPoolBody {
  const T *X;
  T *Y;
  int64_t *Indices;
  Win G;
  bool ColumnMajor;
  HR_HD void operator()(int64_t i) const {
    int64_t plane = i / G.OutSize, p = i - plane * G.OutSize;
    int64_t o[kAxes];
    split(p, G.Out, o);
    const T *x = X + plane * G.InSize;
    int64_t best = windowArgmax(x, G, o);
    Y[i] = x[best];
    if (!Indices)
      return;
    int64_t off = best;
    if (ColumnMajor) {
      int64_t index[kAxes];
      split(best, G.In, index);
      off = 0;
      for (int a = kAxes - 1; a >= 0; --a)
        off = off * G.In[a] + index[a];
    }
    Indices[i] = plane * G.InSize + off;
  }
};

struct MaxPoolApply {
  const KernelContext &Ctx;
  const Win &W;
  template <typename T> Error apply() const {
    bool indices = Ctx.Outputs.size() > 1 && Ctx.Outputs[1].present();
    MaxPoolBody<T> body{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(),
                        indices ? Ctx.Outputs[1].as<int64_t>() : nullptr, W,
                        Ctx.attrInt("storage_order", 0) == 1};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

/// MaxPool(X) {auto_pad, ceil_mode, dilations, kernel_shape, pads,
/// storage_order, strides} -> (Y, Indices?).
Error maxPoolKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  if (ctx.Outputs[0].Type != x.Type)
    return ctx.unsupported("Y must have X's element type");
  if (ctx.Outputs.size() > 1 && ctx.Outputs[1].present() &&
      (ctx.Outputs[1].type() != ctx.Outputs[0].type().withDType(DType::I64)))
    return ctx.unsupported("Indices must be i64 with Y's shape");
  Win w;
  if (Error e = nonEmptyPoolWindow(ctx, x, ctx.Outputs[0], w))
    return e;
  // The CPU's integer MaxPool takes u8 and i8 only.
  if (!isFloat(x.Type) && x.Type != DType::U8 && x.Type != DType::I8)
    return ctx.unsupported("element type " + dtypeName(x.Type) +
                           " is not supported");
  return dispatch<kernels::FloatTypes | kernels::IntTypes>(
      ctx, x.Type, MaxPoolApply{ctx, w});
}

/// dx[plane, i] = the sum, in ascending output order, of dy[plane, o] over
/// the windows o that contain i and whose first maximum is i.
template <typename T> struct MaxPoolGradBody {
  const T *DY, *X;
  T *DX;
  Win G;
  HR_HD void operator()(int64_t i) const {
    using A = Accum<T>;
    int64_t plane = i / G.InSize, p = i - plane * G.InSize;
    int64_t x[kAxes];
    split(p, G.In, x);
    const T *xp = X + plane * G.InSize, *dy = DY + plane * G.OutSize;
    Candidates c0 = candidates(G, 0, x[0]), c1 = candidates(G, 1, x[1]),
               c2 = candidates(G, 2, x[2]);
    A acc = 0;
    int64_t o[kAxes];
    for (o[0] = c0.Lo; o[0] <= c0.Hi; ++o[0]) {
      if (!holds(G, 0, x[0], o[0]))
        continue;
      for (o[1] = c1.Lo; o[1] <= c1.Hi; ++o[1]) {
        if (!holds(G, 1, x[1], o[1]))
          continue;
        for (o[2] = c2.Lo; o[2] <= c2.Hi; ++o[2])
          if (holds(G, 2, x[2], o[2]) && windowArgmax(xp, G, o) == p)
            acc += A(ld(dy, flat(o, G.Out)));
      }
    }
    st(DX, i, acc);
  }
};

struct MaxPoolGradApply {
  const KernelContext &Ctx;
  const Win &W;
  template <typename T> Error apply() const {
    MaxPoolGradBody<T> body{Ctx.Inputs[0].as<T>(), Ctx.Inputs[1].as<T>(),
                            Ctx.Outputs[0].as<T>(), W};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

/// MaxPoolGrad(dy, x) {MaxPool's attributes} -> dx: each dy goes to the
/// first maximum of its window, summed where windows overlap.
Error maxPoolGradKernel(const KernelContext &ctx) {
  const TensorView &dy = ctx.Inputs[0], &x = ctx.Inputs[1];
  if (dy.Type != x.Type || ctx.Outputs[0].type() != x.type())
    return ctx.unsupported("dy and dx must have x's element type");
  Win w;
  if (Error e = nonEmptyPoolWindow(ctx, x, dy, w))
    return e;
  return dispatch<kernels::FloatTypes>(ctx, x.Type, MaxPoolGradApply{ctx, w});
}

/// What output o of an AveragePool divides by: its window's taps inside the
/// input, or (IncludePad) inside the padded input.
HR_HD inline int64_t poolDivisor(const Win &w, const int64_t *o,
                                 bool includePad) {
  int64_t div = 1;
  for (int a = 0; a < kAxes; ++a) {
    if (includePad) {
      div *= paddedTaps(w, a, o[a]);
    } else {
      Span s = span(w, a, o[a]);
      div *= s.Hi - s.Lo;
    }
  }
  return div;
}

/// The window of an AveragePool or its gradient: an error when some window
/// has nothing to divide by.
Error averagePoolWindow(const KernelContext &ctx, const TensorView &x,
                        const TensorView &y, Win &w, bool &includePad) {
  if (Error e = poolWindow(ctx, x, y, w))
    return e;
  includePad = ctx.attrInt("count_include_pad", 0) != 0;
  if (hasEmptyWindow(w, includePad))
    return ctx.unsupported("a window lies entirely in the padding");
  return Error::success();
}

template <typename T> struct AveragePoolBody {
  const T *X;
  T *Y;
  Win G;
  bool IncludePad;
  HR_HD void operator()(int64_t i) const {
    using A = Accum<T>;
    int64_t plane = i / G.OutSize, p = i - plane * G.OutSize;
    int64_t o[kAxes];
    split(p, G.Out, o);
    Span s0 = span(G, 0, o[0]), s1 = span(G, 1, o[1]), s2 = span(G, 2, o[2]);
    const T *x = X + plane * G.InSize;
    A sum = 0;
    for (int64_t k0 = s0.Lo; k0 < s0.Hi; ++k0) {
      int64_t r0 = s0.Start + k0 * G.D[0];
      for (int64_t k1 = s1.Lo; k1 < s1.Hi; ++k1) {
        int64_t r1 = r0 * G.In[1] + s1.Start + k1 * G.D[1];
        for (int64_t k2 = s2.Lo; k2 < s2.Hi; ++k2)
          sum += A(ld(x, r1 * G.In[2] + s2.Start + k2 * G.D[2]));
      }
    }
    st(Y, i, sum / A(poolDivisor(G, o, IncludePad)));
  }
};

struct AveragePoolApply {
  const KernelContext &Ctx;
  const Win &W;
  bool IncludePad;
  template <typename T> Error apply() const {
    AveragePoolBody<T> body{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(), W,
                            IncludePad};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

/// AveragePool(X) {auto_pad, ceil_mode, count_include_pad, kernel_shape,
/// pads, strides} -> Y.
Error averagePoolKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  if (ctx.Outputs[0].Type != x.Type)
    return ctx.unsupported("Y must have X's element type");
  Win w;
  bool includePad;
  if (Error e = averagePoolWindow(ctx, x, ctx.Outputs[0], w, includePad))
    return e;
  return dispatch<kernels::FloatTypes>(ctx, x.Type,
                                       AveragePoolApply{ctx, w, includePad});
}

/// dx[plane, i] = the sum, in ascending output order, of dy[plane, o] /
/// divisor(o) over the windows o that contain i.
template <typename T> struct AveragePoolGradBody {
  const T *DY;
  T *DX;
  Win G;
  bool IncludePad;
  HR_HD void operator()(int64_t i) const {
    using A = Accum<T>;
    int64_t plane = i / G.InSize, p = i - plane * G.InSize;
    int64_t x[kAxes];
    split(p, G.In, x);
    const T *dy = DY + plane * G.OutSize;
    Candidates c0 = candidates(G, 0, x[0]), c1 = candidates(G, 1, x[1]),
               c2 = candidates(G, 2, x[2]);
    A acc = 0;
    int64_t o[kAxes];
    for (o[0] = c0.Lo; o[0] <= c0.Hi; ++o[0]) {
      if (!holds(G, 0, x[0], o[0]))
        continue;
      for (o[1] = c1.Lo; o[1] <= c1.Hi; ++o[1]) {
        if (!holds(G, 1, x[1], o[1]))
          continue;
        for (o[2] = c2.Lo; o[2] <= c2.Hi; ++o[2])
          if (holds(G, 2, x[2], o[2]))
            acc += A(ld(dy, flat(o, G.Out))) / A(poolDivisor(G, o, IncludePad));
      }
    }
    st(DX, i, acc);
  }
};

struct AveragePoolGradApply {
  const KernelContext &Ctx;
  const Win &W;
  bool IncludePad;
  template <typename T> Error apply() const {
    AveragePoolGradBody<T> body{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(),
                                W, IncludePad};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

/// AveragePoolGrad(dy) {AveragePool's attributes} -> dx, the input's type:
/// each dy spread evenly, dy / divisor, over its window's input taps.
Error averagePoolGradKernel(const KernelContext &ctx) {
  const TensorView &dy = ctx.Inputs[0], &dx = ctx.Outputs[0];
  if (dy.Type != dx.Type)
    return ctx.unsupported("dy and dx must have one element type");
  Win w;
  bool includePad;
  if (Error e = averagePoolWindow(ctx, dx, dy, w, includePad))
    return e;
  return dispatch<kernels::FloatTypes>(
      ctx, dx.Type, AveragePoolGradApply{ctx, w, includePad});
}

/// y[plane] = the mean of the plane's Size elements.
template <typename T> struct GlobalAveragePoolRow {
  const T *X;
  T *Y;
  int64_t Size;
  HR_HD void operator()(int64_t row, const Row &r) const {
    using A = Accum<T>;
    const T *x = X + row * Size;
    A sum = r.template sum<A>(Size, [&](int64_t j) { return A(ld(x, j)); });
    T *y = Y;
    int64_t size = Size;
    r.each(1, [&](int64_t) { st(y, row, sum / A(size)); });
  }
};

struct GlobalAveragePoolApply {
  const KernelContext &Ctx;
  int64_t Planes, Size;
  template <typename T> Error apply() const {
    GlobalAveragePoolRow<T> body{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(),
                                 Size};
    forEachRow(Ctx, Planes, body);
    return Error::success();
  }
};

/// GlobalAveragePool(X [N, C, spatial...]) -> Y [N, C, 1...].
Error globalAveragePoolKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  auto p = kernels::globalPoolPlanes(ctx);
  if (!p)
    return p.takeError();
  int64_t planes = p->Planes, size = p->Size;
  return dispatch<kernels::FloatTypes>(
      ctx, x.Type, GlobalAveragePoolApply{ctx, planes, size});
}

} // namespace

void cuda::registerConvPoolKernels() {
  registerKernel(OpKind::Conv, convKernel);
  registerKernel(OpKind::ConvGradInput, convGradInputKernel);
  registerKernel(OpKind::ConvGradWeight, convGradWeightKernel);
  registerKernel(OpKind::MaxPool, maxPoolKernel);
  registerKernel(OpKind::MaxPoolGrad, maxPoolGradKernel);
  registerKernel(OpKind::AveragePool, averagePoolKernel);
  registerKernel(OpKind::AveragePoolGrad, averagePoolGradKernel);
  registerKernel(OpKind::GlobalAveragePool, globalAveragePoolKernel);
}
