//===- Elementwise.cu - Elementwise CUDA kernels --------------------------===//
//
// Unary math, broadcasting binary arithmetic and comparisons, the variadic
// Max/Min/Sum, Where, Cast and Dropout: one thread per result element, with
// kernels/cpu/Elementwise.cpp's semantics (integer arithmetic wraps, integer
// division by zero gives 0, Max/Min propagate NaN, Cast saturates, Dropout
// draws the CPU's masks bit for bit). f16 and bf16 compute in float.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/ElementwiseCheck.h"
#include "kernels/cuda/Launch.h"
#include "kernels/cuda/Math.h"

#include "compiler/Types.h"

using namespace headroom;
using namespace headroom::cuda;
using llvm::Error;

namespace {

//===----------------------------------------------------------------------===//
// Scalar semantics (kernels/common/ScalarOps.inc, shared with kernels/cpu)
//===----------------------------------------------------------------------===//

#include "kernels/common/ScalarOps.inc"

//===----------------------------------------------------------------------===//
// Bodies
//===----------------------------------------------------------------------===//

template <typename T, typename Op> struct UnaryBody {
  const T *X;
  T *Y;
  Op F;
  HR_HD void operator()(int64_t i) const { st(Y, i, F(ld(X, i))); }
};

template <typename A, typename B, typename O, typename Op> struct BinaryBody {
  const A *X;
  const B *Y;
  O *Z;
  Broadcast<2> Bc;
  Op F;
  HR_HD void operator()(int64_t i) const {
    st(Z, i, F(ld(X, Bc.offset(0, i)), ld(Y, Bc.offset(1, i))));
  }
};

template <typename A, typename B, typename O, typename Op>
Error launchBinary(const KernelContext &ctx, const TensorView &a,
                   const TensorView &b, const TensorView &out, Op op) {
  BinaryBody<A, B, O, Op> body{a.as<A>(), b.as<B>(), out.as<O>(), {}, op};
  if (!makeBroadcast<2>(out.Shape, {a.Shape, b.Shape}, body.Bc))
    return ctx.unsupported("more than 8 dimensions after merging");
  forEach(ctx, out.numElements(), body);
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Unary kernels
//===----------------------------------------------------------------------===//

template <typename Op> struct UnaryApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    UnaryBody<T, Op> body{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(), Op{}};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

/// IsNaN, and IsInf {detect_positive, detect_negative}: a float operand, a
/// bool result. NaN is the value unequal to itself; an infinity is the value
/// whose difference with itself is NaN.
template <typename T> struct ClassifyBody {
  const T *X;
  Bool *Y;
  bool Inf, Pos, Neg;
  HR_HD void operator()(int64_t i) const {
    auto v = ld(X, i);
    bool nan = v != v;
    bool inf = !nan && (v - v) != (v - v);
    using C = decltype(v);
    st(Y, i, Inf ? inf && (v > C(0) ? Pos : Neg) : nan);
  }
};

template <bool Inf> struct ClassifyApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    ClassifyBody<T> body{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<Bool>(), Inf,
                         Ctx.attrInt("detect_positive", 1) != 0,
                         Ctx.attrInt("detect_negative", 1) != 0};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

template <bool Inf> Error classifyKernel(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[0].Type,
                                       ClassifyApply<Inf>{ctx});
}

template <typename Op, unsigned Types>
Error unaryKernel(const KernelContext &ctx) {
  return dispatch<Types>(ctx, ctx.Inputs[0].Type, UnaryApply<Op>{ctx});
}

/// A float scalar of a constant operand (Clip's bounds, Dropout's ratio).
Error constantScalar(const KernelContext &ctx, unsigned i, llvm::StringRef what,
                     double &v) {
  auto t = ctx.constant(i, what);
  if (!t)
    return t.takeError();
  if ((*t)->numElements() != 1)
    return ctx.unsupported(what + " must be a scalar, got shape " +
                           shapeString((*t)->type().shape()));
  v = (*t)->getDouble(0);
  return Error::success();
}

template <typename C> struct LeakyReluOp {
  C Alpha;
  HR_HD C operator()(C v) const { return v < C(0) ? Alpha * v : v; }
};
template <typename C> struct ClipOp {
  C Lo, Hi;
  HR_HD C operator()(C v) const {
    C t = v < Lo ? Lo : v;
    return t > Hi ? Hi : t;
  }
};
template <typename C> struct HardSigmoidOp {
  C Alpha, Beta;
  HR_HD C operator()(C v) const {
    C z = Alpha * v + Beta;
    return z < C(0) ? C(0) : (z > C(1) ? C(1) : z);
  }
};

/// Launches UnaryBody<T, Op<Compute>> built by make(Compute) for the types
/// in Types.
template <template <typename> class Op, typename Make> struct ParamUnaryApply {
  const KernelContext &Ctx;
  Make M;
  template <typename T> Error apply() const {
    using C = typename Elem<T>::Compute;
    UnaryBody<T, Op<C>> body{Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(),
                             M.template make<C>()};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

struct MakeLeaky {
  double Alpha;
  template <typename C> LeakyReluOp<C> make() const {
    return {static_cast<C>(Alpha)};
  }
};
struct MakeClip {
  double Lo, Hi;
  template <typename C> ClipOp<C> make() const {
    // An integer type holds the bounds clamped to its range.
    auto bound = [](double v) {
      if constexpr (!std::is_floating_point_v<C>) {
        v = std::max(v, double(std::numeric_limits<C>::lowest()));
        v = std::min(v, double(std::numeric_limits<C>::max()));
      }
      return static_cast<C>(v);
    };
    return {bound(Lo), bound(Hi)};
  }
};
struct MakeHardSigmoid {
  double Alpha, Beta;
  template <typename C> HardSigmoidOp<C> make() const {
    return {static_cast<C>(Alpha), static_cast<C>(Beta)};
  }
};

Error leakyRelu(const KernelContext &ctx) {
  MakeLeaky m{ctx.attrFloat("alpha", 0.01)};
  return dispatch<kernels::FloatTypes>(
      ctx, ctx.Inputs[0].Type, ParamUnaryApply<LeakyReluOp, MakeLeaky>{ctx, m});
}

Error clip(const KernelContext &ctx) {
  MakeClip m{-std::numeric_limits<double>::infinity(),
             std::numeric_limits<double>::infinity()};
  if (ctx.hasInput(1))
    if (Error e = constantScalar(ctx, 1, "min", m.Lo))
      return e;
  if (ctx.hasInput(2))
    if (Error e = constantScalar(ctx, 2, "max", m.Hi))
      return e;
  return dispatch<kernels::FloatTypes | kernels::IntTypes>(
      ctx, ctx.Inputs[0].Type, ParamUnaryApply<ClipOp, MakeClip>{ctx, m});
}

Error hardSigmoid(const KernelContext &ctx) {
  MakeHardSigmoid m{ctx.attrFloat("alpha", 0.2), ctx.attrFloat("beta", 0.5)};
  return dispatch<kernels::FloatTypes>(
      ctx, ctx.Inputs[0].Type,
      ParamUnaryApply<HardSigmoidOp, MakeHardSigmoid>{ctx, m});
}

Error identity(const KernelContext &ctx) {
  copyAsync(ctx, ctx.Outputs[0].Data, ctx.Inputs[0].Data,
            ctx.Outputs[0].sizeInBytes());
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Binary and variadic kernels
//===----------------------------------------------------------------------===//

/// Operands of one type T; the result is T (Compare false) or bool.
template <typename Op, bool Compare> struct BinaryApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    using O = std::conditional_t<Compare, Bool, T>;
    return launchBinary<T, T, O>(Ctx, Ctx.Inputs[0], Ctx.Inputs[1],
                                 Ctx.Outputs[0], Op{});
  }
};

template <typename Op, unsigned Types>
Error binaryKernel(const KernelContext &ctx) {
  return dispatch<Types>(ctx, ctx.Inputs[0].Type, BinaryApply<Op, false>{ctx});
}

template <typename Op, unsigned Types>
Error compareKernel(const KernelContext &ctx) {
  return dispatch<Types>(ctx, ctx.Inputs[0].Type, BinaryApply<Op, true>{ctx});
}

/// Max, Min and Sum: the first two operands into the result, then each
/// further operand folded into it.
template <typename Op> struct VariadicApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    const TensorView &y = Ctx.Outputs[0];
    if (Ctx.Inputs.size() == 1) {
      copyAsync(Ctx, y.Data, Ctx.Inputs[0].Data, y.sizeInBytes());
      return Error::success();
    }
    if (Error e =
            launchBinary<T, T, T>(Ctx, Ctx.Inputs[0], Ctx.Inputs[1], y, Op{}))
      return e;
    for (size_t k = 2; k < Ctx.Inputs.size(); ++k)
      if (Error e = launchBinary<T, T, T>(Ctx, y, Ctx.Inputs[k], y, Op{}))
        return e;
    return Error::success();
  }
};

template <typename Op> Error variadicKernel(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes | kernels::IntTypes>(
      ctx, ctx.Outputs[0].Type, VariadicApply<Op>{ctx});
}

struct PowOp {
  template <typename T, typename E> HR_HD T operator()(T b, E e) const {
    return power(b, e);
  }
};

template <typename T> struct PowExponentApply {
  const KernelContext &Ctx;
  template <typename E> Error apply() const {
    return launchBinary<T, E, T>(Ctx, Ctx.Inputs[0], Ctx.Inputs[1],
                                 Ctx.Outputs[0], PowOp{});
  }
};

struct PowApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    DType e = Ctx.Inputs[1].Type;
    if (e == Ctx.Inputs[0].Type)
      return PowExponentApply<T>{Ctx}.template apply<T>();
    if (e != DType::F32 && e != DType::F64 && e != DType::I32 &&
        e != DType::I64)
      return Ctx.unsupported("an exponent of type " + dtypeName(e) +
                             " is not supported on cuda");
    return dispatch<kernels::FloatTypes | kernels::IntTypes>(
        Ctx, e, PowExponentApply<T>{Ctx});
  }
};

Error powKernel(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes | kernels::IntTypes>(
      ctx, ctx.Inputs[0].Type, PowApply{ctx});
}

template <typename T> struct WhereBody {
  const Bool *C;
  const T *A, *B;
  T *Y;
  Broadcast<3> Bc;
  HR_HD void operator()(int64_t i) const {
    Y[i] = C[Bc.offset(0, i)].Value ? A[Bc.offset(1, i)] : B[Bc.offset(2, i)];
  }
};

template <typename T> Error launchWhere(const KernelContext &ctx) {
  const TensorView &c = ctx.Inputs[0], &a = ctx.Inputs[1], &b = ctx.Inputs[2],
                   &y = ctx.Outputs[0];
  WhereBody<T> body{c.as<Bool>(), a.as<T>(), b.as<T>(), y.as<T>(), {}};
  if (!makeBroadcast<3>(y.Shape, {c.Shape, a.Shape, b.Shape}, body.Bc))
    return ctx.unsupported("more than 8 dimensions after merging");
  forEach(ctx, y.numElements(), body);
  return Error::success();
}

Error where(const KernelContext &ctx) {
  if (ctx.Inputs[0].Type != DType::Bool)
    return ctx.unsupported("condition of type " +
                           dtypeName(ctx.Inputs[0].Type) + " is not supported");
  switch (dtypeSize(ctx.Outputs[0].Type)) {
  case 1:
    return launchWhere<uint8_t>(ctx);
  case 2:
    return launchWhere<uint16_t>(ctx);
  case 4:
    return launchWhere<uint32_t>(ctx);
  case 8:
    return launchWhere<uint64_t>(ctx);
  }
  return ctx.unsupported("element type " + dtypeName(ctx.Outputs[0].Type) +
                         " is not supported");
}

//===----------------------------------------------------------------------===//
// Cast and Dropout
//===----------------------------------------------------------------------===//

template <typename From, typename To> struct CastBody {
  const From *X;
  To *Y;
  HR_HD void operator()(int64_t i) const { Y[i] = convertElem<To>(X[i]); }
};

template <typename From> struct CastToApply {
  const KernelContext &Ctx;
  template <typename To> Error apply() const {
    CastBody<From, To> body{Ctx.Inputs[0].as<From>(), Ctx.Outputs[0].as<To>()};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

struct CastApply {
  const KernelContext &Ctx;
  template <typename From> Error apply() const {
    return dispatch<kernels::AllTypes>(Ctx, Ctx.Outputs[0].Type,
                                       CastToApply<From>{Ctx});
  }
};

Error cast(const KernelContext &ctx) {
  if (Error e = kernels::checkCast(ctx))
    return e;
  return dispatch<kernels::AllTypes>(ctx, ctx.Inputs[0].Type, CastApply{ctx});
}

/// Element i is kept when the top 32 bits of counterHash(seed, i) are >=
/// Threshold, the seed being mixSeed(run seed, *Step, stream): what
/// kernels/cpu computes with the seed its executor derives on the host.
template <typename T> struct DropoutBody {
  const T *X;
  T *Y;
  uint8_t *Mask; // or null
  const uint64_t *Step;
  uint64_t RunSeed, Stream, Threshold;
  double Scale;
  HR_HD void operator()(int64_t i) const {
    uint64_t seed = mixSeed(RunSeed, *Step, Stream);
    bool keep = (counterHash(seed, uint64_t(i)) >> 32) >= Threshold;
    if (Mask)
      Mask[i] = keep;
    using C = typename Elem<T>::Compute;
    // x * 0 rather than 0 for a dropped element: NaN stays NaN.
    st(Y, i, ld(X, i) * (keep ? C(Scale) : C(0)));
  }
};

struct DropoutApply {
  const KernelContext &Ctx;
  uint8_t *Mask;
  uint64_t Threshold;
  double Scale;
  template <typename T> Error apply() const {
    DropoutBody<T> body{
        Ctx.Inputs[0].as<T>(), Ctx.Outputs[0].as<T>(), Mask,      Ctx.Step,
        Ctx.RunSeed,           Ctx.RandomStream,       Threshold, Scale};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

struct FillOnes {
  uint8_t *P;
  HR_HD void operator()(int64_t i) const { P[i] = 1; }
};

Error dropout(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto params =
      kernels::dropoutParams(ctx, [&](unsigned i, const char *name, double &v) {
        return constantScalar(ctx, i, name, v);
      });
  if (!params)
    return params.takeError();
  uint8_t *mask =
      params->HasMask ? static_cast<uint8_t *>(ctx.Outputs[1].Data) : nullptr;
  if (params->Ratio == 0) {
    copyAsync(ctx, y.Data, x.Data, y.sizeInBytes());
    if (mask)
      forEach(ctx, y.numElements(), FillOnes{mask});
    return Error::success();
  }
  return dispatch<kernels::FloatTypes>(
      ctx, x.Type,
      DropoutApply{ctx, mask, params->threshold(), params->scale()});
}

} // namespace

void cuda::registerElementwiseKernels() {
  constexpr unsigned Num = kernels::FloatTypes | kernels::IntTypes,
                     Float = kernels::FloatTypes, Bools = kernels::BoolType,
                     All = kernels::AllTypes;
#include "kernels/common/ElementwiseTable.inc"
  registerKernel(OpKind::Tanh, unaryKernel<TanhOp, Float>);
  registerKernel(OpKind::Sigmoid, unaryKernel<SigmoidOp, Float>);
  registerKernel(OpKind::Erf, unaryKernel<ErfOp, Float>);
}
