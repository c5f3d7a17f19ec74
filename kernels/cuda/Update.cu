//===- Update.cu - In-place state updates on the GPU ----------------------===//
//
// The update ops of kernels/cpu/Update.cpp, one thread per element; the
// executor passes the state slots as the outputs, read and written in place:
//   SgdUpdate       w -= lr * (scale * g + weight_decay * w), unless
//                   `enabled` (operand 2) is false
//   MomentumUpdate  on (w, buf), torch.optim.SGD with momentum
//   AdamWUpdate     on (w, m, v), torch.optim.AdamW
//   AdamW8bitUpdate on (w, m, v, m_absmax, v_absmax): 8-bit moments
//                   (kernels/common/Blockwise8bit.h), a thread block per block
//                   of 256 elements with the maps in shared memory
//   Accumulate      acc += scale * g   (acc = scale * g when first = 1)
//   Nf4Dequantize   a frozen NF4 weight in its compute type, one thread per
//                   element (kernels/common/Nf4.h, shared with the CPU)
// The scale, enabled and step-size operands live on the device, so every thread
// reads them there instead of the host deciding (a CUDA graph replays the
// launch whatever they hold). Products are rounded before they are added,
// never fused into an FMA, so f32/f64 weights equal the `optimizer` pass's
// sgd ops (and the CPU's) bit for bit; f16/bf16 compute in float and round
// once, as the CPU's widened kernels do (a narrow weight's momentum buffer
// and AdamW moments are f32 state).
//
//===----------------------------------------------------------------------===//
#include "kernels/common/AdamW8bitCheck.h"
#include "kernels/common/Nf4.h"
#include "kernels/cuda/Launch.h"
#include "kernels/cuda/Math.h"

#include "compiler/Types.h"

using namespace headroom;
using namespace headroom::cuda;
using llvm::Error;

namespace {

/// a * b rounded on its own: nvcc would fuse it into a following add.
HR_HD inline float mulRn(float a, float b) {
#if HR_ON_DEVICE
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
HR_HD inline double mulRn(double a, double b) {
#if HR_ON_DEVICE
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

/// Whether the state's element type is computed as f32 (f16 and bf16 are,
/// as the CPU widens them).
DType widened(DType t) {
  return t == DType::F16 || t == DType::BF16 ? DType::F32 : t;
}

Error checkState(const KernelContext &ctx) {
  if (ctx.Outputs.size() != 1 || !ctx.Outputs[0].present())
    return ctx.unsupported("needs its state slot as the output");
  if (ctx.Inputs[0].type() != ctx.Outputs[0].type())
    return ctx.unsupported("gradient " + ctx.Inputs[0].type().str() +
                           " does not match the state " +
                           ctx.Outputs[0].type().str());
  return Error::success();
}

/// The four forms of kernels/cpu's sgdUpdate, so that no operation the sgd
/// ops skip is done here (x * 1 and x + 0 * w are exact, but -0 and NaN/Inf
/// weights would tell). S is the scale's storage type.
template <typename T, typename S> struct SgdBody {
  using C = typename Elem<T>::Compute;
  T *W;
  const T *G;
  const S *Scale;      // null: unscaled
  const Bool *Enabled; // null: always
  C Lr, Wd;

  HR_HD void operator()(int64_t i) const {
    if (Enabled && !Enabled->Value)
      return; // a skipped step: w stays as it is
    C w = ld(W, i), g = ld(G, i);
    if (Scale) {
      C d = mulRn(g, C(ld(Scale, 0)));
      if (Wd != C(0))
        d = d + mulRn(w, Wd);
      w = w - mulRn(d, Lr);
    } else if (Wd != C(0)) {
      C d = g + mulRn(w, Wd);
      w = w - mulRn(d, Lr);
    } else {
      w = w - mulRn(g, Lr);
    }
    st(W, i, w);
  }
};

template <typename T> struct SgdScaleApply {
  const KernelContext &Ctx;
  template <typename S> Error apply() const {
    using C = typename Elem<T>::Compute;
    const TensorView &w = Ctx.Outputs[0];
    SgdBody<T, S> body{w.as<T>(),
                       Ctx.Inputs[0].as<T>(),
                       Ctx.hasInput(1) ? Ctx.Inputs[1].as<S>() : nullptr,
                       Ctx.hasInput(2) ? Ctx.Inputs[2].as<Bool>() : nullptr,
                       static_cast<C>(Ctx.attrFloat("lr", 0.0)),
                       static_cast<C>(Ctx.attrFloat("weight_decay", 0.0))};
    forEach(Ctx, w.numElements(), body);
    return Error::success();
  }
};

struct SgdApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    if (!Ctx.hasInput(1))
      return SgdScaleApply<T>{Ctx}.template apply<T>();
    return dispatch<kernels::FloatTypes>(Ctx, Ctx.Inputs[1].Type,
                                         SgdScaleApply<T>{Ctx});
  }
};

/// SgdUpdate(g, scale?, enabled?) {lr, weight_decay} -> (w, in place).
Error sgdUpdate(const KernelContext &ctx) {
  if (Error e = checkState(ctx))
    return e;
  DType state = ctx.Outputs[0].Type;
  if (ctx.hasInput(1) && (ctx.Inputs[1].numElements() != 1 ||
                          widened(ctx.Inputs[1].Type) != widened(state)))
    return ctx.unsupported("scale must be a scalar of the state's type");
  if (ctx.hasInput(2) &&
      (ctx.Inputs[2].Type != DType::Bool || ctx.Inputs[2].numElements() != 1))
    return ctx.unsupported("enabled must be a bool scalar");
  return dispatch<kernels::FloatTypes>(ctx, state, SgdApply{ctx});
}

/// The fused optimizer updates' slots and operands after the gradient: the
/// weight of the gradient's type, the moments of the same or (for a
/// bf16/f16 weight) f32, `scalars` scalars of the moments' type, then the
/// `enabled` flag.
Error checkFused(const KernelContext &ctx, size_t slots, unsigned scalars) {
  if (ctx.Outputs.size() != slots)
    return ctx.unsupported("needs its " + llvm::Twine(slots) +
                           " state slots as the outputs");
  const TensorView &w = ctx.Outputs[0];
  if (!w.present() || w.type() != ctx.Inputs[0].type())
    return ctx.unsupported("gradient " + ctx.Inputs[0].type().str() +
                           " does not match the state " + w.type().str());
  DType moments = ctx.Outputs[1].Type;
  if (moments != w.Type &&
      !(moments == DType::F32 && widened(w.Type) == DType::F32))
    return ctx.unsupported("moments of type " + dtypeName(moments) +
                           " for a weight of type " + dtypeName(w.Type));
  for (const TensorView &out : ctx.Outputs.drop_front())
    if (!out.present() || out.type() != TensorType(moments, w.Shape))
      return ctx.unsupported("state " + out.type().str() +
                             " does not match the weight " + w.type().str());
  for (unsigned i = 1; i <= scalars && ctx.hasInput(i); ++i)
    if (ctx.Inputs[i].numElements() != 1 || ctx.Inputs[i].Type != moments)
      return ctx.unsupported("operand " + llvm::Twine(i) +
                             " must be a scalar of the moments' type");
  if (ctx.hasInput(scalars + 1) &&
      (ctx.Inputs[scalars + 1].Type != DType::Bool ||
       ctx.Inputs[scalars + 1].numElements() != 1))
    return ctx.unsupported("enabled must be a bool scalar");
  return Error::success();
}

/// apply.run<T, M>() with M the storage type of the fused update's moments
/// (Outputs[1]): f32 beside a bf16/f16 weight, else the weight's own.
template <typename T, typename Apply>
Error withMoments(const KernelContext &ctx, const Apply &apply) {
  if constexpr (std::is_same_v<typename Elem<T>::Compute, float> &&
                !std::is_same_v<T, float>)
    if (ctx.Outputs[1].Type == DType::F32)
      return apply.template run<T, float>();
  return apply.template run<T, T>();
}

/// kernels/cpu's momentumUpdate: the operations the primitive ops would do,
/// each product rounded on its own.
template <typename T, typename M = T> struct MomentumBody {
  using C = typename Elem<T>::Compute;
  T *W;
  M *Buf;
  const T *G;
  const M *Scale;      // null: unscaled
  const Bool *Enabled; // null: always
  C Lr, Wd, Mu;
  bool Nesterov;

  HR_HD void operator()(int64_t i) const {
    if (Enabled && !Enabled->Value)
      return;
    C w = ld(W, i), d = ld(G, i);
    if (Scale)
      d = mulRn(d, ld(Scale, 0));
    if (Wd != C(0))
      d = d + mulRn(w, Wd);
    C b = mulRn(ld(Buf, i), Mu) + d;
    st(Buf, i, b);
    C step = Nesterov ? d + mulRn(b, Mu) : b;
    st(W, i, w - mulRn(step, Lr));
  }
};

struct MomentumApply {
  const KernelContext &Ctx;
  template <typename T, typename M> Error run() const {
    using C = typename Elem<T>::Compute;
    MomentumBody<T, M> body{Ctx.Outputs[0].as<T>(),
                            Ctx.Outputs[1].as<M>(),
                            Ctx.Inputs[0].as<T>(),
                            Ctx.hasInput(1) ? Ctx.Inputs[1].as<M>() : nullptr,
                            Ctx.hasInput(2) ? Ctx.Inputs[2].as<Bool>()
                                            : nullptr,
                            static_cast<C>(Ctx.attrFloat("lr", 0.0)),
                            static_cast<C>(Ctx.attrFloat("weight_decay", 0.0)),
                            static_cast<C>(Ctx.attrFloat("momentum", 0.0)),
                            Ctx.attrInt("nesterov", 0) != 0};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
  template <typename T> Error apply() const {
    return withMoments<T>(Ctx, *this);
  }
};

/// MomentumUpdate(g, scale?, enabled?) {lr, momentum, nesterov,
/// weight_decay} -> (w, buf, in place).
Error momentumUpdate(const KernelContext &ctx) {
  if (Error e = checkFused(ctx, /*slots=*/2, /*scalars=*/1))
    return e;
  return dispatch<kernels::FloatTypes>(ctx, ctx.Outputs[0].Type,
                                       MomentumApply{ctx});
}

/// kernels/cpu's adamwUpdate, each product rounded on its own.
template <typename T, typename S = T> struct AdamWBody {
  using C = typename Elem<T>::Compute;
  T *W;
  S *M, *V;
  const T *G;
  const S *StepSize, *SqrtBc2;
  const S *Scale;      // null: unscaled
  const Bool *Enabled; // null: always
  C Decay, B1, C1, B2, C2, Eps;
  bool Decays;

  HR_HD void operator()(int64_t i) const {
    if (Enabled && !Enabled->Value)
      return;
    C d = ld(G, i);
    if (Scale)
      d = mulRn(d, ld(Scale, 0));
    C w = ld(W, i);
    if (Decays)
      w = mulRn(w, Decay);
    C m = mulRn(ld(M, i), B1) + mulRn(d, C1);
    C v = mulRn(ld(V, i), B2) + mulRn(mulRn(d, d), C2);
    st(M, i, m);
    st(V, i, v);
    C denom = msqrt(v) / ld(SqrtBc2, 0) + Eps;
    st(W, i, w - mulRn(m / denom, ld(StepSize, 0)));
  }
};

struct AdamWApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    return withMoments<T>(Ctx, *this);
  }
  template <typename T, typename S> Error run() const {
    using C = typename Elem<T>::Compute;
    C decay = static_cast<C>(Ctx.attrFloat("decay", 1.0));
    AdamWBody<T, S> body{
        Ctx.Outputs[0].as<T>(),
        Ctx.Outputs[1].as<S>(),
        Ctx.Outputs[2].as<S>(),
        Ctx.Inputs[0].as<T>(),
        Ctx.Inputs[1].as<S>(),
        Ctx.Inputs[2].as<S>(),
        Ctx.hasInput(3) ? Ctx.Inputs[3].as<S>() : nullptr,
        Ctx.hasInput(4) ? Ctx.Inputs[4].as<Bool>() : nullptr,
        decay,
        static_cast<C>(Ctx.attrFloat("beta1", 0.9)),
        static_cast<C>(Ctx.attrFloat("one_minus_beta1", 0.1)),
        static_cast<C>(Ctx.attrFloat("beta2", 0.999)),
        static_cast<C>(Ctx.attrFloat("one_minus_beta2", 0.001)),
        static_cast<C>(Ctx.attrFloat("eps", 1e-8)),
        decay != C(1)};
    forEach(Ctx, Ctx.Outputs[0].numElements(), body);
    return Error::success();
  }
};

/// AdamWUpdate(g, step_size, sqrt_bc2, scale?, enabled?) {decay?, beta1,
/// one_minus_beta1, beta2, one_minus_beta2, eps} -> (w, m, v, in place).
Error adamwUpdate(const KernelContext &ctx) {
  if (Error e = checkFused(ctx, /*slots=*/3, /*scalars=*/3))
    return e;
  if (!ctx.hasInput(1) || !ctx.hasInput(2))
    return ctx.unsupported("needs the step size and sqrt_bc2");
  return dispatch<kernels::FloatTypes>(ctx, ctx.Outputs[0].Type,
                                       AdamWApply{ctx});
}

#if defined(__CUDACC__)
// The dynamic maps where device code reads them (copied into each block's
// shared memory first).
__constant__ float kSignedMapDevice[256] = {HR_SIGNED_DYNAMIC_MAP};
__constant__ float kUnsignedMapDevice[256] = {HR_UNSIGNED_DYNAMIC_MAP};
__constant__ float kNf4MapDevice[16] = {HR_NF4_MAP};
#endif

HR_HD inline float signedMapAt(int64_t j) {
#if HR_ON_DEVICE
  return kSignedMapDevice[j];
#else
  return kSignedDynamicMap[j];
#endif
}
HR_HD inline float unsignedMapAt(int64_t j) {
#if HR_ON_DEVICE
  return kUnsignedMapDevice[j];
#else
  return kUnsignedDynamicMap[j];
#endif
}

/// Shared memory of an 8-bit update's block: the two maps, then the block's
/// new moments.
constexpr int64_t k8bitSharedBytes = 4 * kStateBlock * int64_t(sizeof(float));

/// kernels/cpu's adamw8bitUpdate for one block of kStateBlock elements: the
/// moments dequantized and updated (kept in shared memory), the weight
/// written, the block's new absmaxes taken, the codes stored against them.
template <typename T> struct AdamW8bitBody {
  T *W;
  const T *G;
  uint8_t *MCodes, *VCodes;
  float *MAbs, *VAbs;
  const float *StepSize, *SqrtBc2;
  const float *Scale;  // null: unscaled
  const Bool *Enabled; // null: always
  AdamWStep Step;      // StepSize, SqrtBc2 and Scale read on the device
  int64_t N;

  HR_HD void operator()(int64_t tile, const Row &r,
                        unsigned char *shared) const {
    if (Enabled && !Enabled->Value)
      return; // a skipped step (the whole grid returns alike)
    float *sm = reinterpret_cast<float *>(shared), *um = sm + kStateBlock,
          *m = um + kStateBlock, *v = m + kStateBlock;
    r.each(kStateBlock, [&](int64_t j) {
      sm[j] = signedMapAt(j);
      um[j] = unsignedMapAt(j);
    });
    AdamWStep s = Step;
    s.StepSize = *StepSize;
    s.SqrtBc2 = *SqrtBc2;
    if (Scale)
      s.Scale = *Scale;
    int64_t first = tile * kStateBlock;
    int64_t len = N - first < kStateBlock ? N - first : kStateBlock;
    float mOld = MAbs[tile], vOld = VAbs[tile];
    r.each(len, [&](int64_t j) {
      int64_t i = first + j;
      float d = s.grad(float(ld(G, i)));
      m[j] = s.firstMoment(sm[MCodes[i]] * mOld, d);
      v[j] = s.secondMoment(um[VCodes[i]] * vOld, d);
      st(W, i, s.weight(float(ld(W, i)), m[j], v[j]));
    });
    float mMax = r.max<float>(len, [&](int64_t j) { return std::fabs(m[j]); });
    float vMax = r.max<float>(len, [&](int64_t j) { return std::fabs(v[j]); });
    r.each(len, [&](int64_t j) {
      MCodes[first + j] = quantizeSigned(sm, m[j], mMax);
      VCodes[first + j] = quantizeUnsigned(um, v[j], vMax);
    });
    // Every thread read the old absmaxes before the first each ended.
    MAbs[tile] = mMax;
    VAbs[tile] = vMax;
  }
};

struct AdamW8bitApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    if constexpr (!std::is_same_v<typename Elem<T>::Compute, float>) {
      return Ctx.unsupported("8-bit moments need an f32, bf16 or f16 weight");
    } else {
      int64_t n = Ctx.Outputs[0].numElements();
      AdamW8bitBody<T> body{
          Ctx.Outputs[0].as<T>(),
          Ctx.Inputs[0].as<T>(),
          Ctx.Outputs[1].as<uint8_t>(),
          Ctx.Outputs[2].as<uint8_t>(),
          Ctx.Outputs[3].as<float>(),
          Ctx.Outputs[4].as<float>(),
          Ctx.Inputs[1].as<float>(),
          Ctx.Inputs[2].as<float>(),
          Ctx.hasInput(3) ? Ctx.Inputs[3].as<float>() : nullptr,
          Ctx.hasInput(4) ? Ctx.Inputs[4].as<Bool>() : nullptr,
          kernels::adamwStepAttributes(Ctx),
          n};
      forEachTile(Ctx, stateBlocks(n), k8bitSharedBytes, body);
      return Error::success();
    }
  }
};

/// AdamW8bitUpdate(g, step_size, sqrt_bc2, scale?, enabled?) {AdamWUpdate's
/// attributes} -> (w, m codes, v codes, m absmax, v absmax, in place).
Error adamw8bitUpdate(const KernelContext &ctx) {
  if (Error e = kernels::checkAdamW8bit(ctx))
    return e;
  const TensorView &w = ctx.Outputs[0];
  return dispatch<kernels::FloatTypes>(ctx, w.Type, AdamW8bitApply{ctx});
}

template <typename T> struct AccumulateBody {
  using C = typename Elem<T>::Compute;
  T *Acc;
  const T *G;
  C Scale;
  bool First;

  HR_HD void operator()(int64_t i) const {
    C d = mulRn(ld(G, i), Scale);
    st(Acc, i, First ? d : ld(Acc, i) + d);
  }
};

struct AccumulateApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    using C = typename Elem<T>::Compute;
    const TensorView &acc = Ctx.Outputs[0];
    AccumulateBody<T> body{acc.as<T>(), Ctx.Inputs[0].as<T>(),
                           static_cast<C>(Ctx.attrFloat("scale", 1.0)),
                           Ctx.attrInt("first", 0) != 0};
    forEach(Ctx, acc.numElements(), body);
    return Error::success();
  }
};

/// Accumulate(g) {scale, first} -> (acc, in place).
Error accumulate(const KernelContext &ctx) {
  if (Error e = checkState(ctx))
    return e;
  return dispatch<kernels::FloatTypes>(ctx, ctx.Outputs[0].Type,
                                       AccumulateApply{ctx});
}

template <typename T> struct Nf4DequantizeBody {
  const uint8_t *Packed, *Codes;
  const float *Nested, *Offset;
  T *Out;

  HR_HD void operator()(int64_t i) const {
#if HR_ON_DEVICE
    const float *nf4 = kNf4MapDevice, *map = kSignedMapDevice;
#else
    const float *nf4 = kNf4Map, *map = kSignedDynamicMap;
#endif
    st(Out, i, dequantizeNf4(nf4, map, Packed, Codes, Nested, *Offset, i));
  }
};

template <typename T> Error nf4DequantizeAs(const KernelContext &ctx) {
  Nf4DequantizeBody<T> body{ctx.Inputs[0].as<uint8_t>(),
                            ctx.Inputs[1].as<uint8_t>(),
                            ctx.Inputs[2].as<float>(),
                            ctx.Inputs[3].as<float>(), ctx.Outputs[0].as<T>()};
  forEach(ctx, ctx.Outputs[0].numElements(), body);
  return Error::success();
}

/// Nf4Dequantize(codes, absmax, nested_absmax, offset) -> an f32, bf16 or
/// f16 weight.
Error nf4Dequantize(const KernelContext &ctx) {
  if (Error e = kernels::checkNf4Dequantize(ctx))
    return e;
  DType t = ctx.Outputs[0].Type;
  return t == DType::F32    ? nf4DequantizeAs<float>(ctx)
         : t == DType::BF16 ? nf4DequantizeAs<BFloat16>(ctx)
                            : nf4DequantizeAs<Half>(ctx);
}

} // namespace

void cuda::registerUpdateKernels() {
  registerKernel(OpKind::SgdUpdate, sgdUpdate);
  registerKernel(OpKind::MomentumUpdate, momentumUpdate);
  registerKernel(OpKind::AdamWUpdate, adamwUpdate);
  registerKernel(OpKind::AdamW8bitUpdate, adamw8bitUpdate);
  registerKernel(OpKind::Accumulate, accumulate);
  registerKernel(OpKind::Nf4Dequantize, nf4Dequantize);
}
