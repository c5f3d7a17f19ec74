//===- Reduce.cu - Reductions, ArgMax, Softmax and LogSoftmax on CUDA -----===//
//
// kernels/cpu/Reduce.cpp's ops with its semantics. Reduce* split the input's
// axes, merged as the CPU merges them, into kept and reduced index spaces on
// the host; each output element then folds its reduced elements, in one of
// two launch shapes:
//
//  - a block per output (forEachRow), the block's threads sharing the
//    reduced elements, when there are many of them: the common "reduce the
//    last axes" case reads each row coalesced;
//  - a thread per output (forEach) looping over its reduced elements when
//    there are few (< kFewReduced), or when the innermost axis is kept and
//    there are enough outputs to fill the GPU: neighbouring threads then read
//    neighbouring elements.
//
// A few outputs over very many elements (a gradient's norm: ReduceSum of
// millions to a scalar) would be a few blocks, a few SMs: with the call's
// workspace (kernels/cuda/Workspace.h) each output's reduced elements are
// cut into runs, about 2048 blocks in all, that write their folds into the
// workspace; then a block per output folds its runs' partials in order (the
// same fold, so Max and Min still let a NaN win; deterministic, no atomics).
// Without the workspace (a direct call given none) it is a block per output.
//
// ArgMax, Softmax and LogSoftmax see the input as [outer, n, inner] around
// their axis and pick the same two shapes per (outer, inner) column. Sums
// go through Row::sum (warp shuffles); max, min, products and ArgMax through
// rowFold, a shared-memory tree that takes any combining functor (Row::max
// starts integers at 0 and has no min). Floats accumulate in Accum<T>,
// integers in their own type with wrapping arithmetic, as the CPU computes.
// Integer means are refused, as on the CPU.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/ReduceCheck.h"
#include "kernels/cuda/Launch.h"
#include "kernels/cuda/Math.h"
#include "kernels/cuda/Workspace.h"

#include "compiler/Types.h"

using namespace headroom;
using namespace headroom::cuda;
using llvm::Error;

namespace {

/// Below this many reduced elements an output is one thread's loop.
constexpr int64_t kFewReduced = 64;
/// With this many outputs, threads looping over a strided axis fill the GPU.
constexpr int64_t kManyOutputs = 16384;

/// Whether an output should be one block (true) or one thread (false), for
/// `reduced` elements per output; `innerKept` when the input's innermost
/// axis is kept, so that neighbouring outputs read neighbouring elements.
bool blockPerOutput(int64_t outputs, int64_t reduced, bool innerKept) {
  if (reduced < kFewReduced)
    return false;
  return !innerKept || outputs < kManyOutputs;
}

//===----------------------------------------------------------------------===//
// Folding over a block
//===----------------------------------------------------------------------===//

#if HR_ON_DEVICE
/// v folded over the block with op; every thread gets the result. The
/// tree pairs thread t with t + s, so op must not depend on its operands'
/// order beyond what it encodes itself (ArgMax breaks ties by index).
template <typename V, typename Op> __device__ V blockFold(V v, Op op) {
  __shared__ V buf[kBlockThreads];
  unsigned t = threadIdx.x;
  buf[t] = v;
  __syncthreads();
  for (unsigned s = kBlockThreads / 2; s > 0; s /= 2) {
    if (t < s)
      buf[t] = op(buf[t], buf[t + s]);
    __syncthreads();
  }
  V out = buf[0];
  __syncthreads(); // the next fold's writes wait for every read of buf[0]
  return out;
}
#endif

/// op folded over g(j) for j < n, starting at `init`, by r's block; every
/// thread gets the result. Sequential (j in order) in the emulator.
template <typename V, typename Op, typename G>
HR_HD V rowFold(const Row &r, int64_t n, V init, Op op, G g) {
  (void)r;
  V acc = init;
#if HR_ON_DEVICE
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    acc = op(acc, g(j));
  return blockFold(acc, op);
#else
  for (int64_t j = 0; j < n; ++j)
    acc = op(acc, g(j));
  return acc;
#endif
}

//===----------------------------------------------------------------------===//
// Reduce*
//===----------------------------------------------------------------------===//

enum class ReduceKind { Sum, Mean, Max, Min, Prod };

/// Integers wrap, as the CPU's loops do in practice.
template <typename A> HR_HD A addWrap(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return A(std::make_unsigned_t<A>(a) + std::make_unsigned_t<A>(b));
  else
    return a + b;
}
template <typename A> HR_HD A mulWrap(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return A(std::make_unsigned_t<A>(a) * std::make_unsigned_t<A>(b));
  else
    return a * b;
}

/// The fold of one kind; A is the accumulator type. Max and Min let a NaN
/// win and stay, as the CPU's (and numpy's) do.
template <ReduceKind K, typename A> struct ReduceOp {
  HR_HD static A init() {
    if constexpr (K == ReduceKind::Prod)
      return A(1);
    else if constexpr (K == ReduceKind::Max)
      return std::numeric_limits<A>::has_infinity
                 ? -std::numeric_limits<A>::infinity()
                 : std::numeric_limits<A>::lowest();
    else if constexpr (K == ReduceKind::Min)
      return std::numeric_limits<A>::has_infinity
                 ? std::numeric_limits<A>::infinity()
                 : std::numeric_limits<A>::max();
    else
      return A(0);
  }
  HR_HD A operator()(A v, A x) const {
    if constexpr (K == ReduceKind::Prod)
      return mulWrap(v, x);
    else if constexpr (K == ReduceKind::Max)
      return x > v || x != x ? x : v;
    else if constexpr (K == ReduceKind::Min)
      return x < v || x != x ? x : v;
    else
      return addWrap(v, x);
  }
};

/// The input's merged axes split into the kept ones (whose row-major order
/// is the output's) and the reduced ones, each with its input strides.
struct ReduceIndex {
  int KeptRank = 0, RedRank = 0;
  int64_t Kept[kMaxDims] = {}, KeptStride[kMaxDims] = {};
  int64_t Red[kMaxDims] = {}, RedStride[kMaxDims] = {};

  /// Input offset of output element o's first reduced element.
  HR_HD int64_t base(int64_t o) const {
    return offsetIn(o, KeptRank, Kept, KeptStride);
  }
  /// Offset of reduced element j (row-major over the reduced axes) from it.
  HR_HD int64_t offset(int64_t j) const {
    return offsetIn(j, RedRank, Red, RedStride);
  }
  HR_HD static int64_t offsetIn(int64_t i, int rank, const int64_t *dims,
                                const int64_t *strides) {
    int64_t off = 0;
    for (int d = rank - 1; d > 0; --d) {
      int64_t q = i / dims[d];
      off += (i - q * dims[d]) * strides[d];
      i = q;
    }
    // What is left of i indexes the outermost axis: no division (the
    // common single-run case has none at all).
    return rank ? off + i * strides[0] : off;
  }
};

/// The ReduceIndex of `shape` with `reduced` axes: size-1 axes dropped,
/// neighbours of one kind merged (kernels/cpu's planReduce); false when
/// either kind has more than kMaxDims runs.
bool makeReduceIndex(llvm::ArrayRef<int64_t> shape,
                     llvm::ArrayRef<bool> reduced, ReduceIndex &ix) {
  int64_t stride = 1;
  llvm::SmallVector<int64_t, 8> strides(shape.size());
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
  int lastKind = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1)
      continue;
    int kind = reduced[i];
    int &rank = kind ? ix.RedRank : ix.KeptRank;
    int64_t *dims = kind ? ix.Red : ix.Kept;
    int64_t *dimStrides = kind ? ix.RedStride : ix.KeptStride;
    if (kind == lastKind) {
      // Only size-1 axes lie between: the run grows inward.
      dims[rank - 1] *= shape[i];
      dimStrides[rank - 1] = strides[i];
      continue;
    }
    if (rank == int(kMaxDims))
      return false;
    dims[rank] = shape[i];
    dimStrides[rank] = strides[i];
    ++rank;
    lastKind = kind;
  }
  return true;
}

template <typename T>
using ReduceAcc =
    std::conditional_t<std::is_integral_v<typename Elem<T>::Compute>, T,
                       Accum<T>>;

/// result = fold, times Scale for a mean.
template <typename T, ReduceKind K> struct ReduceFinish {
  using A = ReduceAcc<T>;
  A Scale;
  HR_HD A operator()(A v) const {
    if constexpr (K == ReduceKind::Mean)
      return v * Scale;
    else
      return v;
  }
};

template <typename T, ReduceKind K> struct ReduceEachBody {
  using A = ReduceAcc<T>;
  const T *X;
  T *Y;
  ReduceIndex Ix;
  int64_t Count;
  ReduceFinish<T, K> Finish;
  HR_HD void operator()(int64_t o) const {
    const T *x = X + Ix.base(o);
    ReduceOp<K, A> op;
    A v = op.init();
    for (int64_t j = 0; j < Count; ++j)
      v = op(v, A(ld(x, Ix.offset(j))));
    st(Y, o, Finish(v));
  }
};

/// K's fold of g(j) for j < n by r's block: float sums through Row::sum's
/// shuffles, the rest through rowFold.
template <ReduceKind K, typename A, typename G>
HR_HD A blockReduceOf(const Row &r, int64_t n, G g) {
  constexpr bool Sum = K == ReduceKind::Sum || K == ReduceKind::Mean;
  if constexpr (Sum && std::is_floating_point_v<A>)
    return r.sum<A>(n, g);
  else
    return rowFold(r, n, ReduceOp<K, A>::init(), ReduceOp<K, A>{}, g);
}

template <typename T, ReduceKind K> struct ReduceRowBody {
  using A = ReduceAcc<T>;
  const T *X;
  T *Y;
  ReduceIndex Ix;
  int64_t Count;
  ReduceFinish<T, K> Finish;
  HR_HD void operator()(int64_t o, const Row &r) const {
    const T *x = X + Ix.base(o);
    A v = blockReduceOf<K, A>(
        r, Count, [&](int64_t j) { return A(ld(x, Ix.offset(j))); });
    r.each(1, [&](int64_t) { st(Y, o, Finish(v)); });
  }
};

/// The split's first pass: block b folds run b % Parts (reduced elements
/// [k * Per, (k + 1) * Per)) of output b / Parts into Partials[b].
template <typename T, ReduceKind K> struct ReducePartialBody {
  using A = ReduceAcc<T>;
  const T *X;
  A *Partials;
  ReduceIndex Ix;
  int64_t Count, Parts, Per;
  HR_HD void operator()(int64_t b, const Row &r) const {
    int64_t o = b / Parts, first = (b - o * Parts) * Per;
    int64_t n = Count - first < Per ? Count - first : Per;
    const T *x = X + Ix.base(o);
    A v = blockReduceOf<K, A>(
        r, n, [&](int64_t j) { return A(ld(x, Ix.offset(first + j))); });
    r.each(1, [&](int64_t) { Partials[b] = v; });
  }
};

/// The second pass: output o folds its Parts partials.
template <typename T, ReduceKind K> struct ReducePartialsBody {
  using A = ReduceAcc<T>;
  const A *Partials;
  T *Y;
  int64_t Parts;
  ReduceFinish<T, K> Finish;
  HR_HD void operator()(int64_t o, const Row &r) const {
    const A *p = Partials + o * Parts;
    A v = blockReduceOf<K, A>(r, Parts, [&](int64_t k) { return p[k]; });
    r.each(1, [&](int64_t) { st(Y, o, Finish(v)); });
  }
};

template <ReduceKind K> struct ReduceApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    const TensorView &x = Ctx.Inputs[0], &y = Ctx.Outputs[0];
    auto r = kernels::checkedReduceAxes(Ctx);
    if (!r)
      return r.takeError();
    const std::vector<int64_t> *axes = &r->Axes;
    if (r->Noop) {
      copyAsync(Ctx, y.Data, x.Data, x.sizeInBytes());
      return Error::success();
    }
    llvm::SmallVector<bool, 8> reduced(x.rank(), axes->empty());
    for (int64_t a : *axes)
      reduced[a] = true;
    int64_t outCount = 1, count = 1;
    for (unsigned i = 0; i < x.rank(); ++i)
      (reduced[i] ? count : outCount) *= x.Shape[i];
    if (y.numElements() != outCount)
      return Ctx.unsupported("result type does not match the reduced axes");
    ReduceIndex ix;
    if (!makeReduceIndex(x.Shape, reduced, ix))
      return Ctx.unsupported("more than 8 dimensions after merging");
    using A = ReduceAcc<T>;
    // The CPU's scale, T(outCount) / T(count) (inf for an empty reduction,
    // so its mean is NaN there too).
    ReduceFinish<T, K> finish{A(1)};
    if constexpr (K == ReduceKind::Mean)
      finish.Scale = A(outCount) / A(x.numElements());
    uint64_t need = ws::reduceWorkspaceBytes(outCount, count);
    if (need && Ctx.Workspace && Ctx.WorkspaceBytes >= need) {
      static_assert(sizeof(A) <= ws::kPartialBytes);
      ws::Runs runs = ws::reduceRuns(outCount, count);
      A *partials = static_cast<A *>(Ctx.Workspace);
      forEachRow(Ctx, outCount * runs.Parts,
                 ReducePartialBody<T, K>{x.as<T>(), partials, ix, count,
                                         runs.Parts, runs.Per});
      forEachRow(
          Ctx, outCount,
          ReducePartialsBody<T, K>{partials, y.as<T>(), runs.Parts, finish});
      return Error::success();
    }
    bool innerKept = ix.KeptRank && ix.KeptStride[ix.KeptRank - 1] == 1;
    if (blockPerOutput(outCount, count, innerKept))
      forEachRow(Ctx, outCount,
                 ReduceRowBody<T, K>{x.as<T>(), y.as<T>(), ix, count, finish});
    else
      forEach(Ctx, outCount,
              ReduceEachBody<T, K>{x.as<T>(), y.as<T>(), ix, count, finish});
    return Error::success();
  }
};

template <ReduceKind K> Error reduceKernel(const KernelContext &ctx) {
  DType t = ctx.Inputs[0].Type;
  if (isFloat(t))
    return dispatch<kernels::FloatTypes>(ctx, t, ReduceApply<K>{ctx});
  // Integer means would round; as on the CPU, only the exact integer
  // reductions are offered.
  if constexpr (K != ReduceKind::Mean)
    if (t == DType::I32 || t == DType::I64)
      return dispatch<kernels::IntTypes>(ctx, t, ReduceApply<K>{ctx});
  return ctx.unsupported("element type " + dtypeName(t) + " is not supported");
}

//===----------------------------------------------------------------------===//
// ArgMax
//===----------------------------------------------------------------------===//

/// A candidate of ArgMax's fold; NaNs are not candidates.
template <typename C> struct Best {
  C V;
  int64_t I;
  bool Valid;
};

/// The larger candidate, ties to the lower index (or the higher with
/// select_last_index): on non-NaN values the CPU's scan `x > best` (`>=`).
template <typename C> struct BestOp {
  bool Last;
  HR_HD Best<C> operator()(Best<C> a, Best<C> b) const {
    if (!b.Valid)
      return a;
    if (!a.Valid || b.V > a.V)
      return b;
    if (b.V == a.V && (Last ? b.I > a.I : b.I < a.I))
      return b;
    return a;
  }
};

/// The CPU's scan never moves off a NaN first element and never moves onto
/// a later NaN: element 0 when it is NaN, else the best non-NaN element.
template <typename T> struct ArgMaxBody {
  using C = typename Elem<T>::Compute;
  const T *X;
  int64_t *Y;
  AxisSplit S;
  bool Last;
  HR_HD const T *column(int64_t o) const {
    int64_t outer = o / S.Inner;
    return X + outer * S.N * S.Inner + (o - outer * S.Inner);
  }
  HR_HD Best<C> candidate(const T *x, int64_t k) const {
    C v = ld(x, k * S.Inner);
    return {v, k, !(v != v)};
  }
  HR_HD int64_t finish(const T *x, Best<C> b) const {
    C first = ld(x, 0);
    return first != first ? 0 : b.I;
  }
  HR_HD void operator()(int64_t o) const {
    const T *x = column(o);
    BestOp<C> op{Last};
    Best<C> b{C(0), 0, false};
    for (int64_t k = 0; k < S.N; ++k)
      b = op(b, candidate(x, k));
    Y[o] = finish(x, b);
  }
  HR_HD void operator()(int64_t o, const Row &r) const {
    const T *x = column(o);
    Best<C> b = rowFold(r, S.N, Best<C>{C(0), 0, false}, BestOp<C>{Last},
                        [&](int64_t k) { return candidate(x, k); });
    r.each(1, [&](int64_t) { Y[o] = finish(x, b); });
  }
};

struct ArgMaxApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    const TensorView &x = Ctx.Inputs[0], &y = Ctx.Outputs[0];
    auto s = kernels::argMaxSplit(Ctx);
    if (!s)
      return s.takeError();
    int64_t outCount = s->Outer * s->Inner;
    ArgMaxBody<T> body{x.as<T>(), y.as<int64_t>(), *s,
                       Ctx.attrInt("select_last_index", 0) != 0};
    if (blockPerOutput(outCount, s->N, s->Inner > 1))
      forEachRow(Ctx, outCount, body);
    else
      forEach(Ctx, outCount, body);
    return Error::success();
  }
};

Error argMaxKernel(const KernelContext &ctx) {
  DType t = ctx.Inputs[0].Type;
  if (isFloat(t))
    return dispatch<kernels::FloatTypes>(ctx, t, ArgMaxApply{ctx});
  if (t == DType::I32 || t == DType::I64)
    return dispatch<kernels::IntTypes>(ctx, t, ArgMaxApply{ctx});
  return ctx.unsupported("element type " + dtypeName(t) + " is not supported");
}

//===----------------------------------------------------------------------===//
// Softmax and LogSoftmax
//===----------------------------------------------------------------------===//

/// Softmax (Log false) or log-softmax of each [N] column of [Outer, N,
/// Inner], shifted by the column's maximum so large logits do not overflow.
/// exp is recomputed in the last pass rather than kept: the result is
/// rounded once, and f16/bf16 leave no room to keep it in.
template <typename T, bool Log> struct SoftmaxBody {
  using A = Accum<T>;
  const T *X;
  T *Y;
  AxisSplit S;
  HR_HD int64_t base(int64_t o) const {
    int64_t outer = o / S.Inner;
    return outer * S.N * S.Inner + (o - outer * S.Inner);
  }
  /// (x - max) - log(sum), not x - (max + log(sum)): near large logits the
  /// latter rounds log(sum) away in f32 (the CPU's order).
  HR_HD A value(A x, A max, A sumOrLog) const {
    if constexpr (Log)
      return (x - max) - sumOrLog;
    else
      return mexp(x - max) * sumOrLog;
  }
  HR_HD A finishSum(A sum) const {
    if constexpr (Log)
      return mlog(sum);
    else
      return A(1) / sum;
  }
  HR_HD void operator()(int64_t o) const {
    const T *x = X + base(o);
    T *y = Y + base(o);
    int64_t in = S.Inner;
    A max = -std::numeric_limits<A>::infinity();
    for (int64_t k = 0; k < S.N; ++k) {
      A v = ld(x, k * in);
      max = v > max || v != v ? v : max;
    }
    A sum = 0;
    for (int64_t k = 0; k < S.N; ++k)
      sum += mexp(A(ld(x, k * in)) - max);
    A f = finishSum(sum);
    for (int64_t k = 0; k < S.N; ++k)
      st(y, k * in, value(ld(x, k * in), max, f));
  }
  HR_HD void operator()(int64_t o, const Row &r) const {
    const T *x = X + base(o);
    T *y = Y + base(o);
    int64_t in = S.Inner;
    A max = r.max<A>(S.N, [&](int64_t k) { return A(ld(x, k * in)); });
    A sum =
        r.sum<A>(S.N, [&](int64_t k) { return mexp(A(ld(x, k * in)) - max); });
    A f = finishSum(sum);
    r.each(S.N,
           [&](int64_t k) { st(y, k * in, value(ld(x, k * in), max, f)); });
  }
};

template <bool Log> struct SoftmaxApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    const TensorView &x = Ctx.Inputs[0], &y = Ctx.Outputs[0];
    auto s = kernels::softmaxSplit(Ctx);
    if (!s)
      return s.takeError();
    SoftmaxBody<T, Log> body{x.as<T>(), y.as<T>(), *s};
    int64_t columns = s->Outer * s->Inner;
    if (blockPerOutput(columns, s->N, s->Inner > 1))
      forEachRow(Ctx, columns, body);
    else
      forEach(Ctx, columns, body);
    return Error::success();
  }
};

template <bool Log> Error softmaxKernel(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[0].Type,
                                       SoftmaxApply<Log>{ctx});
}

} // namespace

void cuda::registerReduceKernels() {
  registerKernel(OpKind::ReduceSum, reduceKernel<ReduceKind::Sum>);
  registerKernel(OpKind::ReduceMean, reduceKernel<ReduceKind::Mean>);
  registerKernel(OpKind::ReduceMax, reduceKernel<ReduceKind::Max>);
  registerKernel(OpKind::ReduceMin, reduceKernel<ReduceKind::Min>);
  registerKernel(OpKind::ReduceProd, reduceKernel<ReduceKind::Prod>);
  registerKernel(OpKind::ArgMax, argMaxKernel);
  registerKernel(OpKind::Softmax, softmaxKernel</*Log=*/false>);
  registerKernel(OpKind::LogSoftmax, softmaxKernel</*Log=*/true>);
}
