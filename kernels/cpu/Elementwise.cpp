//===- Elementwise.cpp - Elementwise CPU kernels --------------------------===//
//
// Unary math, broadcasting binary arithmetic and comparisons, the variadic
// Max/Min/Sum, Where, Cast and Dropout, with ONNX's semantics.
//
// Every loop is templated on the storage type and computes in
// Elem<T>::Compute (kernels/common/KernelUtil.h), so f32/f64/integer loops are
// plain loops the compiler can vectorize, and f16/bf16 compute in float.
// Broadcasting goes through BroadcastLoops, whose rows are contiguous (stride
// 1) or constant (stride 0) in the common cases; binaryRow specializes those.
//
// Integer arithmetic wraps (two's complement) instead of being undefined, and
// integer division by zero gives 0: ONNX leaves both undefined, and a kernel
// must not crash.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/ElementwiseCheck.h"
#include "kernels/common/KernelUtil.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/Parallel.h"
#include "kernels/cpu/VecMath.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

using namespace headroom;
using namespace headroom::cpu;
using llvm::Error;

namespace {

//===----------------------------------------------------------------------===//
// Scalar semantics (kernels/common/ScalarOps.inc, shared with kernels/cuda)
//===----------------------------------------------------------------------===//

#define HR_HD
#define HR_MATH1(NAME, FN)                                                     \
  template <typename T> T NAME(T x) { return std::FN(x); }
#include "kernels/common/Math.def"
#undef HR_MATH1
template <typename T> T mpow(T x, T y) { return std::pow(x, y); }
#include "kernels/common/ScalarOps.inc"
#undef HR_HD

//===----------------------------------------------------------------------===//
// Loops
//===----------------------------------------------------------------------===//

/// y[i] = f(x[i]) over every element; f works on compute types.
template <typename T, typename U, typename F>
void mapUnary(const TensorView &in, const TensorView &out, F f) {
  const T *x = in.as<T>();
  U *y = out.as<U>();
  parallelFor(out.numElements(), kParallelGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      y[i] = Elem<U>::store(f(Elem<T>::load(x[i])));
  });
}

/// o[i] = f(a[i * as], b[i * bs]) for i < n, with the stride combinations
/// that broadcasting produces most written out so that they vectorize.
template <typename A, typename B, typename O, typename F>
void binaryRow(const A *a, int64_t as, const B *b, int64_t bs, O *o, int64_t n,
               F f) {
  auto g = [&](A x, B y) {
    return Elem<O>::store(f(Elem<A>::load(x), Elem<B>::load(y)));
  };
  if (as == 1 && bs == 1) {
    for (int64_t i = 0; i < n; ++i)
      o[i] = g(a[i], b[i]);
  } else if (as == 1 && bs == 0) {
    B y = *b;
    for (int64_t i = 0; i < n; ++i)
      o[i] = g(a[i], y);
  } else if (as == 0 && bs == 1) {
    A x = *a;
    for (int64_t i = 0; i < n; ++i)
      o[i] = g(x, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      o[i] = g(a[i * as], b[i * bs]);
  }
}

/// out = f(a, b) with broadcasting. `out` may be `a` itself (same shape):
/// each element is read before it is written.
template <typename A, typename B, typename O, typename F>
void mapBinary(const TensorView &a, const TensorView &b, const TensorView &out,
               F f) {
  const A *pa = a.as<A>();
  const B *pb = b.as<B>();
  O *po = out.as<O>();
  BroadcastLoops<2> loops(out.Shape, {a.Shape, b.Shape});
  if (loops.dims().size() == 1) { // one row (same shapes, a scalar): split it
    int64_t sa = loops.strides(0)[0], sb = loops.strides(1)[0];
    parallelFor(loops.dims()[0], kParallelGrain, [&](int64_t b, int64_t e) {
      binaryRow(pa + b * sa, sa, pb + b * sb, sb, po + b, e - b, f);
    });
    return;
  }
  loops.forEachRow([&](int64_t o, const BroadcastLoops<2>::Offsets &off,
                       int64_t n, const BroadcastLoops<2>::Offsets &st) {
    binaryRow(pa + off[0], st[0], pb + off[1], st[1], po + o, n, f);
  });
}

/// Copies `in` into `out`, converting each element (Cast's semantics); `out`
/// may have another element type but has the same number of elements.
Error convertInto(const KernelContext &ctx, const TensorView &in,
                  const TensorView &out) {
  return dispatchType<AllTypes>(ctx, in.Type, [&](auto from) {
    using From = typename decltype(from)::type;
    return dispatchType<AllTypes>(ctx, out.Type, [&](auto to) {
      using To = typename decltype(to)::type;
      const From *x = in.as<From>();
      To *y = out.as<To>();
      for (int64_t i = 0, n = out.numElements(); i < n; ++i)
        y[i] = convertElem<To>(x[i]);
      return Error::success();
    });
  });
}

/// Copies `in` to `out` (same type and size), unless they are one buffer.
void copyView(const TensorView &in, const TensorView &out) {
  if (in.Data != out.Data && out.sizeInBytes())
    std::memmove(out.Data, in.Data, out.sizeInBytes());
}

//===----------------------------------------------------------------------===//
// Unary kernels
//===----------------------------------------------------------------------===//

/// A unary kernel applying Op{}(x) to every element of the types in Types.
template <typename Op, unsigned Types>
Error unaryKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  return dispatchType<Types>(ctx, x.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    mapUnary<T, T>(x, y, Op{});
    return Error::success();
  });
}

/// Tanh: f32 through the vectorized polynomial (kernels/cpu/VecMath.h;
/// gelu's tanh in every GPT), the other types element by element.
Error tanhKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (x.Type == DType::F32) {
    const float *px = x.as<float>();
    float *py = y.as<float>();
    parallelFor(y.numElements(), kParallelGrain, [&](int64_t b, int64_t e) {
      tanhArray(px + b, py + b, e - b);
    });
    return Error::success();
  }
  return unaryKernel<TanhOp, FloatTypes>(ctx);
}

/// Erf likewise (gelu in BERT and ViT).
Error erfKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (x.Type == DType::F32) {
    const float *px = x.as<float>();
    float *py = y.as<float>();
    parallelFor(y.numElements(), kParallelGrain,
                [&](int64_t b, int64_t e) { erfArray(px + b, py + b, e - b); });
    return Error::success();
  }
  return unaryKernel<ErfOp, FloatTypes>(ctx);
}

/// Sigmoid likewise (SiLU in every Llama).
Error sigmoidKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (x.Type == DType::F32) {
    const float *px = x.as<float>();
    float *py = y.as<float>();
    parallelFor(y.numElements(), kParallelGrain, [&](int64_t b, int64_t e) {
      sigmoidArray(px + b, py + b, e - b);
    });
    return Error::success();
  }
  return unaryKernel<SigmoidOp, FloatTypes>(ctx);
}

Error leakyRelu(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  double alpha = ctx.attrFloat("alpha", 0.01);
  return dispatchType<FloatTypes>(ctx, x.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Elem<T>::Compute;
    C a = static_cast<C>(alpha);
    mapUnary<T, T>(x, y, [a](C v) { return v < C(0) ? a * v : v; });
    return Error::success();
  });
}

Error readScalar(const KernelContext &ctx, const TensorView &t, double &v);

/// Clip(x, min?, max?) = min(max(x, min), max): a missing bound is no
/// bound; min > max gives max everywhere (numpy.clip's order); NaN stays NaN.
Error clip(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  double lo = -std::numeric_limits<double>::infinity(),
         hi = std::numeric_limits<double>::infinity();
  if (ctx.hasInput(1))
    if (Error e = readScalar(ctx, ctx.Inputs[1], lo))
      return e;
  if (ctx.hasInput(2))
    if (Error e = readScalar(ctx, ctx.Inputs[2], hi))
      return e;
  return dispatchType<FloatTypes | IntTypes>(ctx, x.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Elem<T>::Compute;
    // An integer type holds the bounds clamped to its range (its bounds
    // are integers of that type already when the model is valid).
    auto bound = [](double v) {
      if constexpr (!std::is_floating_point<C>::value) {
        v = std::max(v, double(std::numeric_limits<T>::lowest()));
        v = std::min(v, double(std::numeric_limits<T>::max()));
      }
      return static_cast<C>(v);
    };
    C l = bound(lo), h = bound(hi);
    mapUnary<T, T>(x, y, [l, h](C v) {
      C t = v < l ? l : v;
      return t > h ? h : t;
    });
    return Error::success();
  });
}

/// HardSigmoid(x) = max(0, min(1, alpha*x + beta)).
Error hardSigmoid(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  double alpha = ctx.attrFloat("alpha", 0.2), beta = ctx.attrFloat("beta", 0.5);
  return dispatchType<FloatTypes>(ctx, x.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Elem<T>::Compute;
    C a = static_cast<C>(alpha), b = static_cast<C>(beta);
    mapUnary<T, T>(x, y, [a, b](C v) {
      C z = a * v + b;
      // NaN propagates: neither comparison holds.
      return z < C(0) ? C(0) : (z > C(1) ? C(1) : z);
    });
    return Error::success();
  });
}

Error identity(const KernelContext &ctx) {
  copyView(ctx.Inputs[0], ctx.Outputs[0]);
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Binary and variadic kernels
//===----------------------------------------------------------------------===//

/// A binary kernel whose operands share an element type in Types and whose
/// result has that type too.
template <typename Op, unsigned Types>
Error binaryKernel(const KernelContext &ctx) {
  const TensorView &a = ctx.Inputs[0], &b = ctx.Inputs[1], &y = ctx.Outputs[0];
  return dispatchType<Types>(ctx, a.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    mapBinary<T, T, T>(a, b, y, Op{});
    return Error::success();
  });
}

/// A comparison: operands of one type in Types, a bool result.
template <typename Op, unsigned Types>
Error compareKernel(const KernelContext &ctx) {
  const TensorView &a = ctx.Inputs[0], &b = ctx.Inputs[1], &y = ctx.Outputs[0];
  return dispatchType<Types>(ctx, a.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    mapBinary<T, T, Bool>(a, b, y, Op{});
    return Error::success();
  });
}

/// IsNaN, and IsInf {detect_positive, detect_negative}: a float operand, a
/// bool result.
template <bool Inf> Error classifyKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  bool pos = ctx.attrInt("detect_positive", 1) != 0;
  bool neg = ctx.attrInt("detect_negative", 1) != 0;
  return dispatchType<FloatTypes>(ctx, x.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Elem<T>::Compute;
    mapUnary<T, Bool>(x, y, [=](C v) {
      if (!Inf)
        return std::isnan(v);
      return std::isinf(v) && (v > C(0) ? pos : neg);
    });
    return Error::success();
  });
}

/// Max, Min and Sum of one or more operands: the first is broadcast into the
/// result, then each further operand is folded into it.
template <typename Op> Error variadicKernel(const KernelContext &ctx) {
  const TensorView &y = ctx.Outputs[0];
  return dispatchType<FloatTypes | IntTypes>(ctx, y.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (ctx.Inputs.size() == 1) {
      copyView(ctx.Inputs[0], y);
      return Error::success();
    }
    mapBinary<T, T, T>(ctx.Inputs[0], ctx.Inputs[1], y, Op{});
    for (size_t k = 2; k < ctx.Inputs.size(); ++k)
      mapBinary<T, T, T>(y, ctx.Inputs[k], y, Op{});
    return Error::success();
  });
}

/// Pow: the exponent may have another element type than the base; then it is
/// converted to f64 scratch first (it is usually a scalar or small).
Error powKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &e = ctx.Inputs[1], &y = ctx.Outputs[0];
  std::vector<double> scratch;
  TensorView e64{DType::F64, e.Shape, nullptr};
  if (e.Type != x.Type) {
    scratch.resize(e.numElements());
    e64.Data = scratch.data();
    if (Error err = convertInto(ctx, e, e64))
      return err;
  }
  return dispatchType<FloatTypes | IntTypes>(ctx, x.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto f = [](auto b, auto p) { return power(b, p); };
    if (e.Type == x.Type)
      mapBinary<T, T, T>(x, e, y, f);
    else
      mapBinary<T, double, T>(x, e64, y, f);
    return Error::success();
  });
}

/// Where(cond, a, b): only moves elements, so it dispatches on their size.
template <typename T>
void selectRows(const TensorView &c, const TensorView &a, const TensorView &b,
                const TensorView &out) {
  const Bool *pc = c.as<Bool>();
  const T *pa = a.as<T>(), *pb = b.as<T>();
  T *po = out.as<T>();
  BroadcastLoops<3> loops(out.Shape, {c.Shape, a.Shape, b.Shape});
  loops.forEachRow([&](int64_t o, const BroadcastLoops<3>::Offsets &off,
                       int64_t n, const BroadcastLoops<3>::Offsets &st) {
    const Bool *rc = pc + off[0];
    const T *ra = pa + off[1], *rb = pb + off[2];
    T *ro = po + o;
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i)
        ro[i] = rc[i].Value ? ra[i] : rb[i];
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      ro[i] = rc[i * st[0]].Value ? ra[i * st[1]] : rb[i * st[2]];
  });
}

Error where(const KernelContext &ctx) {
  const TensorView &c = ctx.Inputs[0], &a = ctx.Inputs[1], &b = ctx.Inputs[2],
                   &y = ctx.Outputs[0];
  if (c.Type != DType::Bool)
    return ctx.unsupported("condition of type " + dtypeName(c.Type) +
                           " is not supported");
  switch (dtypeSize(y.Type)) {
  case 1:
    selectRows<uint8_t>(c, a, b, y);
    return Error::success();
  case 2:
    selectRows<uint16_t>(c, a, b, y);
    return Error::success();
  case 4:
    selectRows<uint32_t>(c, a, b, y);
    return Error::success();
  case 8:
    selectRows<uint64_t>(c, a, b, y);
    return Error::success();
  }
  return ctx.unsupported("element type " + dtypeName(y.Type) +
                         " is not supported");
}

//===----------------------------------------------------------------------===//
// Cast and Dropout
//===----------------------------------------------------------------------===//

Error cast(const KernelContext &ctx) {
  if (Error e = checkCast(ctx))
    return e;
  return convertInto(ctx, ctx.Inputs[0], ctx.Outputs[0]);
}

/// The value of a one-element tensor as a double.
Error readScalar(const KernelContext &ctx, const TensorView &t, double &v) {
  if (t.numElements() != 1)
    return ctx.unsupported("expected a scalar, got shape " +
                           shapeString(t.Shape));
  TensorView out{DType::F64, {}, &v};
  return convertInto(ctx, t, out);
}

/// Dropout(data, ratio?, training_mode?) -> (output, mask?). In inference
/// mode output = data and the mask is all true. In training mode element i is
/// kept when the top 32 bits of counterHash(ctx.Seed, i), read as a uniform
/// number in [0, 1), are >= ratio, and output = data * mask / (1 - ratio).
/// ctx.Seed changes every step, as a training run needs, and makes each step
/// replayable; the executor mixes the node's `stream` attribute into it
/// (runtime/cpu/CpuExecutor.cpp), so copies of a node draw the same mask on
/// the same step. ONNX's `seed` attribute is not used.
Error dropout(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto params = dropoutParams(ctx, [&](unsigned i, const char *, double &v) {
    return readScalar(ctx, ctx.Inputs[i], v);
  });
  if (!params)
    return params.takeError();
  bool hasMask = params->HasMask;
  int64_t n = x.numElements();
  if (params->Ratio == 0) {
    copyView(x, y);
    if (hasMask)
      std::memset(ctx.Outputs[1].Data, 1, n);
    return Error::success();
  }
  // keep(i) = hash >> 32 >= threshold, with probability 1 - ratio; computed
  // where it is used, so the kernel needs no scratch.
  uint64_t threshold = params->threshold();
  uint64_t seed = ctx.Seed;
  auto keep = [=](int64_t i) {
    return (counterHash(seed, i) >> 32) >= threshold;
  };
  if (hasMask) {
    auto *mask = static_cast<uint8_t *>(ctx.Outputs[1].Data);
    for (int64_t i = 0; i < n; ++i)
      mask[i] = keep(i);
  }
  double scale = params->scale();
  return dispatchType<FloatTypes>(ctx, x.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Elem<T>::Compute;
    const T *px = x.as<T>();
    T *py = y.as<T>();
    C s = static_cast<C>(scale);
    // x * 0 rather than 0 for a dropped element: NaN stays NaN, as in ONNX.
    for (int64_t i = 0; i < n; ++i)
      py[i] = Elem<T>::store(Elem<T>::load(px[i]) * (keep(i) ? s : C(0)));
    return Error::success();
  });
}

} // namespace

void headroom::cpu::registerElementwiseKernels() {
  constexpr unsigned Num = FloatTypes | IntTypes, Float = FloatTypes,
                     Bools = BoolType, All = AllTypes;
#include "kernels/common/ElementwiseTable.inc"
  registerKernel(OpKind::Tanh, tanhKernel);
  registerKernel(OpKind::Sigmoid, sigmoidKernel);
  registerKernel(OpKind::Erf, erfKernel);
}
