//===- Attention.cu - FusedAttention and its gradient on CUDA -------------===//
//
// FusedAttention(q, k, v, bias?) -> (out, lse) and FusedAttentionGrad with
// kernels/cpu/Attention.cpp's math (compiler/AttentionShape.h has the op's
// contract): scores scale q.k + bias over the row's keys (0..i when causal),
// each row's log-sum-exp kept for the backward, the dropout mask drawn as
// Dropout draws it (counterHash at ((b H + h) Sq + i) Sk + j, seeded with
// mixSeed(run seed, step, stream)), zero_empty_rows. Nothing is [.., Sq, Sk]
// and no workspace is planned: memory stays linear in the sequence.
//
// This is a first, untiled version: a thread block per row, scores
// recomputed from q and k whenever a pass needs them, no shared-memory tiles
// of q, k and v and no tensor cores yet (FlashAttention's tiling is the next
// step).
//  - Forward: a block per query row (b, h, i): the row's max score, then
//    sum exp(s - max) (Row's reductions, a thread per key), then out_i =
//    sum_j p_ij f_ij v_j through stagedSum.
//  - Backward: rowDot_i = dout_i . out_i per query row, kept in dq's buffer
//    until the key pass and d(bias) (a thread per bias element, for a
//    trained bias) have read it (as LayerNormalizationGrad keeps its
//    statistics in dx); a block per key row (b, kvh, j) sums dk_j and dv_j
//    over the group's heads and the query rows; last, a block per query row
//    recomputes its rowDot and writes dq_i. Every sum has one owner and a
//    fixed order: no atomics, the same bits on every run.
//
// f16, bf16 and f32 compute in f32, f64 in f64 (Accum<T>); lse is f32 (f64
// for f64 q), the bias f32 or f64.
//
//===----------------------------------------------------------------------===//
#include "kernels/cuda/Launch.h"
#include "kernels/cuda/Math.h"

#include "compiler/AttentionShape.h"
#include "compiler/Types.h"

using namespace headroom;
using namespace headroom::cuda;
using llvm::Error;

namespace {

//===----------------------------------------------------------------------===//
// Staged sums
//===----------------------------------------------------------------------===//

/// store(e, sum over j < n of term(j, e, w_j)) for every e < width, where w_j
/// = stage(j) is computed once per pass: the block stages kBlockThreads
/// weights at a time in shared memory (a thread each), then each thread adds
/// one e's terms over them, in j order. A width over kBlockThreads takes more
/// passes, each staging the weights again. The emulator runs the threads one
/// after the other with the same partition, so it adds in the GPU's order.
template <typename A, typename W, typename Stage, typename Term, typename Store>
HR_HD void stagedSum(int64_t n, int64_t width, const Stage &stage,
                     const Term &term, const Store &store) {
#if HR_ON_DEVICE
  __shared__ W staged[kBlockThreads];
  int t = threadIdx.x;
  for (int64_t e0 = 0; e0 < width; e0 += kBlockThreads) {
    int64_t e = e0 + t;
    A acc = A(0);
    for (int64_t j0 = 0; j0 < n; j0 += kBlockThreads) {
      int count = n - j0 < kBlockThreads ? int(n - j0) : kBlockThreads;
      if (t < count)
        staged[t] = stage(j0 + t);
      __syncthreads();
      if (e < width)
        for (int u = 0; u < count; ++u)
          acc += term(j0 + u, e, staged[u]);
      __syncthreads(); // the next chunk overwrites `staged`
    }
    if (e < width)
      store(e, acc);
  }
#else
  W staged[kBlockThreads];
  A acc[kBlockThreads];
  for (int64_t e0 = 0; e0 < width; e0 += kBlockThreads) {
    int lanes = int(std::min<int64_t>(kBlockThreads, width - e0));
    std::fill(acc, acc + lanes, A(0));
    for (int64_t j0 = 0; j0 < n; j0 += kBlockThreads) {
      int count = int(std::min<int64_t>(kBlockThreads, n - j0));
      for (int u = 0; u < count; ++u)
        staged[u] = stage(j0 + u);
      for (int t = 0; t < lanes; ++t)
        for (int u = 0; u < count; ++u)
          acc[t] += term(j0 + u, e0 + t, staged[u]);
    }
    for (int t = 0; t < lanes; ++t)
      store(e0 + t, acc[t]);
  }
#endif
}

/// x . y over n elements, in A.
template <typename A, typename T>
HR_HD A dot(const T *x, const T *y, int64_t n) {
  A sum = A(0);
  for (int64_t d = 0; d < n; ++d)
    sum += A(ld(x, d)) * A(ld(y, d));
  return sum;
}

//===----------------------------------------------------------------------===//
// The call
//===----------------------------------------------------------------------===//

/// What every body reads of a call: sizes, attributes, the bias and the
/// dropout draw (passed by value to the device).
struct Call {
  int64_t Heads = 1, KvHeads = 1, Group = 1, Sq = 0, Sk = 0, D = 0, Dv = 0;
  double Scale = 1;
  bool Causal = false, ZeroEmpty = false;
  /// The bias (f32, or f64 when BiasF64), or null; its element offset for
  /// batch b is sum_d digit_d(b) BatchStrides[d] over the batch axes.
  const void *Bias = nullptr;
  bool BiasF64 = false;
  int BatchRank = 0;
  int64_t BatchDims[kMaxDims] = {}, BatchStrides[kMaxDims] = {};
  int64_t HeadStride = 0, RowStride = 0, ColStride = 0;
  /// Dropout: keep when counterHash's top 32 bits are >= Threshold.
  bool Dropout = false;
  uint64_t Threshold = 0, RunSeed = 0, Stream = 0;
  double Keep = 1;
  const uint64_t *Step = nullptr;

  /// Keys row i reads: all, or 0..i when causal.
  HR_HD int64_t keysOf(int64_t i) const { return Causal ? i + 1 : Sk; }

  /// The bias offset of batch b's [H, Sq, Sk] block.
  HR_HD int64_t biasBatch(int64_t b) const {
    int64_t offset = 0;
    for (int d = BatchRank - 1; d >= 0; --d) {
      int64_t q = b / BatchDims[d];
      offset += (b - q * BatchDims[d]) * BatchStrides[d];
      b = q;
    }
    return offset;
  }

  /// scale q.k + bias[at + j ColStride], q and k rows of D elements; `at`
  /// is the bias offset of the row's key 0.
  template <typename A, typename T>
  HR_HD A score(const T *q, const T *k, int64_t at, int64_t j) const {
    A s = dot<A>(q, k, D) * A(Scale);
    if (Bias) {
      int64_t e = at + j * ColStride;
      s += BiasF64 ? A(static_cast<const double *>(Bias)[e])
                   : A(static_cast<const float *>(Bias)[e]);
    }
    return s;
  }

  /// The seed of this call's mask (read on the device: a CUDA graph replays
  /// the launch at every step).
  HR_HD uint64_t seed() const {
    return Dropout ? mixSeed(RunSeed, *Step, Stream) : 0;
  }

  /// The dropout factor of score (query row `row` = (b H + h) Sq + i, key
  /// j): 0 or 1 / (1 - ratio); 1 without dropout.
  template <typename A>
  HR_HD A factor(uint64_t seed, int64_t row, int64_t j) const {
    if (!Dropout)
      return A(1);
    uint64_t at = uint64_t(row * Sk + j);
    return (counterHash(seed, at) >> 32) >= Threshold ? A(Keep) : A(0);
  }
};

/// The call's sizes (into `s`) and attributes, with kernels/cpu's checks;
/// `first` is q's operand index (0 in the forward, 1 in the gradient).
llvm::Expected<Call> readCall(const KernelContext &ctx, unsigned first,
                              AttentionShape &s) {
  const TensorView &q = ctx.Inputs[first], &k = ctx.Inputs[first + 1],
                   &v = ctx.Inputs[first + 2];
  unsigned biasAt = first + (first ? 5 : 3);
  std::optional<llvm::ArrayRef<int64_t>> biasShape;
  Call c;
  if (ctx.hasInput(biasAt)) {
    const TensorView &bias = ctx.Inputs[biasAt];
    if (bias.Type != DType::F32 && bias.Type != DType::F64)
      return ctx.unsupported("bias of type " + dtypeName(bias.Type) +
                             " is not supported");
    biasShape = bias.Shape;
    c.Bias = bias.Data;
    c.BiasF64 = bias.Type == DType::F64;
  }
  auto shape = attentionShape(q.Shape, k.Shape, v.Shape, biasShape);
  if (!shape)
    return ctx.unsupported(llvm::toString(shape.takeError()));
  s = std::move(*shape);
  if (k.Type != q.Type || v.Type != q.Type)
    return ctx.unsupported("q, k and v must share an element type");
  if (s.BatchDims.size() > kMaxDims)
    return ctx.unsupported("more than " + llvm::Twine(kMaxDims) +
                           " batch axes are not supported");
  c.Heads = s.Heads;
  c.KvHeads = s.KvHeads;
  c.Group = s.group();
  c.Sq = s.Sq;
  c.Sk = s.Sk;
  c.D = s.D;
  c.Dv = s.Dv;
  auto attrs = attentionAttrs(ctx.Attrs, s);
  if (!attrs)
    return ctx.unsupported(llvm::toString(attrs.takeError()));
  c.Scale = attrs->Scale;
  c.Causal = attrs->Causal;
  c.ZeroEmpty = attrs->ZeroEmptyRows;
  if (attrs->Dropout > 0) {
    if (!ctx.Step)
      return ctx.unsupported("dropout needs the step counter");
    c.Dropout = true;
    c.Threshold = attrs->threshold();
    c.Keep = 1 / (1 - attrs->Dropout);
    c.Step = ctx.Step;
    c.RunSeed = ctx.RunSeed;
    c.Stream = ctx.RandomStream;
  }
  if (c.Bias) {
    // BiasBatchOffset is linear in the batch index's digits: the stride of
    // axis d is the offset of the index whose only nonzero digit is a 1 there.
    c.BatchRank = int(s.BatchDims.size());
    int64_t below = 1;
    for (int d = c.BatchRank - 1; d >= 0; --d) {
      c.BatchDims[d] = s.BatchDims[d];
      c.BatchStrides[d] = s.BatchDims[d] > 1 ? s.BiasBatchOffset[below] : 0;
      below *= s.BatchDims[d];
    }
    c.HeadStride = s.BiasHeadStride;
    c.RowStride = s.BiasRowStride;
    c.ColStride = s.BiasColStride;
  }
  return c;
}

/// An error unless `t` has `type` and `shape`.
Error checkView(const KernelContext &ctx, const TensorView &t,
                llvm::StringRef what, DType type,
                llvm::ArrayRef<int64_t> shape) {
  if (t.type() == TensorType(type, shape))
    return Error::success();
  return ctx.unsupported(what + " of type " + t.type().str() + " is not " +
                         TensorType(type, shape).str());
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// A block per query row: max, sum, then out = p~ v through stagedSum.
template <typename T> struct ForwardBody {
  using A = Accum<T>;
  Call C;
  const T *Q, *K, *V;
  T *Out;
  A *Lse;

  HR_HD void operator()(int64_t row, const Row &r) const {
    int64_t bh = row / C.Sq, i = row - bh * C.Sq;
    int64_t b = bh / C.Heads, h = bh - b * C.Heads;
    int64_t kv = b * C.KvHeads + h / C.Group;
    const T *q = Q + row * C.D, *k = K + kv * C.Sk * C.D,
            *v = V + kv * C.Sk * C.Dv;
    T *out = Out + row * C.Dv;
    int64_t n = C.keysOf(i);
    int64_t at =
        C.Bias ? C.biasBatch(b) + h * C.HeadStride + i * C.RowStride : 0;
    auto score = [&](int64_t j) { return C.score<A>(q, k + j * C.D, at, j); };
    A max = r.max<A>(n, score);
    if (max == -std::numeric_limits<A>::infinity()) {
      // No key to look at: NaN, as softmax of nothing, or 0 when asked (and
      // 0 with no keys at all, as the CPU's empty sum).
      A fill =
          C.ZeroEmpty || n == 0 ? A(0) : std::numeric_limits<A>::quiet_NaN();
      r.each(C.Dv, [&](int64_t e) { st(out, e, fill); });
      r.each(1, [&](int64_t) { Lse[row] = max; });
      return;
    }
    A sum = r.sum<A>(n, [&](int64_t j) { return mexp(score(j) - max); });
    A inv = A(1) / sum;
    uint64_t seed = C.seed();
    stagedSum<A, A>(
        n, C.Dv,
        [&](int64_t j) {
          return mexp(score(j) - max) * inv * C.factor<A>(seed, row, j);
        },
        [&](int64_t j, int64_t e, A p) { return p * A(ld(v, j * C.Dv + e)); },
        [&](int64_t e, A o) { st(out, e, o); });
    r.each(1, [&](int64_t) { Lse[row] = max + mlog(sum); });
  }
};

struct ForwardApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    AttentionShape s;
    auto call = readCall(Ctx, 0, s);
    if (!call)
      return call.takeError();
    DType t = Ctx.Inputs[0].Type;
    if (Error e = checkView(Ctx, Ctx.Outputs[0], "out", t, s.outShape()))
      return e;
    if (Error e = checkView(Ctx, Ctx.Outputs[1], "lse", attentionLseType(t),
                            s.lseShape()))
      return e;
    ForwardBody<T> body{*call,
                        Ctx.Inputs[0].as<T>(),
                        Ctx.Inputs[1].as<T>(),
                        Ctx.Inputs[2].as<T>(),
                        Ctx.Outputs[0].as<T>(),
                        Ctx.Outputs[1].as<Accum<T>>()};
    forEachRow(Ctx, s.Batch * s.Heads * s.Sq, body);
    return Error::success();
  }
};

/// FusedAttention(q, k, v, bias?) {scale, causal, dropout, zero_empty_rows}
/// -> (out, lse).
Error forward(const KernelContext &ctx) {
  return dispatch<cpu::FloatTypes>(ctx, ctx.Inputs[0].Type, ForwardApply{ctx});
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// What the backward's bodies read.
template <typename T> struct GradOperands {
  using A = Accum<T>;
  Call C;
  const T *Dout, *Q, *K, *V, *Out;
  const A *Lse;

  /// dout_row . out_row, by one thread / by the block.
  HR_HD A rowDot(int64_t row) const {
    return dot<A>(Dout + row * C.Dv, Out + row * C.Dv, C.Dv);
  }
  HR_HD A rowDot(int64_t row, const Row &r) const {
    const T *dout = Dout + row * C.Dv, *out = Out + row * C.Dv;
    return r.sum<A>(C.Dv,
                    [&](int64_t e) { return A(ld(dout, e)) * A(ld(out, e)); });
  }
};

/// RowDot[row] = dout_row . out_row, a block per query row.
template <typename T> struct RowDotBody {
  using A = Accum<T>;
  GradOperands<T> G;
  A *RowDot;

  HR_HD void operator()(int64_t row, const Row &r) const {
    A d = G.rowDot(row, r);
    r.each(1, [&](int64_t) { RowDot[row] = d; });
  }
};

/// A query row's weights for a key's dk (scale ds) and dv (p f).
template <typename A> struct KeyWeights {
  A Ds, Pf;
  int64_t Row; // (b H + h) Sq + i
};

/// dk_j = scale sum ds_ij q_i and dv_j = sum p_ij f_ij dout_i over the rows
/// i of the group's heads that see key j, a block per key row (b, kvh, j):
/// [dk_j, dv_j] is one stagedSum of D + Dv elements.
template <typename T> struct KeyGradBody {
  using A = Accum<T>;
  GradOperands<T> G;
  const A *RowDot; // or null: recomputed
  T *Dk, *Dv;

  HR_HD void operator()(int64_t row, const Row &) const {
    const Call &c = G.C;
    int64_t kv = row / c.Sk, j = row - kv * c.Sk;
    int64_t b = kv / c.KvHeads, kvh = kv - b * c.KvHeads;
    const T *k = G.K + row * c.D, *v = G.V + row * c.Dv;
    int64_t first = c.Causal ? j : 0, count = c.Sq - first;
    int64_t batchBias = c.Bias ? c.biasBatch(b) : 0;
    uint64_t seed = c.seed();
    auto stage = [&](int64_t t) {
      int64_t g = t / count, i = first + (t - g * count);
      int64_t h = kvh * c.Group + g, qrow = (b * c.Heads + h) * c.Sq + i;
      A l = G.Lse[qrow];
      if (c.ZeroEmpty && l == -std::numeric_limits<A>::infinity())
        return KeyWeights<A>{A(0), A(0), qrow}; // the row's output was 0
      int64_t at = batchBias + h * c.HeadStride + i * c.RowStride;
      A p = mexp(c.score<A>(G.Q + qrow * c.D, k, at, j) - l);
      A f = c.factor<A>(seed, qrow, j);
      A dp = dot<A>(G.Dout + qrow * c.Dv, v, c.Dv);
      A rd = RowDot ? RowDot[qrow] : G.rowDot(qrow);
      A ds = p * (dp * f - rd);
      return KeyWeights<A>{ds * A(c.Scale), p * f, qrow};
    };
    auto term = [&](int64_t, int64_t e, const KeyWeights<A> &w) {
      return e < c.D ? w.Ds * A(ld(G.Q, w.Row * c.D + e))
                     : w.Pf * A(ld(G.Dout, w.Row * c.Dv + (e - c.D)));
    };
    auto store = [&](int64_t e, A sum) {
      if (e < c.D)
        st(Dk + row * c.D, e, sum);
      else
        st(Dv + row * c.Dv, e - c.D, sum);
    };
    stagedSum<A, KeyWeights<A>>(c.Group * count, c.D + c.Dv, stage, term,
                                store);
  }
};

/// dq_i = scale sum_j ds_ij k_j, a block per query row.
template <typename T> struct QueryGradBody {
  using A = Accum<T>;
  GradOperands<T> G;
  T *Dq;

  HR_HD void operator()(int64_t row, const Row &r) const {
    const Call &c = G.C;
    int64_t bh = row / c.Sq, i = row - bh * c.Sq;
    int64_t b = bh / c.Heads, h = bh - b * c.Heads;
    int64_t kv = b * c.KvHeads + h / c.Group;
    const T *q = G.Q + row * c.D, *dout = G.Dout + row * c.Dv,
            *k = G.K + kv * c.Sk * c.D, *v = G.V + kv * c.Sk * c.Dv;
    int64_t at =
        c.Bias ? c.biasBatch(b) + h * c.HeadStride + i * c.RowStride : 0;
    A l = G.Lse[row];
    A rd = G.rowDot(row, r);
    // A row whose output was a constant 0 has no gradient.
    int64_t n = c.ZeroEmpty && l == -std::numeric_limits<A>::infinity()
                    ? 0
                    : c.keysOf(i);
    uint64_t seed = c.seed();
    stagedSum<A, A>(
        n, c.D,
        [&](int64_t j) {
          A p = mexp(c.score<A>(q, k + j * c.D, at, j) - l);
          A dp = dot<A>(dout, v + j * c.Dv, c.Dv);
          A ds = p * (dp * c.factor<A>(seed, row, j) - rd);
          return ds * A(c.Scale);
        },
        [&](int64_t j, int64_t e, A ds) { return ds * A(ld(k, j * c.D + e)); },
        [&](int64_t e, A sum) { st(Dq + row * c.D, e, sum); });
  }
};

/// d(bias): a thread per bias element sums ds_ij over the scores that read
/// it (the axes the bias broadcasts along), in (b, h, i, j) order. The
/// element's coordinates on the axes it does not broadcast come from its
/// offset (the bias is row-major over those axes).
template <typename T> struct BiasGradBody {
  using A = Accum<T>;
  GradOperands<T> G;
  const A *RowDot; // or null: recomputed
  void *DBias;
  int64_t Batch = 1;

  /// The coordinate of axis (stride, size) of offset e, or -1 (all) for a
  /// broadcast axis.
  HR_HD static int64_t coord(int64_t e, int64_t stride, int64_t size) {
    return stride ? (e / stride) % size : -1;
  }

  HR_HD void operator()(int64_t e) const {
    const Call &c = G.C;
    int64_t h0 = coord(e, c.HeadStride, c.Heads),
            i0 = coord(e, c.RowStride, c.Sq), j0 = coord(e, c.ColStride, c.Sk);
    int64_t batchAt = 0; // the element's offset along the batch axes
    for (int d = 0; d < c.BatchRank; ++d)
      if (c.BatchStrides[d])
        batchAt +=
            coord(e, c.BatchStrides[d], c.BatchDims[d]) * c.BatchStrides[d];
    uint64_t seed = c.seed();
    A sum = A(0);
    for (int64_t b = 0; b < Batch; ++b) {
      if (c.biasBatch(b) != batchAt)
        continue;
      for (int64_t h = h0 < 0 ? 0 : h0; h < (h0 < 0 ? c.Heads : h0 + 1); ++h) {
        int64_t kv = b * c.KvHeads + h / c.Group;
        const T *k = G.K + kv * c.Sk * c.D, *v = G.V + kv * c.Sk * c.Dv;
        for (int64_t i = i0 < 0 ? 0 : i0; i < (i0 < 0 ? c.Sq : i0 + 1); ++i) {
          int64_t qrow = (b * c.Heads + h) * c.Sq + i;
          A l = G.Lse[qrow];
          if (c.ZeroEmpty && l == -std::numeric_limits<A>::infinity())
            continue; // the row's output was a constant 0
          int64_t at = batchAt + h * c.HeadStride + i * c.RowStride;
          A rd = RowDot ? RowDot[qrow] : G.rowDot(qrow);
          for (int64_t j = j0 < 0 ? 0 : j0;
               j < (j0 < 0 ? c.keysOf(i) : (j0 < c.keysOf(i) ? j0 + 1 : j0));
               ++j) {
            A p = mexp(c.score<A>(G.Q + qrow * c.D, k + j * c.D, at, j) - l);
            A dp = dot<A>(G.Dout + qrow * c.Dv, v + j * c.Dv, c.Dv);
            sum += p * (dp * c.factor<A>(seed, qrow, j) - rd);
          }
        }
      }
    }
    if (c.BiasF64)
      static_cast<double *>(DBias)[e] = double(sum);
    else
      static_cast<float *>(DBias)[e] = float(sum);
  }
};

struct BackwardApply {
  const KernelContext &Ctx;
  template <typename T> Error apply() const {
    using A = Accum<T>;
    AttentionShape s;
    auto call = readCall(Ctx, 1, s);
    if (!call)
      return call.takeError();
    DType t = Ctx.Inputs[1].Type;
    if (Error e = checkView(Ctx, Ctx.Inputs[0], "dout", t, s.outShape()))
      return e;
    if (Error e = checkView(Ctx, Ctx.Inputs[4], "out", t, s.outShape()))
      return e;
    if (Error e = checkView(Ctx, Ctx.Inputs[5], "lse", attentionLseType(t),
                            s.lseShape()))
      return e;
    const char *names[] = {"dq", "dk", "dv"};
    for (unsigned i = 0; i < 3; ++i)
      if (Error e = checkView(Ctx, Ctx.Outputs[i], names[i], t,
                              Ctx.Inputs[1 + i].Shape))
        return e;
    GradOperands<T> g{*call,
                      Ctx.Inputs[0].as<T>(),
                      Ctx.Inputs[1].as<T>(),
                      Ctx.Inputs[2].as<T>(),
                      Ctx.Inputs[3].as<T>(),
                      Ctx.Inputs[4].as<T>(),
                      Ctx.Inputs[5].as<A>()};
    T *dq = Ctx.Outputs[0].as<T>();
    int64_t queries = s.Batch * s.Heads * s.Sq;
    // dq holds the rows' rowDot until the key pass has read it, when a row
    // of dq is wide enough (dq's buffer is aligned for any element type);
    // else the key pass recomputes it.
    A *rowDot = s.D * int64_t(sizeof(T)) >= int64_t(sizeof(A))
                    ? reinterpret_cast<A *>(dq)
                    : nullptr;
    if (rowDot)
      forEachRow(Ctx, queries, RowDotBody<T>{g, rowDot});
    forEachRow(Ctx, s.Batch * s.KvHeads * s.Sk,
               KeyGradBody<T>{g, rowDot, Ctx.Outputs[1].as<T>(),
                              Ctx.Outputs[2].as<T>()});
    if (Ctx.Outputs.size() > 3 && Ctx.Outputs[3].present()) {
      const TensorView &bias = Ctx.Inputs[6], &dbias = Ctx.Outputs[3];
      if (!Ctx.hasInput(6) || dbias.type() != bias.type())
        return Ctx.unsupported("dbias must have the bias's type");
      forEach(Ctx, dbias.numElements(),
              BiasGradBody<T>{g, rowDot, dbias.Data, s.Batch});
    }
    forEachRow(Ctx, queries, QueryGradBody<T>{g, dq});
    return Error::success();
  }
};

/// FusedAttentionGrad(dout, q, k, v, out, lse, bias?) {the forward's
/// attributes} -> (dq, dk, dv, dbias?).
Error backward(const KernelContext &ctx) {
  return dispatch<cpu::FloatTypes>(ctx, ctx.Inputs[1].Type, BackwardApply{ctx});
}

} // namespace

void cuda::registerAttentionKernels() {
  registerKernel("FusedAttention", forward);
  registerKernel("FusedAttentionGrad", backward);
}
