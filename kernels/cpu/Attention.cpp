//===- Attention.cpp - FusedAttention and its gradient on the CPU ---------===//
//
// Exact attention without the [.., Sq, Sk] scores (compiler/AttentionShape.h
// has the op's contract). The forward takes a block of kRows query rows of
// one head at a time: their scores against the keys they may read (one
// OpenBLAS GEMM into kRows x Sk floats of scratch: linear in the sequence),
// each row's max-shifted exponentials as Softmax computes them, the dropout
// mask drawn as Dropout draws it, then out = p v (a second GEMM); it keeps
// each row's log-sum-exp. The backward recomputes the same probabilities
// from lse a block at a time and forms dq = scale ds k, dk += scale dsT q and
// dv += p~T dout with ds = p (dp - rowsum(dout o out)), as FlashAttention-2's
// backward does (five GEMMs per block), and d(bias) += ds at the bias
// element each score read when the bias is trained.
//
// Blocks run one after another in a fixed order and OpenBLAS's threads split
// each GEMM's rows and columns (never its sums), so the results are the same
// bits on any number of threads, as for MatMul.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/KernelUtil.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/VecMath.h"

#include "compiler/AttentionShape.h"

#include <cblas.h>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace headroom;
using namespace headroom::cpu;
using llvm::Error;

namespace {

/// Query rows per block: each block is a few GEMMs of kRows rows (128: on
/// the zoo GPT-2 at seq 512 and 1024, fused steps are then as fast as or
/// faster than unfused ones, bench/attention.py).
constexpr int kRows = 128;

/// Row-major C = alpha op(A) op(B) + beta C (OpenBLAS), for float and
/// double.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
          const float *a, int64_t lda, const float *b, int64_t ldb, double beta,
          float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, float(alpha), a, lda, b,
              ldb, float(beta), c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
          const double *a, int64_t lda, const double *b, int64_t ldb,
          double beta, double *c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
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
    gemm(false, true, rows, n, S.D, Scale, q, S.D, k, S.D, 0, s, S.Sk);
    for (int r = 0; r < rows; ++r) {
      T *row = s + r * S.Sk;
      int64_t i = i0 + r, keys = keysOf(i);
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
  auto attrs = attentionAttrs(ctx.Attrs, a.S);
  if (!attrs)
    return ctx.unsupported(llvm::toString(attrs.takeError()));
  a.Scale = attrs->Scale;
  a.Causal = attrs->Causal;
  a.ZeroEmptyRows = attrs->ZeroEmptyRows;
  a.Ratio = attrs->Dropout;
  a.Threshold = attrs->threshold();
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
  // Scratch: a block's scores (no more rows than the sequence has).
  int64_t block = std::min<int64_t>(kRows, s.Sq) * s.Sk;
  std::vector<T> p(block), factor(a.Ratio > 0 ? s.Sk : 0);
  for (int64_t bh = 0; bh < s.Batch * s.Heads; ++bh) {
    int64_t b = bh / s.Heads, h = bh % s.Heads, kvh = h / s.group();
    const T *kb = k + (b * s.KvHeads + kvh) * s.Sk * s.D;
    const T *vb = v + (b * s.KvHeads + kvh) * s.Sk * s.Dv;
    for (int64_t i0 = 0; i0 < s.Sq; i0 += kRows) {
      int rows = int(std::min<int64_t>(kRows, s.Sq - i0));
      int64_t n = a.keysOf(i0 + rows - 1);
      a.scores(q + (bh * s.Sq + i0) * s.D, kb, b, h, i0, rows, p.data());
      for (int r = 0; r < rows; ++r) {
        T *row = p.data() + r * s.Sk;
        int64_t keys = a.keysOf(i0 + r);
        lse[bh * s.Sq + i0 + r] = softmaxInPlace(row, keys, a.ZeroEmptyRows);
        std::fill(row + keys, row + n, T(0));
        if (a.Ratio > 0) {
          a.dropoutFactors(b, h, i0 + r, keys, factor.data());
          for (int64_t j = 0; j < keys; ++j)
            row[j] *= factor[j];
        }
      }
      // out = p v.
      gemm(false, false, rows, s.Dv, n, 1, p.data(), s.Sk, vb, s.Dv, 0,
           out + (bh * s.Sq + i0) * s.Dv, s.Dv);
    }
  }
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// The bias's gradient: d(scores) added at the bias element each score read.
struct BiasGrad {
  const Attention *A = nullptr;
  TensorView Out;
  explicit operator bool() const { return A != nullptr; }
  template <typename T>
  void add(int64_t b, int64_t h, int64_t i, int64_t j, T ds) const {
    const AttentionShape &s = A->S;
    int64_t at = s.BiasBatchOffset[b] + h * s.BiasHeadStride +
                 i * s.BiasRowStride + j * s.BiasColStride;
    if (Out.Type == DType::F32)
      Out.as<float>()[at] += float(ds);
    else
      Out.as<double>()[at] += double(ds);
  }
};

/// row[j] = exp(row[j] - shift) for j < n: the probabilities from lse.
template <typename T> void expRow(T *row, T shift, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t j = 0; j < n; ++j)
      row[j] -= shift;
    expScaled(row, 1.0f, row, n);
  } else {
    for (int64_t j = 0; j < n; ++j)
      row[j] = std::exp(row[j] - shift);
  }
}

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
  // d(bias), summed in this loop's fixed order over the axes it broadcasts.
  BiasGrad dbias;
  if (ctx.Outputs.size() > 3 && ctx.Outputs[3].present()) {
    if (!a.Bias || ctx.Outputs[3].Type != a.Bias->Type ||
        ctx.Outputs[3].numElements() != a.Bias->numElements())
      return ctx.unsupported("dbias must have the bias's type");
    dbias = BiasGrad{&a, ctx.Outputs[3]};
    std::memset(dbias.Out.Data, 0, dbias.Out.sizeInBytes());
  }
  int64_t block = std::min<int64_t>(kRows, s.Sq) * s.Sk;
  std::vector<T> p(block), dp(block), factor(s.Sk);
  for (int64_t t = 0; t < s.Batch * s.KvHeads; ++t) {
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
        a.scores(qi, kb, b, h, i0, rows, p.data());
        // dp~ = dout vT.
        gemm(false, true, rows, n, s.Dv, 1, doi, s.Dv, vb, s.Dv, 0, dp.data(),
             s.Sk);
        for (int r = 0; r < rows; ++r) {
          T *pr = p.data() + r * s.Sk, *dpr = dp.data() + r * s.Sk;
          T l = lse[bh * s.Sq + i0 + r];
          int64_t keys = a.keysOf(i0 + r);
          T rowDot = 0; // sum_j p_j dp_j = dout_r . out_r
          for (int64_t d = 0; d < s.Dv; ++d)
            rowDot += doi[r * s.Dv + d] * oi[r * s.Dv + d];
          if (l == -std::numeric_limits<T>::infinity() && a.ZeroEmptyRows)
            keys = 0; // the row's output was a constant 0
          expRow(pr, l, keys);
          if (a.Ratio > 0)
            a.dropoutFactors(b, h, i0 + r, keys, factor.data());
          for (int64_t j = 0; j < keys; ++j) {
            // ds = p (dp - rowDot), d(bias) += ds; dpr = scale ds for dq
            // and dk; p~ = p f for dv.
            T f = a.Ratio > 0 ? factor[j] : T(1);
            T ds = pr[j] * (dpr[j] * f - rowDot);
            dpr[j] = T(a.Scale) * ds;
            pr[j] *= f;
            if (dbias)
              dbias.add(b, h, i0 + r, j, ds);
          }
          std::fill(pr + keys, pr + n, T(0));
          std::fill(dpr + keys, dpr + n, T(0));
        }
        // dq = ds k; dk += dsT q; dv += p~T dout.
        gemm(false, false, rows, s.D, n, 1, dp.data(), s.Sk, kb, s.D, 0,
             dq + (bh * s.Sq + i0) * s.D, s.D);
        gemm(true, false, n, s.D, rows, 1, dp.data(), s.Sk, qi, s.D, 1, dkb,
             s.D);
        gemm(true, false, n, s.Dv, rows, 1, p.data(), s.Sk, doi, s.Dv, 1, dvb,
             s.Dv);
      }
    }
  }
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
  registerKernel(OpKind::FusedAttention, forwardKernel, FloatSupport::F32F64);
  registerKernel(OpKind::FusedAttentionGrad, backwardKernel,
                 FloatSupport::F32F64);
}
