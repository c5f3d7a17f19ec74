//===- Attention.cpp - FusedAttention and its gradient on the CPU ---------===//
//
// Exact attention without the [.., Sq, Sk] scores (compiler/AttentionShape.h
// has the op's contract). The forward takes a block of kRows query rows of
// one head at a time: their scores against every key (kRows x Sk floats of
// scratch, linear in the sequence), the row's max-shifted exponentials as
// Softmax computes them, the dropout mask drawn as Dropout draws it, then
// out = p v; it keeps each row's log-sum-exp. The backward recomputes the
// same probabilities from lse a block at a time and forms dq = scale ds k,
// dk = scale dsT q and dv = p~T dout with ds = p (dp - rowsum(dout o out)),
// as FlashAttention-2's backward does.
//
// Threads split the forward by (batch, head, row blocks) and the backward by
// (batch, key/value head): a task owns every element it writes and sums in
// a fixed order, so results are the same bits on any number of threads. The
// inner products run eight lanes at a time, compiled for AVX-512, AVX2 and
// the baseline (function multiversioning, as kernels/cpu/VecMath.cpp).
//
//===----------------------------------------------------------------------===//
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/KernelUtil.h"
#include "kernels/cpu/Parallel.h"
#include "kernels/cpu/VecMath.h"

#include "compiler/AttentionShape.h"

#include <cmath>
#include <limits>
#include <vector>

using namespace headroom;
using namespace headroom::cpu;
using llvm::Error;

namespace {

/// Query rows computed together: each key row is loaded once per block.
constexpr int kRows = 4;

//===----------------------------------------------------------------------===//
// Inner loops
//===----------------------------------------------------------------------===//

/// s[r * lds + j] = x_r . y_j for r < rows, j < n: x has `rows` rows of
/// length d at stride d, y has n rows of length d at stride d. Eight
/// partial sums per product, added in a fixed order.
template <typename T>
inline __attribute__((always_inline)) void
dotRowsImpl(const T *x, int rows, const T *y, int64_t n, int64_t d, T *s,
            int64_t lds) {
  int64_t body = d - d % 8;
  for (int64_t j = 0; j < n; ++j) {
    const T *yj = y + j * d;
    T acc[kRows][8] = {};
    for (int64_t k = 0; k < body; k += 8)
      for (int r = 0; r < rows; ++r)
        for (int u = 0; u < 8; ++u)
          acc[r][u] += x[r * d + k + u] * yj[k + u];
    for (int r = 0; r < rows; ++r) {
      T sum = ((acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3])) +
              ((acc[r][4] + acc[r][5]) + (acc[r][6] + acc[r][7]));
      for (int64_t k = body; k < d; ++k)
        sum += x[r * d + k] * yj[k];
      s[r * lds + j] = sum;
    }
  }
}

/// y[i] += a_r x_r[i] summed over r < rows (in order), i < n.
template <typename T>
inline __attribute__((always_inline)) void
axpyRowsImpl(const T *a, int64_t lda, int rows, const T *x, int64_t ldx, T *y,
             int64_t n) {
  for (int r = 0; r < rows; ++r) {
    T ar = a[r * lda];
    if (ar == T(0))
      continue;
    const T *xr = x + r * ldx;
    for (int64_t i = 0; i < n; ++i)
      y[i] += ar * xr[i];
  }
}

template <typename T>
void dotRows(const T *x, int rows, const T *y, int64_t n, int64_t d, T *s,
             int64_t lds) {
  dotRowsImpl(x, rows, y, n, d, s, lds);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void
dotRows(const float *x, int rows, const float *y, int64_t n, int64_t d,
        float *s, int64_t lds) {
  dotRowsImpl(x, rows, y, n, d, s, lds);
}

template <typename T>
void axpyRows(const T *a, int64_t lda, int rows, const T *x, int64_t ldx, T *y,
              int64_t n) {
  axpyRowsImpl(a, lda, rows, x, ldx, y, n);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void
axpyRows(const float *a, int64_t lda, int rows, const float *x, int64_t ldx,
         float *y, int64_t n) {
  axpyRowsImpl(a, lda, rows, x, ldx, y, n);
}

/// For each j < n: y_j += sum over r < rows of a[r * lda + j] x_r (in r
/// order): the transposed product a^T x into rows of y, one y row loaded
/// once per block.
template <typename T>
void accumulateColumns(const T *a, int64_t lda, int rows, const T *x,
                       int64_t ldx, T *y, int64_t ldy, int64_t n,
                       int64_t width) {
  for (int64_t j = 0; j < n; ++j)
    axpyRows(a + j, lda, rows, x, ldx, y + j * ldy, width);
}

//===----------------------------------------------------------------------===//
// The call
//===----------------------------------------------------------------------===//

/// What both kernels read from a call: sizes, attributes and the bias.
struct Attention {
  AttentionShape S;
  double Scale = 1;
  bool Causal = false;
  bool ZeroEmptyRows = false;
  /// Dropout: keep when the hash's top 32 bits are >= Threshold.
  double Ratio = 0;
  uint64_t Threshold = 0;
  uint64_t Seed = 0;
  const TensorView *Bias = nullptr;

  /// Keys row i reads: all, or 0..i when causal.
  int64_t keysOf(int64_t i) const { return Causal ? i + 1 : S.Sk; }

  /// scores[r][j] = scale q_r.k_j + bias for the rows i0.. of head h of
  /// batch b and j < keysOf(i0 + r) (a row of scratch is Sk long).
  template <typename T>
  void scores(const T *q, const T *k, int64_t b, int64_t h, int64_t i0,
              int rows, T *s) const {
    int64_t n = keysOf(i0 + rows - 1);
    dotRows(q, rows, k, n, S.D, s, S.Sk);
    for (int r = 0; r < rows; ++r) {
      T *row = s + r * S.Sk;
      int64_t i = i0 + r, keys = keysOf(i);
      for (int64_t j = 0; j < keys; ++j)
        row[j] *= T(Scale);
      if (Bias) {
        int64_t at =
            S.BiasBatchOffset[b] + h * S.BiasHeadStride + i * S.BiasRowStride;
        if (Bias->Type == DType::F32)
          addBias(row, Bias->as<float>() + at, keys);
        else
          addBias(row, Bias->as<double>() + at, keys);
      }
    }
  }

  template <typename T, typename B>
  void addBias(T *row, const B *bias, int64_t n) const {
    for (int64_t j = 0; j < n; ++j)
      row[j] += T(bias[j * S.BiasColStride]);
  }

  /// The dropout factor of score (b, h, i, j): 0 or 1 / (1 - ratio).
  template <typename T>
  void dropoutFactors(int64_t b, int64_t h, int64_t i, int64_t n,
                      T *factor) const {
    T keep = T(1 / (1 - Ratio));
    uint64_t base = uint64_t(((b * S.Heads + h) * S.Sq + i) * S.Sk);
    for (int64_t j = 0; j < n; ++j)
      factor[j] = (counterHash(Seed, base + j) >> 32) >= Threshold ? keep : 0;
  }
};

llvm::Expected<Attention> readCall(const KernelContext &ctx, unsigned first) {
  const TensorView &q = ctx.Inputs[first], &k = ctx.Inputs[first + 1],
                   &v = ctx.Inputs[first + 2];
  unsigned biasAt = first + (first ? 5 : 3);
  std::optional<llvm::ArrayRef<int64_t>> biasShape;
  Attention a;
  if (ctx.hasInput(biasAt)) {
    a.Bias = &ctx.Inputs[biasAt];
    biasShape = a.Bias->Shape;
    if (a.Bias->Type != DType::F32 && a.Bias->Type != DType::F64)
      return ctx.unsupported("bias of type " + dtypeName(a.Bias->Type) +
                             " is not supported");
  }
  auto s = attentionShape(q.Shape, k.Shape, v.Shape, biasShape);
  if (!s)
    return ctx.unsupported(llvm::toString(s.takeError()));
  if (k.Type != q.Type || v.Type != q.Type)
    return ctx.unsupported("q, k and v must share an element type");
  a.S = std::move(*s);
  a.Scale = ctx.attrFloat("scale", 1.0 / std::sqrt(double(a.S.D)));
  a.Causal = ctx.attrInt("causal", 0) != 0;
  a.ZeroEmptyRows = ctx.attrInt("zero_empty_rows", 0) != 0;
  a.Ratio = ctx.attrFloat("dropout", 0);
  if (!(a.Ratio >= 0 && a.Ratio < 1))
    return ctx.unsupported("dropout " + std::to_string(a.Ratio) +
                           " is not in [0, 1)");
  if (a.Causal && a.S.Sq != a.S.Sk)
    return ctx.unsupported("causal attention needs as many queries as keys");
  a.Threshold = static_cast<uint64_t>(a.Ratio * 4294967296.0);
  a.Seed = ctx.Seed;
  return a;
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// One row's probabilities from its scores, in place, as Softmax computes
/// them; returns the log-sum-exp (-inf for a row with no key to look at,
/// whose probabilities are then NaN, or 0 with zero_empty_rows).
template <typename T> T softmaxInPlace(T *row, int64_t n, bool zeroEmpty) {
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j)
    max = std::max(max, row[j]);
  if (max == -std::numeric_limits<T>::infinity()) {
    std::fill(row, row + n,
              zeroEmpty ? T(0) : std::numeric_limits<T>::quiet_NaN());
    return max;
  }
  T sum = 0;
  if constexpr (std::is_same_v<T, float>) {
    sum = expShifted(row, max, row, n);
  } else {
    for (int64_t j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
  }
  T inv = T(1) / sum;
  for (int64_t j = 0; j < n; ++j)
    row[j] *= inv;
  return max + std::log(sum);
}

template <typename T> Error forward(const KernelContext &ctx) {
  auto call = readCall(ctx, 0);
  if (!call)
    return call.takeError();
  const Attention &a = *call;
  const AttentionShape &s = a.S;
  const T *q = ctx.Inputs[0].as<T>(), *k = ctx.Inputs[1].as<T>(),
          *v = ctx.Inputs[2].as<T>();
  T *out = ctx.Outputs[0].as<T>(), *lse = ctx.Outputs[1].as<T>();
  if (ctx.Outputs[1].Type != ctx.Inputs[0].Type)
    return ctx.unsupported("lse must have q's computed type");
  int64_t blocks = (s.Sq + kRows - 1) / kRows;
  int64_t tasks = s.Batch * s.Heads * blocks;
  int64_t grain = std::max<int64_t>(
      1, kParallelGrain / std::max<int64_t>(1, kRows * s.Sk * (s.D + s.Dv)));
  parallelFor(tasks, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> p(kRows * s.Sk), factor(a.Ratio > 0 ? s.Sk : 0);
    for (int64_t t = begin; t < end; ++t) {
      int64_t bh = t / blocks, i0 = (t % blocks) * kRows;
      int64_t b = bh / s.Heads, h = bh % s.Heads, kvh = h / s.group();
      int rows = int(std::min<int64_t>(kRows, s.Sq - i0));
      const T *qi = q + (bh * s.Sq + i0) * s.D;
      const T *kb = k + (b * s.KvHeads + kvh) * s.Sk * s.D;
      const T *vb = v + (b * s.KvHeads + kvh) * s.Sk * s.Dv;
      a.scores(qi, kb, b, h, i0, rows, p.data());
      int64_t n = a.keysOf(i0 + rows - 1);
      for (int r = 0; r < rows; ++r) {
        T *row = p.data() + r * s.Sk;
        lse[bh * s.Sq + i0 + r] =
            softmaxInPlace(row, a.keysOf(i0 + r), a.ZeroEmptyRows);
        std::fill(row + a.keysOf(i0 + r), row + n, T(0));
        if (a.Ratio > 0) {
          a.dropoutFactors(b, h, i0 + r, n, factor.data());
          for (int64_t j = 0; j < n; ++j)
            row[j] *= factor[j];
        }
      }
      T *o = out + (bh * s.Sq + i0) * s.Dv;
      std::fill(o, o + rows * s.Dv, T(0));
      // o_r = sum_j p_rj v_j.
      for (int r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j)
          axpyRows(&p[r * s.Sk + j], 0, 1, vb + j * s.Dv, 0, o + r * s.Dv,
                   s.Dv);
    }
  });
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

template <typename T> Error backward(const KernelContext &ctx) {
  auto call = readCall(ctx, 1);
  if (!call)
    return call.takeError();
  const Attention &a = *call;
  const AttentionShape &s = a.S;
  const T *dout = ctx.Inputs[0].as<T>(), *q = ctx.Inputs[1].as<T>(),
          *k = ctx.Inputs[2].as<T>(), *v = ctx.Inputs[3].as<T>(),
          *out = ctx.Inputs[4].as<T>(), *lse = ctx.Inputs[5].as<T>();
  if (ctx.Inputs[5].Type != ctx.Inputs[1].Type)
    return ctx.unsupported("lse must have q's computed type");
  T *dq = ctx.Outputs[0].as<T>(), *dk = ctx.Outputs[1].as<T>(),
    *dv = ctx.Outputs[2].as<T>();
  int64_t tasks = s.Batch * s.KvHeads;
  parallelFor(tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> p(kRows * s.Sk), dp(kRows * s.Sk), factor(s.Sk);
    for (int64_t t = begin; t < end; ++t) {
      int64_t b = t / s.KvHeads, kvh = t % s.KvHeads;
      const T *kb = k + t * s.Sk * s.D, *vb = v + t * s.Sk * s.Dv;
      T *dkb = dk + t * s.Sk * s.D, *dvb = dv + t * s.Sk * s.Dv;
      std::fill(dkb, dkb + s.Sk * s.D, T(0));
      std::fill(dvb, dvb + s.Sk * s.Dv, T(0));
      for (int64_t h = kvh * s.group(); h < (kvh + 1) * s.group(); ++h) {
        int64_t bh = b * s.Heads + h;
        for (int64_t i0 = 0; i0 < s.Sq; i0 += kRows) {
          int rows = int(std::min<int64_t>(kRows, s.Sq - i0));
          int64_t n = a.keysOf(i0 + rows - 1);
          const T *qi = q + (bh * s.Sq + i0) * s.D;
          const T *doi = dout + (bh * s.Sq + i0) * s.Dv;
          const T *oi = out + (bh * s.Sq + i0) * s.Dv;
          T *dqi = dq + (bh * s.Sq + i0) * s.D;
          a.scores(qi, kb, b, h, i0, rows, p.data());
          dotRows(doi, rows, vb, n, s.Dv, dp.data(), s.Sk);
          for (int r = 0; r < rows; ++r) {
            T *pr = p.data() + r * s.Sk, *dpr = dp.data() + r * s.Sk;
            T l = lse[bh * s.Sq + i0 + r];
            int64_t keys = a.keysOf(i0 + r);
            T rowDot = 0; // sum_j p_j dp_j = dout_r . out_r
            for (int64_t d = 0; d < s.Dv; ++d)
              rowDot += doi[r * s.Dv + d] * oi[r * s.Dv + d];
            if (l == -std::numeric_limits<T>::infinity() && a.ZeroEmptyRows)
              keys = 0; // the row's output was a constant 0
            if (a.Ratio > 0)
              a.dropoutFactors(b, h, i0 + r, keys, factor.data());
            for (int64_t j = 0; j < keys; ++j) {
              T pj = std::exp(pr[j] - l);
              T f = a.Ratio > 0 ? factor[j] : T(1);
              // ds = p (dp - rowDot); p~ = p f for dv.
              T dsj = pj * (dpr[j] * f - rowDot);
              pr[j] = pj * f;
              dpr[j] = dsj * T(a.Scale);
            }
            std::fill(pr + keys, pr + n, T(0));
            std::fill(dpr + keys, dpr + n, T(0));
            // dq_r = scale sum_j ds_rj k_j.
            std::fill(dqi + r * s.D, dqi + (r + 1) * s.D, T(0));
            for (int64_t j = 0; j < keys; ++j)
              axpyRows(dpr + j, 0, 1, kb + j * s.D, 0, dqi + r * s.D, s.D);
          }
          // dk_j += scale sum_r ds_rj q_r; dv_j += sum_r p~_rj dout_r.
          accumulateColumns(dp.data(), s.Sk, rows, qi, s.D, dkb, s.D, n, s.D);
          accumulateColumns(p.data(), s.Sk, rows, doi, s.Dv, dvb, s.Dv, n,
                            s.Dv);
        }
      }
    }
  });
  return Error::success();
}

Error forwardKernel(const KernelContext &ctx) {
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[0].Type, forward, ctx);
}

Error backwardKernel(const KernelContext &ctx) {
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[1].Type, backward, ctx);
}

} // namespace

void headroom::cpu::registerAttentionKernels() {
  registerKernel("FusedAttention", forwardKernel, FloatSupport::F32F64);
  registerKernel("FusedAttentionGrad", backwardKernel, FloatSupport::F32F64);
}
