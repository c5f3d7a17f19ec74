//===- Attention.cu - FusedAttention and its gradient on CUDA -------------===//
//
// FusedAttention(q, k, v, bias?) -> (out, lse) and FusedAttentionGrad with
// kernels/cpu/Attention.cpp's math (compiler/AttentionShape.h has the op's
// contract): scores scale q.k + bias over the row's keys (0..i when causal),
// each row's log-sum-exp kept for the backward, the dropout mask drawn as
// Dropout draws it (counterHash at ((b H + h) Sq + i) Sk + j, seeded with
// mixSeed(run seed, step, stream)), zero_empty_rows.
//
// FlashAttention-2's tiling (Dao 2023), three kinds of blocks, each on a
// tile of Br query rows and Bc keys in shared memory (kernels/cuda/
// BlockGemm.h: tensor cores for f16/bf16 on the GPU, f32 accumulation):
//  - Forward: a block per (b, h, query tile) stages q once and walks the
//    key tiles (up to the diagonal when causal): s = q kT, then a thread per
//    row folds the tile into its running max and sum (online softmax; p
//    times the dropout factor kept in the operand type) and rescales its
//    out accumulator, and out += p v. Last, out / sum and lse = max + log
//    sum per row.
//  - Backward: rowDot_i = dout_i . out_i per query row, parked in dq's
//    buffer until the key pass and d(bias) (a thread per bias element, for a
//    trained bias) have read it (as LayerNormalizationGrad keeps its
//    statistics in dx). A block per (b, kv head, key tile) keeps dk and dv
//    in shared memory and walks the group's heads and their query tiles:
//    s = q kT and g = dout vT recomputed, p = exp(scale s + bias - lse), ds =
//    p (g f - rowDot), dv += (p f)T dout, dk += scale dsT q. Last, a block
//    per (b, h, query tile) recomputes its rowDot and the tiles' ds and sums
//    dq = scale ds k over the key tiles. Every sum has one owner and a fixed
//    order: no atomics, the same bits on every run.
// Tiles are the largest of 64 x 64 down to 16 x 16 whose operands fit in
// 96 KiB (kTileSharedBytes): in bf16, heads of 64 take 64 x 64 (forward)
// and 64 x 32, heads of 128 take 64 x 32 and 32 x 32. Heads too wide for
// even 16 x 16 tiles (f32 beyond ~200 elements, f64 beyond ~100) run the
// untiled bodies, a block per row: scores
// recomputed from q and k for each pass and products summed through
// stagedSum.
// Nothing is [.., Sq, Sk] and no workspace is planned: memory stays linear
// in the sequence.
//
// f16, bf16 and f32 compute in f32, f64 in f64 (Accum<T>); lse is f32 (f64
// for f64 q), the bias f32 or f64.
//
//===----------------------------------------------------------------------===//
#include "kernels/cuda/BlockGemm.h"
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

  /// The bias offset of query row i of head h in batch b (of its key 0).
  HR_HD int64_t biasRow(int64_t b, int64_t h, int64_t i) const {
    return Bias ? biasBatch(b) + h * HeadStride + i * RowStride : 0;
  }

  /// scale dot + bias[at + j ColStride]; `at` is the bias offset of the
  /// row's key 0.
  template <typename A> HR_HD A scaled(A dot, int64_t at, int64_t j) const {
    A s = dot * A(Scale);
    if (Bias) {
      int64_t e = at + j * ColStride;
      s += BiasF64 ? A(static_cast<const double *>(Bias)[e])
                   : A(static_cast<const float *>(Bias)[e]);
    }
    return s;
  }

  /// scale q.k + bias, q and k rows of D elements.
  template <typename A, typename T>
  HR_HD A score(const T *q, const T *k, int64_t at, int64_t j) const {
    return scaled(dot<A>(q, k, D), at, j);
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

//===----------------------------------------------------------------------===//
// Tiled kernels
//===----------------------------------------------------------------------===//

/// (query rows, keys) of a tile, largest first: the first whose operands fit
/// in kTileSharedBytes is taken.
constexpr int64_t kTileSizes[][2] = {
    {64, 64}, {64, 32}, {32, 32}, {32, 16}, {16, 16}};

/// The three tiled passes.
enum class Pass { Forward, Keys, Queries };

/// A tiled pass's sizes and the place of its operands in shared memory.
/// Rows of q, k, v and dout are staged as D and Dv padded to multiples of
/// 16 with zeros (Dp, Dvp), tiles of Br query rows and Bc keys; every row is
/// stored with its lead().
struct Tiles {
  int64_t Br = 0, Bc = 0, Dp = 0, Dvp = 0;
  /// Leading dimensions: T rows of Dp, Dvp and Bc elements; A rows of the
  /// same.
  int64_t LdD = 0, LdDv = 0, LdS = 0, LdAD = 0, LdADv = 0, LdAS = 0;
  /// Offsets: staged q, k, v and dout (T); scores and dout.v (A); p or p f
  /// and ds (T); one or two accumulators (A: out; dk and dv; dq); per-row
  /// statistics (A).
  int64_t Q = 0, K = 0, V = 0, Dout = 0, S = 0, G = 0, P = 0, Ds = 0, Acc1 = 0,
          Acc2 = 0, Stats = 0;
  int64_t Bytes = 0;
};

/// The largest tiles of `pass` that fit, or none (heads too wide: the
/// untiled bodies run).
template <typename T>
std::optional<Tiles> pickTiles(Pass pass, int64_t d, int64_t dv) {
  using A = Accum<T>;
  int64_t tb = sizeof(T), ab = sizeof(A);
  for (const auto &size : kTileSizes) {
    Tiles t;
    t.Br = size[0];
    t.Bc = size[1];
    t.Dp = roundUp(d, 16);
    t.Dvp = roundUp(dv, 16);
    t.LdD = lead(t.Dp, tb);
    t.LdDv = lead(t.Dvp, tb);
    t.LdS = lead(t.Bc, tb);
    t.LdAD = lead(t.Dp, ab);
    t.LdADv = lead(t.Dvp, ab);
    t.LdAS = lead(t.Bc, ab);
    SharedLayout m;
    t.Q = m.take<T>(t.Br * t.LdD);
    t.K = m.take<T>(t.Bc * t.LdD);
    t.V = m.take<T>(t.Bc * t.LdDv);
    t.S = m.take<A>(t.Br * t.LdAS);
    switch (pass) {
    case Pass::Forward:
      t.P = m.take<T>(t.Br * t.LdS);
      t.Acc1 = m.take<A>(t.Br * t.LdADv);
      t.Stats = m.take<A>(3 * t.Br);
      break;
    case Pass::Keys:
      t.Dout = m.take<T>(t.Br * t.LdDv);
      t.G = m.take<A>(t.Br * t.LdAS);
      t.P = m.take<T>(t.Br * t.LdS);
      t.Ds = m.take<T>(t.Br * t.LdS);
      t.Acc1 = m.take<A>(t.Bc * t.LdAD);
      t.Acc2 = m.take<A>(t.Bc * t.LdADv);
      t.Stats = m.take<A>(2 * t.Br);
      break;
    case Pass::Queries:
      t.Dout = m.take<T>(t.Br * t.LdDv);
      t.G = m.take<A>(t.Br * t.LdAS);
      t.Ds = m.take<T>(t.Br * t.LdS);
      t.Acc1 = m.take<A>(t.Br * t.LdAD);
      t.Stats = m.take<A>(2 * t.Br);
      break;
    }
    t.Bytes = m.Bytes;
    if (t.Bytes <= kTileSharedBytes)
      return t;
  }
  return std::nullopt;
}

/// Stages `count` rows of n elements from src (of which `valid` exist) as
/// rows of `width` with leading dimension ld, zeros past the valid rows and
/// past n.
template <typename T>
HR_HD void stage(const Row &r, T *dst, int64_t ld, const T *src, int64_t valid,
                 int64_t count, int64_t n, int64_t width) {
  r.each(count * width, [&](int64_t e) {
    int64_t i = e / width, d = e - i * width;
    dst[i * ld + d] = i < valid && d < n ? src[i * n + d] : T{};
  });
}

/// Zeros rows x width of an accumulator with leading dimension ld.
template <typename A>
HR_HD void zero(const Row &r, A *acc, int64_t ld, int64_t rows, int64_t width) {
  r.each(rows * width, [&](int64_t e) {
    int64_t i = e / width;
    acc[i * ld + (e - i * width)] = A(0);
  });
}

/// Writes rows x n of an accumulator (times scale) to dst (rows of n).
template <typename T, typename A>
HR_HD void unstage(const Row &r, T *dst, const A *acc, int64_t ld, int64_t rows,
                   int64_t n) {
  r.each(rows * n, [&](int64_t e) {
    int64_t i = e / n, d = e - i * n;
    st(dst, i * n + d, acc[i * ld + d]);
  });
}

/// FlashAttention-2's forward, a block per (b, h, tile of Br query rows):
/// q staged once; for each tile of Bc keys, k and v staged, s = q kT
/// (blockGemm), a thread per row folds the tile into its running max m and
/// sum l (scale, bias, mask; p = exp(s - m), times the dropout factor, kept
/// in T for the tensor cores) and rescales its out accumulator by
/// exp(m_old - m); out += p v (blockGemm). Last, out / l and lse = m + log l.
template <typename T> struct TiledForwardBody {
  using A = Accum<T>;
  Call C;
  Tiles L;
  const T *Q, *K, *V;
  T *Out;
  A *Lse;
  int64_t QueryTiles;

  HR_HD void operator()(int64_t tile, const Row &r,
                        unsigned char *shared) const {
    int64_t bh = tile / QueryTiles, i0 = (tile - bh * QueryTiles) * L.Br;
    int64_t b = bh / C.Heads, h = bh - b * C.Heads;
    int64_t kv = b * C.KvHeads + h / C.Group;
    int64_t rows = C.Sq - i0 < L.Br ? C.Sq - i0 : L.Br;
    T *qs = region<T>(shared, L.Q), *ks = region<T>(shared, L.K),
      *vs = region<T>(shared, L.V), *p = region<T>(shared, L.P);
    A *s = region<A>(shared, L.S), *o = region<A>(shared, L.Acc1);
    A *m = region<A>(shared, L.Stats), *l = m + L.Br, *alpha = l + L.Br;
    const T *k = K + kv * C.Sk * C.D, *v = V + kv * C.Sk * C.Dv;
    const A inf = std::numeric_limits<A>::infinity();
    stage(r, qs, L.LdD, Q + (bh * C.Sq + i0) * C.D, rows, L.Br, C.D, L.Dp);
    zero(r, o, L.LdADv, L.Br, L.Dvp);
    r.each(L.Br, [&](int64_t i) {
      m[i] = -inf;
      l[i] = A(0);
    });
    uint64_t seed = C.seed();
    int64_t keyEnd = C.Causal && i0 + L.Br < C.Sk ? i0 + L.Br : C.Sk;
    for (int64_t j0 = 0; j0 < keyEnd; j0 += L.Bc) {
      int64_t cols = C.Sk - j0 < L.Bc ? C.Sk - j0 : L.Bc;
      stage(r, ks, L.LdD, k + j0 * C.D, cols, L.Bc, C.D, L.Dp);
      stage(r, vs, L.LdDv, v + j0 * C.Dv, cols, L.Bc, C.Dv, L.Dvp);
      blockGemm<false, true>(r, L.Br, L.Bc, L.Dp, qs, L.LdD, ks, L.LdD, s,
                             L.LdAS, false);
      r.each(L.Br, [&](int64_t i) {
        A *srow = s + i * L.LdAS;
        T *prow = p + i * L.LdS;
        int64_t n = i < rows ? C.keysOf(i0 + i) - j0 : 0;
        n = n < 0 ? 0 : n < cols ? n : cols;
        int64_t at = C.biasRow(b, h, i0 + i);
        A mx = m[i];
        for (int64_t j = 0; j < n; ++j) {
          A sc = C.scaled(srow[j], at, j0 + j);
          srow[j] = sc;
          mx = sc > mx || sc != sc ? sc : mx;
        }
        if (mx == -inf) { // no key seen yet: nothing to add
          alpha[i] = A(1);
          for (int64_t j = 0; j < L.Bc; ++j)
            prow[j] = T{};
          return;
        }
        A a = mexp(m[i] - mx), sum = A(0);
        int64_t row = bh * C.Sq + i0 + i;
        for (int64_t j = 0; j < n; ++j) {
          A e = mexp(srow[j] - mx);
          sum += e;
          st(prow, j, e * C.factor<A>(seed, row, j0 + j));
        }
        for (int64_t j = n; j < L.Bc; ++j)
          prow[j] = T{};
        m[i] = mx;
        l[i] = l[i] * a + sum;
        alpha[i] = a;
      });
      r.each(L.Br * L.Dvp, [&](int64_t e) {
        int64_t i = e / L.Dvp;
        o[i * L.LdADv + (e - i * L.Dvp)] *= alpha[i];
      });
      blockGemm<false, false>(r, L.Br, L.Dvp, L.Bc, p, L.LdS, vs, L.LdDv, o,
                              L.LdADv, true);
    }
    T *out = Out + (bh * C.Sq + i0) * C.Dv;
    r.each(rows * C.Dv, [&](int64_t e) {
      int64_t i = e / C.Dv, d = e - i * C.Dv;
      // A row that saw no key: NaN, as softmax of nothing, or 0 when asked
      // (and 0 with no keys at all, as the CPU's empty sum).
      A value = m[i] != -inf ? o[i * L.LdADv + d] / l[i]
                : C.ZeroEmpty || C.keysOf(i0 + i) == 0
                    ? A(0)
                    : std::numeric_limits<A>::quiet_NaN();
      st(out, e, value);
    });
    r.each(rows, [&](int64_t i) {
      Lse[bh * C.Sq + i0 + i] = m[i] == -inf ? m[i] : m[i] + mlog(l[i]);
    });
  }
};

/// What both tiled backward passes compute of a tile of Br query rows
/// (from i0, `rows` of them, of head h in batch b) against Bc keys (from
/// j0, `cols` of them), after s = q kT and g = dout vT: ds = p (g f - rowDot)
/// times scale (T, for dq and dk) and p f (T, for dv; when pf is not
/// null), zero where the score is masked or the row's output was a constant
/// 0.
template <typename T> struct TileWeights {
  using A = Accum<T>;
  const GradOperands<T> &G;
  const Tiles &L;
  int64_t b, h, i0, rows, j0, cols;
  uint64_t Seed;

  HR_HD void operator()(const Row &r, const A *s, const A *g, const A *lse,
                        const A *rowDot, T *ds, T *pf) const {
    const Call &c = G.C;
    int64_t bh = b * c.Heads + h;
    r.each(L.Br * L.Bc, [&](int64_t e) {
      int64_t i = e / L.Bc, jj = e - i * L.Bc, qi = i0 + i, j = j0 + jj;
      T *dsAt = ds + i * L.LdS + jj, *pfAt = pf ? pf + i * L.LdS + jj : nullptr;
      A l = i < rows ? lse[i] : A(0);
      if (i >= rows || jj >= cols || (c.Causal && j > qi) ||
          (c.ZeroEmpty && l == -std::numeric_limits<A>::infinity())) {
        *dsAt = T{};
        if (pfAt)
          *pfAt = T{};
        return;
      }
      A sc = c.scaled(s[i * L.LdAS + jj], c.biasRow(b, h, qi), j);
      A p = mexp(sc - l);
      A f = c.factor<A>(Seed, bh * c.Sq + qi, j);
      st(dsAt, 0, p * (g[i * L.LdAS + jj] * f - rowDot[i]) * A(c.Scale));
      if (pfAt)
        st(pfAt, 0, p * f);
    });
  }
};

/// dk and dv, a block per (b, kv head, tile of Bc keys): k and v staged
/// once, dk and dv accumulated in shared memory over the group's heads and
/// their query tiles (from the tile holding key j0 when causal): s = q kT,
/// g = dout vT, the weights, dv += (p f)T dout, dk += dsT q. rowDot comes
/// from the forward pass over rows (parked in dq) or is recomputed.
template <typename T> struct TiledKeyGradBody {
  using A = Accum<T>;
  GradOperands<T> G;
  Tiles L;
  const A *RowDot; // or null: recomputed
  T *Dk, *Dv;
  int64_t KeyTiles;

  HR_HD void operator()(int64_t tile, const Row &r,
                        unsigned char *shared) const {
    const Call &c = G.C;
    int64_t kv = tile / KeyTiles, j0 = (tile - kv * KeyTiles) * L.Bc;
    int64_t b = kv / c.KvHeads, kvh = kv - b * c.KvHeads;
    int64_t cols = c.Sk - j0 < L.Bc ? c.Sk - j0 : L.Bc;
    T *qs = region<T>(shared, L.Q), *ks = region<T>(shared, L.K),
      *vs = region<T>(shared, L.V), *dos = region<T>(shared, L.Dout),
      *pf = region<T>(shared, L.P), *ds = region<T>(shared, L.Ds);
    A *s = region<A>(shared, L.S), *g = region<A>(shared, L.G),
      *dk = region<A>(shared, L.Acc1), *dv = region<A>(shared, L.Acc2),
      *lse = region<A>(shared, L.Stats), *rd = lse + L.Br;
    stage(r, ks, L.LdD, G.K + (kv * c.Sk + j0) * c.D, cols, L.Bc, c.D, L.Dp);
    stage(r, vs, L.LdDv, G.V + (kv * c.Sk + j0) * c.Dv, cols, L.Bc, c.Dv,
          L.Dvp);
    zero(r, dk, L.LdAD, L.Bc, L.Dp);
    zero(r, dv, L.LdADv, L.Bc, L.Dvp);
    uint64_t seed = c.seed();
    int64_t first = c.Causal ? j0 / L.Br * L.Br : 0;
    for (int64_t gh = 0; gh < c.Group; ++gh) {
      int64_t h = kvh * c.Group + gh, bh = b * c.Heads + h;
      for (int64_t i0 = first; i0 < c.Sq; i0 += L.Br) {
        int64_t rows = c.Sq - i0 < L.Br ? c.Sq - i0 : L.Br;
        int64_t row0 = bh * c.Sq + i0;
        stage(r, qs, L.LdD, G.Q + row0 * c.D, rows, L.Br, c.D, L.Dp);
        stage(r, dos, L.LdDv, G.Dout + row0 * c.Dv, rows, L.Br, c.Dv, L.Dvp);
        r.each(rows, [&](int64_t i) {
          lse[i] = G.Lse[row0 + i];
          rd[i] = RowDot ? RowDot[row0 + i] : G.rowDot(row0 + i);
        });
        blockGemm<false, true>(r, L.Br, L.Bc, L.Dp, qs, L.LdD, ks, L.LdD, s,
                               L.LdAS, false);
        blockGemm<false, true>(r, L.Br, L.Bc, L.Dvp, dos, L.LdDv, vs, L.LdDv, g,
                               L.LdAS, false);
        TileWeights<T>{G, L, b, h, i0, rows, j0, cols, seed}(r, s, g, lse, rd,
                                                             ds, pf);
        blockGemm<true, false>(r, L.Bc, L.Dvp, L.Br, pf, L.LdS, dos, L.LdDv, dv,
                               L.LdADv, true);
        blockGemm<true, false>(r, L.Bc, L.Dp, L.Br, ds, L.LdS, qs, L.LdD, dk,
                               L.LdAD, true);
      }
    }
    unstage(r, Dk + (kv * c.Sk + j0) * c.D, dk, L.LdAD, cols, c.D);
    unstage(r, Dv + (kv * c.Sk + j0) * c.Dv, dv, L.LdADv, cols, c.Dv);
  }
};

/// dq, a block per (b, h, tile of Br query rows): q and dout staged once,
/// rowDot recomputed (dq's buffer is being written), dq accumulated over
/// the key tiles (up to the diagonal when causal): s = q kT, g = dout vT,
/// the weights, dq += ds k.
template <typename T> struct TiledQueryGradBody {
  using A = Accum<T>;
  GradOperands<T> G;
  Tiles L;
  T *Dq;
  int64_t QueryTiles;

  HR_HD void operator()(int64_t tile, const Row &r,
                        unsigned char *shared) const {
    const Call &c = G.C;
    int64_t bh = tile / QueryTiles, i0 = (tile - bh * QueryTiles) * L.Br;
    int64_t b = bh / c.Heads, h = bh - b * c.Heads;
    int64_t kv = b * c.KvHeads + h / c.Group;
    int64_t rows = c.Sq - i0 < L.Br ? c.Sq - i0 : L.Br, row0 = bh * c.Sq + i0;
    T *qs = region<T>(shared, L.Q), *ks = region<T>(shared, L.K),
      *vs = region<T>(shared, L.V), *dos = region<T>(shared, L.Dout),
      *ds = region<T>(shared, L.Ds);
    A *s = region<A>(shared, L.S), *g = region<A>(shared, L.G),
      *dq = region<A>(shared, L.Acc1), *lse = region<A>(shared, L.Stats),
      *rd = lse + L.Br;
    const T *k = G.K + kv * c.Sk * c.D, *v = G.V + kv * c.Sk * c.Dv;
    stage(r, qs, L.LdD, G.Q + row0 * c.D, rows, L.Br, c.D, L.Dp);
    stage(r, dos, L.LdDv, G.Dout + row0 * c.Dv, rows, L.Br, c.Dv, L.Dvp);
    zero(r, dq, L.LdAD, L.Br, L.Dp);
    r.each(rows, [&](int64_t i) {
      lse[i] = G.Lse[row0 + i];
      rd[i] = G.rowDot(row0 + i);
    });
    uint64_t seed = c.seed();
    int64_t keyEnd = c.Causal && i0 + L.Br < c.Sk ? i0 + L.Br : c.Sk;
    for (int64_t j0 = 0; j0 < keyEnd; j0 += L.Bc) {
      int64_t cols = c.Sk - j0 < L.Bc ? c.Sk - j0 : L.Bc;
      stage(r, ks, L.LdD, k + j0 * c.D, cols, L.Bc, c.D, L.Dp);
      stage(r, vs, L.LdDv, v + j0 * c.Dv, cols, L.Bc, c.Dv, L.Dvp);
      blockGemm<false, true>(r, L.Br, L.Bc, L.Dp, qs, L.LdD, ks, L.LdD, s,
                             L.LdAS, false);
      blockGemm<false, true>(r, L.Br, L.Bc, L.Dvp, dos, L.LdDv, vs, L.LdDv, g,
                             L.LdAS, false);
      TileWeights<T>{G, L, b, h, i0, rows, j0, cols, seed}(r, s, g, lse, rd, ds,
                                                           nullptr);
      blockGemm<false, false>(r, L.Br, L.Dp, L.Bc, ds, L.LdS, ks, L.LdD, dq,
                              L.LdAD, true);
    }
    unstage(r, Dq + row0 * c.D, dq, L.LdAD, rows, c.D);
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
    const T *q = Ctx.Inputs[0].as<T>(), *k = Ctx.Inputs[1].as<T>(),
            *v = Ctx.Inputs[2].as<T>();
    T *out = Ctx.Outputs[0].as<T>();
    Accum<T> *lse = Ctx.Outputs[1].as<Accum<T>>();
    if (auto tiles = pickTiles<T>(Pass::Forward, s.D, s.Dv)) {
      int64_t queryTiles = (s.Sq + tiles->Br - 1) / tiles->Br;
      forEachTile(
          Ctx, s.Batch * s.Heads * queryTiles, tiles->Bytes,
          TiledForwardBody<T>{*call, *tiles, q, k, v, out, lse, queryTiles});
      return Error::success();
    }
    forEachRow(Ctx, s.Batch * s.Heads * s.Sq,
               ForwardBody<T>{*call, q, k, v, out, lse});
    return Error::success();
  }
};

/// FusedAttention(q, k, v, bias?) {scale, causal, dropout, zero_empty_rows}
/// -> (out, lse).
Error forward(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[0].Type,
                                       ForwardApply{ctx});
}

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
    T *dk = Ctx.Outputs[1].as<T>(), *dv = Ctx.Outputs[2].as<T>();
    if (auto tiles = pickTiles<T>(Pass::Keys, s.D, s.Dv)) {
      int64_t keyTiles = (s.Sk + tiles->Bc - 1) / tiles->Bc;
      forEachTile(Ctx, s.Batch * s.KvHeads * keyTiles, tiles->Bytes,
                  TiledKeyGradBody<T>{g, *tiles, rowDot, dk, dv, keyTiles});
    } else {
      forEachRow(Ctx, s.Batch * s.KvHeads * s.Sk,
                 KeyGradBody<T>{g, rowDot, dk, dv});
    }
    if (Ctx.Outputs.size() > 3 && Ctx.Outputs[3].present()) {
      const TensorView &bias = Ctx.Inputs[6], &dbias = Ctx.Outputs[3];
      if (!Ctx.hasInput(6) || dbias.type() != bias.type())
        return Ctx.unsupported("dbias must have the bias's type");
      forEach(Ctx, dbias.numElements(),
              BiasGradBody<T>{g, rowDot, dbias.Data, s.Batch});
    }
    if (auto tiles = pickTiles<T>(Pass::Queries, s.D, s.Dv)) {
      int64_t queryTiles = (s.Sq + tiles->Br - 1) / tiles->Br;
      forEachTile(Ctx, s.Batch * s.Heads * queryTiles, tiles->Bytes,
                  TiledQueryGradBody<T>{g, *tiles, dq, queryTiles});
      return Error::success();
    }
    forEachRow(Ctx, queries, QueryGradBody<T>{g, dq});
    return Error::success();
  }
};

/// FusedAttentionGrad(dout, q, k, v, out, lse, bias?) {the forward's
/// attributes} -> (dq, dk, dv, dbias?).
Error backward(const KernelContext &ctx) {
  return dispatch<kernels::FloatTypes>(ctx, ctx.Inputs[1].Type,
                                       BackwardApply{ctx});
}

} // namespace

void cuda::registerAttentionKernels() {
  registerKernel(OpKind::FusedAttention, forward);
  registerKernel(OpKind::FusedAttentionGrad, backward);
}
