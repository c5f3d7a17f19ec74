//===- Elementwise.cu - Elementwise CUDA kernels --------------------------===//
//
// Unary math, broadcasting binary arithmetic and comparisons, the variadic
// Max/Min/Sum, Where, Cast and Dropout: one thread per result element, with
// kernels/cpu/Elementwise.cpp's semantics (integer arithmetic wraps, integer
// division by zero gives 0, Max/Min propagate NaN, Cast saturates, Dropout
// draws the CPU's masks bit for bit). f16 and bf16 compute in float.
//
//===----------------------------------------------------------------------===//
#include "kernels/cuda/Launch.h"
#include "kernels/cuda/Math.h"

#include "compiler/Types.h"

using namespace headroom;
using namespace headroom::cuda;
using llvm::Error;

namespace {

//===----------------------------------------------------------------------===//
// Scalar semantics
//===----------------------------------------------------------------------===//

template <typename T>
using WrapType = std::common_type_t<std::make_unsigned_t<T>, unsigned>;

template <typename T> HR_HD T wrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return T(WrapType<T>(a) + WrapType<T>(b));
  else
    return a + b;
}
template <typename T> HR_HD T wrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return T(WrapType<T>(a) - WrapType<T>(b));
  else
    return a - b;
}
template <typename T> HR_HD T wrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return T(WrapType<T>(a) * WrapType<T>(b));
  else
    return a * b;
}
template <typename T> HR_HD T wrapNeg(T a) { return wrapSub(T(0), a); }

template <typename T> HR_HD T divide(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0)
      return 0;
    if constexpr (std::is_signed_v<T>)
      if (b == T(-1))
        return wrapNeg(a);
  }
  return a / b;
}

template <typename T> HR_HD bool isNaN(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

template <typename T> HR_HD T maximum(T a, T b) {
  return a > b || isNaN(a) ? a : b;
}
template <typename T> HR_HD T minimum(T a, T b) {
  return a < b || isNaN(a) ? a : b;
}

template <typename T> HR_HD T absolute(T v) {
  if constexpr (std::is_unsigned_v<T>)
    return v;
  else
    return v < T(0) ? wrapNeg(v) : v;
}

template <typename T> HR_HD T relu(T v) {
  if constexpr (std::is_unsigned_v<T>)
    return v;
  else
    return v < T(0) ? T(0) : v;
}

/// Float to integer, truncating toward zero; NaN gives 0, out-of-range
/// values saturate.
template <typename I, typename F> HR_HD I floatToInt(F x) {
  if (x != x)
    return 0;
  if (x >= static_cast<F>(std::numeric_limits<I>::max()))
    return std::numeric_limits<I>::max();
  if (x <= static_cast<F>(std::numeric_limits<I>::min()) - F(1))
    return std::numeric_limits<I>::min();
  return static_cast<I>(x);
}

template <typename To, typename From> HR_HD To convertElem(From v) {
  using CF = typename Elem<From>::Compute;
  using CT = typename Elem<To>::Compute;
  CF x = Elem<From>::load(v);
  if constexpr (std::is_same_v<CT, bool>)
    return Elem<To>::store(x != CF(0));
  else if constexpr (std::is_floating_point_v<CF> && std::is_integral_v<CT>)
    return Elem<To>::store(floatToInt<CT>(x));
  else
    return Elem<To>::store(static_cast<CT>(x));
}

template <typename T> HR_HD T intPow(T base, int64_t e) {
  if (e < 0) {
    if (base == 1)
      return 1;
    if constexpr (std::is_signed_v<T>)
      if (base == T(-1))
        return e % 2 ? T(-1) : T(1);
    return 0;
  }
  T result = 1;
  for (; e; e >>= 1, base = wrapMul(base, base))
    if (e & 1)
      result = wrapMul(result, base);
  return result;
}

/// ONNX Pow with kernels/cpu's rules (torch's: squares and cubes are
/// products, halves square roots).
template <typename T, typename E> HR_HD T power(T base, E e) {
  if constexpr (std::is_floating_point_v<T>) {
    double d = static_cast<double>(e); // an integer exponent never halves
    if (d == 1)
      return base;
    if (d == 2)
      return base * base;
    if (d == 3)
      return base * base * base;
    if (d == 0.5)
      return msqrt(base);
    if (d == -0.5)
      return T(1) / msqrt(base);
    if (d == -1)
      return T(1) / base;
    if (d == -2)
      return T(1) / (base * base);
    return mpow(base, static_cast<T>(e));
  } else if constexpr (std::is_integral_v<E>) {
    return intPow(base, static_cast<int64_t>(e));
  } else {
    if (e == mtrunc(e) && mabs(e) < E(9.2e18))
      return intPow(base, static_cast<int64_t>(e));
    return floatToInt<T>(
        mpow(static_cast<double>(base), static_cast<double>(e)));
  }
}

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

#define HR_UNARY(NAME, EXPR)                                                   \
  struct NAME {                                                                \
    template <typename T> HR_HD T operator()(T x) const { return EXPR; }       \
  };
HR_UNARY(AbsOp, absolute(x))
HR_UNARY(NegOp, wrapNeg(x))
HR_UNARY(ExpOp, mexp(x))
HR_UNARY(LogOp, mlog(x))
HR_UNARY(SqrtOp, msqrt(x))
HR_UNARY(ReciprocalOp, T(1) / x)
HR_UNARY(TanhOp, mtanh(x))
HR_UNARY(SigmoidOp,
         x >= T(0) ? T(1) / (T(1) + mexp(-x)) : mexp(x) / (T(1) + mexp(x)))
HR_UNARY(ReluOp, relu(x))
HR_UNARY(ErfOp, merf(x))
HR_UNARY(SinOp, msin(x))
HR_UNARY(CosOp, mcos(x))
HR_UNARY(FloorOp, mfloor(x))
HR_UNARY(CeilOp, mceil(x))
HR_UNARY(NotOp, !x)
#undef HR_UNARY

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
  return dispatch<cpu::FloatTypes>(ctx, ctx.Inputs[0].Type,
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
  return dispatch<cpu::FloatTypes>(
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
  return dispatch<cpu::FloatTypes | cpu::IntTypes>(
      ctx, ctx.Inputs[0].Type, ParamUnaryApply<ClipOp, MakeClip>{ctx, m});
}

Error hardSigmoid(const KernelContext &ctx) {
  MakeHardSigmoid m{ctx.attrFloat("alpha", 0.2), ctx.attrFloat("beta", 0.5)};
  return dispatch<cpu::FloatTypes>(
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

#define HR_BINARY(NAME, EXPR)                                                  \
  struct NAME {                                                                \
    template <typename T> HR_HD auto operator()(T a, T b) const {              \
      return EXPR;                                                             \
    }                                                                          \
  };
HR_BINARY(AddOp, wrapAdd(a, b))
HR_BINARY(SubOp, wrapSub(a, b))
HR_BINARY(MulOp, wrapMul(a, b))
HR_BINARY(DivOp, divide(a, b))
HR_BINARY(MaxOp, maximum(a, b))
HR_BINARY(MinOp, minimum(a, b))
HR_BINARY(EqualOp, a == b)
HR_BINARY(LessOp, a < b)
HR_BINARY(LessOrEqualOp, a <= b)
HR_BINARY(GreaterOp, a > b)
HR_BINARY(GreaterOrEqualOp, a >= b)
HR_BINARY(AndOp, a &&b)
HR_BINARY(OrOp, a || b)
#undef HR_BINARY

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
  return dispatch<cpu::FloatTypes | cpu::IntTypes>(ctx, ctx.Outputs[0].Type,
                                                   VariadicApply<Op>{ctx});
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
    return dispatch<cpu::FloatTypes | cpu::IntTypes>(Ctx, e,
                                                     PowExponentApply<T>{Ctx});
  }
};

Error powKernel(const KernelContext &ctx) {
  return dispatch<cpu::FloatTypes | cpu::IntTypes>(ctx, ctx.Inputs[0].Type,
                                                   PowApply{ctx});
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
    return dispatch<cpu::AllTypes>(Ctx, Ctx.Outputs[0].Type,
                                   CastToApply<From>{Ctx});
  }
};

Error cast(const KernelContext &ctx) {
  const Attribute *to = ctx.attr("to");
  if (!to || to->kind() != Attribute::Kind::Type)
    return ctx.unsupported("needs an element type attribute `to`");
  if (to->asType() != ctx.Outputs[0].Type)
    return ctx.unsupported("result type " + dtypeName(ctx.Outputs[0].Type) +
                           " differs from `to` " + dtypeName(to->asType()));
  return dispatch<cpu::AllTypes>(ctx, ctx.Inputs[0].Type, CastApply{ctx});
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
  bool hasMask = ctx.Outputs.size() > 1 && ctx.Outputs[1].present();
  if (hasMask && ctx.Outputs[1].Type != DType::Bool)
    return ctx.unsupported("mask of type " + dtypeName(ctx.Outputs[1].Type) +
                           " is not supported");
  double ratio = 0.5, training = 0;
  if (ctx.hasInput(1))
    if (Error e = constantScalar(ctx, 1, "ratio", ratio))
      return e;
  if (ctx.hasInput(2))
    if (Error e = constantScalar(ctx, 2, "training_mode", training))
      return e;
  if (training == 0)
    ratio = 0;
  if (!(ratio >= 0 && ratio < 1))
    return ctx.unsupported("ratio " + std::to_string(ratio) +
                           " is not in [0, 1)");
  uint8_t *mask =
      hasMask ? static_cast<uint8_t *>(ctx.Outputs[1].Data) : nullptr;
  if (ratio == 0) {
    copyAsync(ctx, y.Data, x.Data, y.sizeInBytes());
    if (mask)
      forEach(ctx, y.numElements(), FillOnes{mask});
    return Error::success();
  }
  uint64_t threshold = static_cast<uint64_t>(ratio * 4294967296.0);
  return dispatch<cpu::FloatTypes>(
      ctx, x.Type, DropoutApply{ctx, mask, threshold, 1 / (1 - ratio)});
}

} // namespace

void cuda::registerElementwiseKernels() {
  constexpr unsigned Num = cpu::FloatTypes | cpu::IntTypes;
  constexpr unsigned Float = cpu::FloatTypes;
  registerKernel(OpKind::Abs, unaryKernel<AbsOp, Num>);
  registerKernel(OpKind::Neg, unaryKernel<NegOp, Num>);
  registerKernel(OpKind::Exp, unaryKernel<ExpOp, Float>);
  registerKernel(OpKind::Log, unaryKernel<LogOp, Float>);
  registerKernel(OpKind::Sqrt, unaryKernel<SqrtOp, Float>);
  registerKernel(OpKind::Reciprocal, unaryKernel<ReciprocalOp, Float>);
  registerKernel(OpKind::Tanh, unaryKernel<TanhOp, Float>);
  registerKernel(OpKind::Sigmoid, unaryKernel<SigmoidOp, Float>);
  registerKernel(OpKind::Relu, unaryKernel<ReluOp, Num>);
  registerKernel(OpKind::LeakyRelu, leakyRelu);
  registerKernel(OpKind::Clip, clip);
  registerKernel(OpKind::HardSigmoid, hardSigmoid);
  registerKernel(OpKind::Erf, unaryKernel<ErfOp, Float>);
  registerKernel(OpKind::Sin, unaryKernel<SinOp, Float>);
  registerKernel(OpKind::Cos, unaryKernel<CosOp, Float>);
  registerKernel(OpKind::Floor, unaryKernel<FloorOp, Float>);
  registerKernel(OpKind::Ceil, unaryKernel<CeilOp, Float>);
  registerKernel(OpKind::Not, unaryKernel<NotOp, cpu::BoolType>);
  registerKernel(OpKind::IsNaN, classifyKernel</*Inf=*/false>);
  registerKernel(OpKind::IsInf, classifyKernel</*Inf=*/true>);
  registerKernel(OpKind::Identity, identity);

  registerKernel(OpKind::Add, binaryKernel<AddOp, Num>);
  registerKernel(OpKind::Sub, binaryKernel<SubOp, Num>);
  registerKernel(OpKind::Mul, binaryKernel<MulOp, Num>);
  registerKernel(OpKind::Div, binaryKernel<DivOp, Num>);
  registerKernel(OpKind::Pow, powKernel);
  registerKernel(OpKind::And, binaryKernel<AndOp, cpu::BoolType>);
  registerKernel(OpKind::Or, binaryKernel<OrOp, cpu::BoolType>);
  registerKernel(OpKind::Equal, compareKernel<EqualOp, cpu::AllTypes>);
  registerKernel(OpKind::Less, compareKernel<LessOp, Num>);
  registerKernel(OpKind::LessOrEqual, compareKernel<LessOrEqualOp, Num>);
  registerKernel(OpKind::Greater, compareKernel<GreaterOp, Num>);
  registerKernel(OpKind::GreaterOrEqual, compareKernel<GreaterOrEqualOp, Num>);
  registerKernel(OpKind::Max, variadicKernel<MaxOp>);
  registerKernel(OpKind::Min, variadicKernel<MinOp>);
  registerKernel(OpKind::Sum, variadicKernel<AddOp>);
  registerKernel(OpKind::Where, where);
  registerKernel(OpKind::Cast, cast);
  registerKernel(OpKind::Dropout, dropout);
}
