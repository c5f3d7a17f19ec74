//===- ConvPool.cpp - Convolution and pooling kernels ---------------------===//
//
// N-D Conv (im2col + OpenBLAS GEMM), MaxPool, AveragePool and
// GlobalAveragePool with ONNX opset-17 semantics, and the gradient kernels
// autodiff emits for them. The gradient ops carry their forward op's
// attributes unchanged; their result type gives the shape the forward op's
// operands had (ConvGradInput's x, ConvGradWeight's w, the pools' input).
//
// Every spatial geometry - strides, dilations, explicit or automatic pads,
// ceil_mode - is resolved once into a Window; the result shape the compiler
// computed is checked against it, so a kernel never guesses a shape.
//
//===----------------------------------------------------------------------===//
#include "compiler/ops/ConvPool.h"
#include "kernels/common/KernelUtil.h"
#include "kernels/common/ReduceCheck.h"
#include "kernels/cpu/Kernel.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cblas.h>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

using namespace headroom;
using namespace headroom::cpu;

namespace {

using Dims = llvm::SmallVector<int64_t, 3>;

using ops::product;

using ops::ceilDiv;

/// Advances a row-major multi-index over `shape`.
void advance(llvm::MutableArrayRef<int64_t> index,
             llvm::ArrayRef<int64_t> shape) {
  for (size_t a = index.size(); a-- > 0;) {
    if (++index[a] < shape[a])
      return;
    index[a] = 0;
  }
}

//===----------------------------------------------------------------------===//
// Window geometry
//===----------------------------------------------------------------------===//

using ops::Window;

//===----------------------------------------------------------------------===//
// Conv and its gradients: im2col + GEMM
//===----------------------------------------------------------------------===//

/// Row-major C = op(A) op(B) + beta C.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
          int64_t lda, const float *b, int64_t ldb, float beta, float *c,
          int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb,
              beta, c, ldc);
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double *a,
          int64_t lda, const double *b, int64_t ldb, double beta, double *c,
          int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0, a, lda, b, ldb,
              beta, c, ldc);
}

/// Copies n elements in pieces of fixed size, which the compiler inlines:
/// im2col's lines are short (often under 32 elements), and a call to memcpy
/// - what GCC makes of a plain copy loop - costs more than the copy.
template <typename T> inline void copyShort(T *dst, const T *src, int64_t n) {
  constexpr int64_t kBlock = 16;
  for (; n >= kBlock; n -= kBlock, dst += kBlock, src += kBlock)
    std::memcpy(dst, src, sizeof(T) * kBlock);
  for (int64_t b = kBlock / 2; b > 0; b /= 2)
    if (n & b) {
      std::memcpy(dst, src, sizeof(T) * b);
      dst += b;
      src += b;
    }
}

/// Zeroes n elements, as copyShort copies them.
template <typename T> inline void zeroShort(T *dst, int64_t n) {
  constexpr int64_t kBlock = 16;
  for (; n >= kBlock; n -= kBlock, dst += kBlock)
    std::memset(dst, 0, sizeof(T) * kBlock);
  for (int64_t b = kBlock / 2; b > 0; b /= 2)
    if (n & b) {
      std::memset(dst, 0, sizeof(T) * b);
      dst += b;
    }
}

/// The outputs [lo, hi) of `out` along an axis whose tap o * stride + off
/// lies inside an input of size `in`.
std::pair<int64_t, int64_t> insideRange(int64_t off, int64_t stride, int64_t in,
                                        int64_t out) {
  int64_t lo = std::min(off >= 0 ? 0 : ceilDiv(-off, stride), out);
  return {lo, std::clamp(ceilDiv(in - off, stride), lo, out)};
}

/// line[j] = src[j * stride + off] for j in [lo, hi), 0 elsewhere in [0, n).
template <typename T>
inline void gatherLine(T *__restrict line, const T *__restrict src, int64_t off,
                       int64_t stride, int64_t lo, int64_t hi, int64_t n) {
  if (lo > 0)
    zeroShort(line, lo);
  if (stride == 1) {
    copyShort(line + lo, src + lo + off, hi - lo);
  } else {
    for (int64_t j = lo; j < hi; ++j)
      line[j] = src[j * stride + off];
  }
  if (hi < n)
    zeroShort(line + hi, n - hi);
}

/// dst[j * stride + off] += line[j] for j in [lo, hi).
template <typename T>
void scatterLine(const T *__restrict line, T *__restrict dst, int64_t off,
                 int64_t stride, int64_t lo, int64_t hi) {
  if (stride == 1) {
    for (int64_t j = lo; j < hi; ++j)
      dst[j + off] += line[j];
  } else {
    for (int64_t j = lo; j < hi; ++j)
      dst[j * stride + off] += line[j];
  }
}

/// The line of im2col or (Scatter) col2im: between `line`, one output row of
/// a kernel position's col row, and input row `src`.
template <typename T, bool Scatter>
void im2colLine(std::conditional_t<Scatter, T, const T> *src,
                std::conditional_t<Scatter, const T, T> *line, int64_t off,
                int64_t stride, int64_t lo, int64_t hi, int64_t n) {
  if constexpr (Scatter)
    scatterLine(line, src, off, stride, lo, hi);
  else
    gatherLine(line, src, off, stride, lo, hi, n);
}

/// im2col of one channel: row k of `col` (at col + k * ld) holds, for each
/// output position, the input tap of kernel position k (0 in padding). With
/// Scatter it is col2im instead: each col entry is added to its input tap.
/// The inner loop runs along the last axis over the outputs whose tap is
/// inside the input, so padding only trims its ends; 2-D windows, the common
/// case, have their own loop nest without the N-D index bookkeeping.
template <typename T, bool Scatter>
void im2colChannel(std::conditional_t<Scatter, T, const T> *img,
                   std::conditional_t<Scatter, const T, T> *col, int64_t ld,
                   const Window &w) {
  unsigned rank = w.rank(), last = rank - 1;
  int64_t outLast = w.Out[last], inLast = w.In[last], stride = w.Strides[last];
  if (rank == 2) {
    int64_t outRows = w.Out[0];
    for (int64_t kh = 0, k = 0; kh < w.Kernel[0]; ++kh) {
      int64_t offRow = kh * w.Dilations[0] - w.PadBegin[0];
      auto [rowLo, rowHi] = insideRange(offRow, w.Strides[0], w.In[0], outRows);
      for (int64_t kw = 0; kw < w.Kernel[1]; ++kw, ++k) {
        int64_t off = kw * w.Dilations[1] - w.PadBegin[1];
        auto [lo, hi] = insideRange(off, stride, inLast, outLast);
        auto *colK = col + k * ld;
        if constexpr (!Scatter) {
          std::fill(colK, colK + rowLo * outLast, T(0));
          std::fill(colK + rowHi * outLast, colK + outRows * outLast, T(0));
          if (stride == 1 && w.Strides[0] == 1 && outLast == inLast &&
              rowLo < rowHi && lo < hi) {
            // Rows of col and of the input have one length, so the taps of
            // rows [rowLo, rowHi) are one shifted block of the input; the
            // entries it wraps into the padding are zeroed after.
            int64_t first = rowLo * outLast + lo,
                    end = (rowHi - 1) * outLast + hi;
            int64_t shift = offRow * inLast + off;
            std::copy(img + first + shift, img + end + shift, colK + first);
            for (int64_t o = rowLo; o < rowHi; ++o) {
              zeroShort(colK + o * outLast, lo);
              zeroShort(colK + o * outLast + hi, outLast - hi);
            }
            continue;
          }
        }
        for (int64_t o = rowLo; o < rowHi; ++o)
          im2colLine<T, Scatter>(img + (o * w.Strides[0] + offRow) * inLast,
                                 colK + o * outLast, off, stride, lo, hi,
                                 outLast);
      }
    }
    return;
  }
  int64_t outer = w.outSize() / std::max<int64_t>(outLast, 1);
  llvm::ArrayRef<int64_t> outerShape = llvm::makeArrayRef(w.Out).drop_back();
  Dims tap(rank, 0), pos(last, 0);
  for (int64_t k = 0, K = w.kernelSize(); k < K; ++k, advance(tap, w.Kernel)) {
    // Input index along the last axis is o * stride + off.
    int64_t off = tap[last] * w.Dilations[last] - w.PadBegin[last];
    auto [lo, hi] = insideRange(off, stride, inLast, outLast);
    std::fill(pos.begin(), pos.end(), 0);
    for (int64_t o = 0; o < outer; ++o, advance(pos, outerShape)) {
      auto *line = col + k * ld + o * outLast;
      int64_t row = 0;
      bool valid = true;
      for (unsigned a = 0; a < last && valid; ++a) {
        int64_t i =
            pos[a] * w.Strides[a] - w.PadBegin[a] + tap[a] * w.Dilations[a];
        valid = i >= 0 && i < w.In[a];
        row = row * w.In[a] + i;
      }
      if (valid)
        im2colLine<T, Scatter>(img + row * inLast, line, off, stride, lo, hi,
                               outLast);
      else if constexpr (!Scatter)
        std::fill(line, line + outLast, T(0));
    }
  }
}

/// Conv's operands (compiler/ops/ConvPool.h) and its im2col matrices.
struct ConvShape : ops::ConvShape {
  /// Rows of one group's im2col matrix (and columns of its weight matrix).
  int64_t colRows() const { return cg() * W.kernelSize(); }
};

llvm::Expected<ConvShape> convShape(const KernelContext &ctx,
                                    const TensorView &x, const TensorView &w,
                                    const TensorView &y) {
  auto s = orUnsupported(
      ctx, ops::convShape(ctx.Attrs, x.type(), w.type(), y.type()));
  if (!s)
    return s.takeError();
  return ConvShape{std::move(*s)};
}

/// Conv and its gradients walk the batch in chunks of samples. The im2col
/// matrices of a chunk sit side by side in one [colRows, count * P] matrix
/// (column n * P + p), so each group is one GEMM per chunk, and
/// ConvGradWeight sums the chunk inside the GEMM's reduction. A chunk is the
/// fewest samples with kChunkColumns columns (capped at kColBytes of
/// scratch): enough to give a small spatial output (P = 7 x 7 and less in
/// late layers) a GEMM of useful width, and no more, because bigger GEMMs
/// are slower here. On LeNet (B = 32, OpenBLAS 0.3.21) one GEMM over the
/// whole batch ran up to 3x slower than per-sample GEMMs, which stay in
/// cache and run OpenBLAS's small-matrix kernels without packing, and a
/// second OpenBLAS thread made it slower still. A pointwise window needs no
/// im2col: it runs one sample at a time on x's own data.
constexpr int64_t kChunkColumns = 256;
constexpr int64_t kColBytes = int64_t(64) << 20;

/// A batch walked in chunks of Samples samples [n0, n0 + Samples).
struct Chunking {
  int64_t Samples = 1;
  bool Pointwise = false;

  Chunking(const ConvShape &s, size_t elemSize) : Pointwise(s.W.isPointwise()) {
    int64_t P = s.W.outSize();
    // Per sample: the im2col columns, and dy or y in [mg, P] form.
    int64_t bytes = std::max(s.colRows(), s.mg()) * P * int64_t(elemSize);
    if (Pointwise || P == 0 || bytes == 0)
      return;
    Samples = std::clamp<int64_t>(ceilDiv(kChunkColumns, P), 1,
                                  std::max<int64_t>(kColBytes / bytes, 1));
    Samples = std::min(Samples, std::max<int64_t>(s.N, 1));
  }
};

/// Fills `col` [colRows, count * P] with the im2col matrix of group g of
/// samples [n0, n0 + count).
template <typename T>
void im2col(const T *x, const ConvShape &s, int64_t n0, int64_t count,
            int64_t g, T *col) {
  int64_t in = s.W.inSize(), P = s.W.outSize(), ld = count * P;
  for (int64_t n = 0; n < count; ++n) {
    const T *xg = x + ((n0 + n) * s.C + g * s.cg()) * in;
    for (int64_t c = 0; c < s.cg(); ++c)
      im2colChannel<T, /*Scatter=*/false>(
          xg + c * in, col + c * s.W.kernelSize() * ld + n * P, ld, s.W);
  }
}

/// Adds `col` [colRows, count * P] to group g of samples [n0, n0 + count) of
/// dx, each entry to its input tap.
template <typename T>
void col2im(const T *col, const ConvShape &s, int64_t n0, int64_t count,
            int64_t g, T *dx) {
  int64_t in = s.W.inSize(), P = s.W.outSize(), ld = count * P;
  for (int64_t n = 0; n < count; ++n) {
    T *dxg = dx + ((n0 + n) * s.C + g * s.cg()) * in;
    for (int64_t c = 0; c < s.cg(); ++c)
      im2colChannel<T, /*Scatter=*/true>(
          dxg + c * in, col + c * s.W.kernelSize() * ld + n * P, ld, s.W);
  }
}

/// Copies channels [m0, m0 + mg) of samples [n0, n0 + count) of t [N, M, P]
/// to or (ToBatch false) from mat [mg, count * P].
template <typename T, bool ToBatch>
void transposeBatch(std::conditional_t<ToBatch, const T, T> *t,
                    std::conditional_t<ToBatch, T, const T> *mat, int64_t M,
                    int64_t P, int64_t n0, int64_t count, int64_t m0,
                    int64_t mg) {
  for (int64_t m = 0; m < mg; ++m)
    for (int64_t n = 0; n < count; ++n) {
      auto *plane = t + ((n0 + n) * M + m0 + m) * P;
      auto *row = mat + (m * count + n) * P;
      if constexpr (ToBatch)
        std::copy(plane, plane + P, row);
      else
        std::copy(row, row + P, plane);
    }
}

/// The scratch buffers of a Conv kernel, in elements: the chunk's im2col
/// matrix, the chunk's y or dy in [mg, count * P] form, and ConvGradWeight's
/// transposed dw. Their bytes, each rounded up to 64, are the op's declared
/// workspace, laid out in this order.
struct ConvScratchSizes {
  int64_t Col = 0, Batch = 0, WeightT = 0;

  ConvScratchSizes(const ConvShape &s, const Chunking &ch, bool gradWeight) {
    int64_t P = s.W.outSize();
    Col = ch.Pointwise ? 0 : s.colRows() * ch.Samples * P;
    Batch = ch.Samples > 1 ? s.mg() * ch.Samples * P : 0;
    WeightT = gradWeight ? s.M * s.colRows() : 0;
  }
  static uint64_t aligned(int64_t elems, size_t elemSize) {
    return (uint64_t(elems) * elemSize + 63) & ~uint64_t(63);
  }
  uint64_t bytes(size_t elemSize) const {
    return aligned(Col, elemSize) + aligned(Batch, elemSize) +
           aligned(WeightT, elemSize);
  }
};

/// A Conv kernel's scratch: carved from the executor's workspace when it is
/// large enough, else allocated here (direct kernel calls pass none).
template <typename T> struct ConvScratch {
  T *Col = nullptr, *Batch = nullptr, *WeightT = nullptr;
  std::unique_ptr<uint8_t[]> Own;

  ConvScratch(const KernelContext &ctx, const ConvScratchSizes &sizes) {
    uint64_t bytes = sizes.bytes(sizeof(T));
    if (!bytes)
      return;
    auto *base = static_cast<uint8_t *>(ctx.Workspace);
    if (!base || ctx.WorkspaceBytes < bytes) {
      Own.reset(new uint8_t[bytes]);
      base = Own.get();
    }
    auto carve = [&](int64_t elems) {
      T *p = elems ? reinterpret_cast<T *>(base) : nullptr;
      base += ConvScratchSizes::aligned(elems, sizeof(T));
      return p;
    };
    Col = carve(sizes.Col);
    Batch = carve(sizes.Batch);
    WeightT = carve(sizes.WeightT);
  }
};

template <typename T> llvm::Error conv(const KernelContext &ctx, ConvShape s) {
  const T *x = ctx.Inputs[0].as<T>(), *w = ctx.Inputs[1].as<T>();
  T *y = ctx.Outputs[0].as<T>();
  int64_t P = s.W.outSize(), K = s.colRows(), in = s.W.inSize();
  Chunking ch(s, sizeof(T));
  ConvScratch<T> scratch(ctx, ConvScratchSizes(s, ch, /*gradWeight=*/false));
  T *col = scratch.Col, *out = scratch.Batch;
  for (int64_t n0 = 0; n0 < s.N; n0 += ch.Samples) {
    int64_t count = std::min(ch.Samples, s.N - n0), ld = count * P;
    for (int64_t g = 0; g < s.G; ++g) {
      const T *cols = x + (n0 * s.C + g * s.cg()) * in;
      if (!ch.Pointwise) {
        im2col(x, s, n0, count, g, col);
        cols = col;
      }
      T *yg = y + (n0 * s.M + g * s.mg()) * P;
      gemm(false, false, s.mg(), ld, K, w + g * s.mg() * K, K, cols, ld, T(0),
           count == 1 ? yg : out, ld);
      if (count > 1)
        transposeBatch<T, /*ToBatch=*/false>(y, out, s.M, P, n0, count,
                                             g * s.mg(), s.mg());
    }
  }
  if (!ctx.hasInput(2))
    return llvm::Error::success();
  const T *b = ctx.Inputs[2].as<T>();
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t m = 0; m < s.M; ++m) {
      T *ym = y + (n * s.M + m) * P;
      for (int64_t p = 0; p < P; ++p)
        ym[p] += b[m];
    }
  return llvm::Error::success();
}

/// Conv(X, W, B?) {auto_pad, dilations, group, kernel_shape, pads, strides}.
llvm::Error convKernel(const KernelContext &ctx) {
  auto s = convShape(ctx, ctx.Inputs[0], ctx.Inputs[1], ctx.Outputs[0]);
  if (!s)
    return s.takeError();
  if (ctx.hasInput(2) && (ctx.Inputs[2].Type != ctx.Inputs[0].Type ||
                          ctx.Inputs[2].numElements() != s->M))
    return ctx.unsupported("bias of type " + ctx.Inputs[2].type().str() +
                           " does not match " + llvm::Twine(s->M) +
                           " output channels");
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[0].Type, conv, ctx, *s);
}

/// Group g of samples [n0, n0 + count) of dy [N, M, P] as an [mg, count * P]
/// matrix: dy itself for one sample, else copied into `buf`.
template <typename T>
const T *dyBatch(const T *dy, const ConvShape &s, int64_t n0, int64_t count,
                 int64_t g, T *buf) {
  int64_t P = s.W.outSize();
  if (count == 1)
    return dy + (n0 * s.M + g * s.mg()) * P;
  transposeBatch<T, /*ToBatch=*/true>(dy, buf, s.M, P, n0, count, g * s.mg(),
                                      s.mg());
  return buf;
}

template <typename T>
llvm::Error convGradInput(const KernelContext &ctx, ConvShape s) {
  const T *dy = ctx.Inputs[0].as<T>(), *w = ctx.Inputs[1].as<T>();
  T *dx = ctx.Outputs[0].as<T>();
  int64_t P = s.W.outSize(), K = s.colRows(), in = s.W.inSize();
  Chunking ch(s, sizeof(T));
  ConvScratch<T> scratch(ctx, ConvScratchSizes(s, ch, /*gradWeight=*/false));
  T *col = scratch.Col, *dyBuf = scratch.Batch;
  if (!ch.Pointwise)
    std::memset(dx, 0, ctx.Outputs[0].sizeInBytes());
  for (int64_t n0 = 0; n0 < s.N; n0 += ch.Samples) {
    int64_t count = std::min(ch.Samples, s.N - n0), ld = count * P;
    for (int64_t g = 0; g < s.G; ++g) {
      // d(col) = W_g^T dy_g, then col2im adds each entry to its input tap; a
      // pointwise window's d(col) is dx itself.
      const T *dyg = dyBatch(dy, s, n0, count, g, dyBuf);
      T *dxg = dx + (n0 * s.C + g * s.cg()) * in;
      gemm(true, false, K, ld, s.mg(), w + g * s.mg() * K, K, dyg, ld, T(0),
           ch.Pointwise ? dxg : col, ld);
      if (!ch.Pointwise)
        col2im(col, s, n0, count, g, dx);
    }
  }
  return llvm::Error::success();
}

/// ConvGradInput(dy, w) {Conv's attributes} -> dx, x's type.
llvm::Error convGradInputKernel(const KernelContext &ctx) {
  auto s = convShape(ctx, ctx.Outputs[0], ctx.Inputs[1], ctx.Inputs[0]);
  if (!s)
    return s.takeError();
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[0].Type, convGradInput, ctx, *s);
}

template <typename T>
llvm::Error convGradWeight(const KernelContext &ctx, ConvShape s) {
  const T *dy = ctx.Inputs[0].as<T>(), *x = ctx.Inputs[1].as<T>();
  T *dw = ctx.Outputs[0].as<T>();
  int64_t P = s.W.outSize(), K = s.colRows(), in = s.W.inSize();
  Chunking ch(s, sizeof(T));
  ConvScratch<T> scratch(ctx, ConvScratchSizes(s, ch, /*gradWeight=*/true));
  T *col = scratch.Col, *dyBuf = scratch.Batch;
  // dW_g^T (+)= col dy_g^T, the chunk's samples summed in the GEMM's
  // reduction. (OpenBLAS runs this orientation faster than
  // dW_g = dy_g col^T: 1.4-1.6x on LeNet's second conv.)
  T *dwT = scratch.WeightT;
  std::fill(dwT, dwT + s.M * K, T(0));
  for (int64_t n0 = 0; n0 < s.N; n0 += ch.Samples) {
    int64_t count = std::min(ch.Samples, s.N - n0), ld = count * P;
    for (int64_t g = 0; g < s.G; ++g) {
      const T *cols = x + (n0 * s.C + g * s.cg()) * in;
      if (!ch.Pointwise) {
        im2col(x, s, n0, count, g, col);
        cols = col;
      }
      gemm(false, true, K, s.mg(), ld, cols, ld,
           dyBatch(dy, s, n0, count, g, dyBuf), ld, T(1), dwT + g * K * s.mg(),
           s.mg());
    }
  }
  for (int64_t g = 0; g < s.G; ++g)
    for (int64_t m = 0; m < s.mg(); ++m)
      for (int64_t k = 0; k < K; ++k)
        dw[(g * s.mg() + m) * K + k] = dwT[(g * K + k) * s.mg() + m];
  return llvm::Error::success();
}

/// ConvGradWeight(dy, x) {Conv's attributes} -> dw, w's type.
llvm::Error convGradWeightKernel(const KernelContext &ctx) {
  auto s = convShape(ctx, ctx.Inputs[1], ctx.Outputs[0], ctx.Inputs[0]);
  if (!s)
    return s.takeError();
  return HR_DISPATCH_FLOAT(ctx, ctx.Inputs[0].Type, convGradWeight, ctx, *s);
}

/// The workspace of a Conv-family call whose operands are x, w and y (in
/// Conv's roles); 0 for a malformed call, which the kernel rejects.
uint64_t convWorkspace(const KernelContext &ctx, const TensorView &x,
                       const TensorView &w, const TensorView &y,
                       bool gradWeight) {
  if ((x.Type != DType::F32 && x.Type != DType::F64) || x.rank() < 3)
    return 0;
  auto s = convShape(ctx, x, w, y);
  if (!s) {
    llvm::consumeError(s.takeError());
    return 0;
  }
  size_t elemSize = dtypeSize(x.Type);
  return ConvScratchSizes(*s, Chunking(*s, elemSize), gradWeight)
      .bytes(elemSize);
}

uint64_t convWorkspaceQuery(const KernelContext &ctx) {
  if (ctx.Inputs.size() < 2 || ctx.Outputs.empty())
    return 0;
  return convWorkspace(ctx, ctx.Inputs[0], ctx.Inputs[1], ctx.Outputs[0],
                       /*gradWeight=*/false);
}

uint64_t convGradInputWorkspaceQuery(const KernelContext &ctx) {
  if (ctx.Inputs.size() < 2 || ctx.Outputs.empty())
    return 0;
  return convWorkspace(ctx, ctx.Outputs[0], ctx.Inputs[1], ctx.Inputs[0],
                       /*gradWeight=*/false);
}

uint64_t convGradWeightWorkspaceQuery(const KernelContext &ctx) {
  if (ctx.Inputs.size() < 2 || ctx.Outputs.empty())
    return 0;
  return convWorkspace(ctx, ctx.Inputs[1], ctx.Outputs[0], ctx.Inputs[0],
                       /*gradWeight=*/true);
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

/// The input taps of every output position of a pool, the same for every
/// [N, C] plane: output o reads the plane offsets Offsets[Begin[o] ..
/// Begin[o+1]) in row-major window order (so the first max is PyTorch's).
/// Its arrays are the pool's declared workspace (poolTableBytes), or its own
/// allocation when the executor gives none large enough.
struct PoolTable {
  Window W;
  int64_t Planes = 0;
  int64_t *Begin = nullptr;   // [outSize + 1]
  int64_t *Offsets = nullptr; // [at most outSize * kernelSize]
  int64_t NumOffsets = 0;
  /// Taps inside the padded input (count_include_pad's divisor).
  int64_t *Padded = nullptr; // [outSize]
  /// What each output of an AveragePool divides by (see poolDivisors).
  double *Divisors = nullptr; // [outSize], AveragePool and its gradient only
  bool HasEmptyWindow = false;
  std::unique_ptr<uint8_t[]> Own;
};

/// The bytes of a pool table's arrays for window `w`.
uint64_t poolTableBytes(const Window &w, bool divisors) {
  int64_t out = w.outSize();
  return uint64_t(out + 1 + out * w.kernelSize() + out) * sizeof(int64_t) +
         (divisors ? uint64_t(out) * sizeof(double) : 0);
}

/// Appends the taps of output o, at multi-index `pos`, to `t`.
void addWindowTaps(PoolTable &t, int64_t o, llvm::ArrayRef<int64_t> pos) {
  const Window &w = t.W;
  unsigned rank = w.rank();
  Dims start(rank), lo(rank), hi(rank);
  int64_t padded = 1;
  for (unsigned a = 0; a < rank; ++a) {
    int64_t s = pos[a] * w.Strides[a] - w.PadBegin[a], d = w.Dilations[a];
    // Taps j with 0 <= s + j d < In, and with -PadBegin <= s + j d < In +
    // PadEnd for the padded count.
    lo[a] = std::min(s >= 0 ? 0 : ceilDiv(-s, d), w.Kernel[a]);
    hi[a] = std::clamp(ceilDiv(w.In[a] - s, d), lo[a], w.Kernel[a]);
    int64_t pHi = std::clamp(ceilDiv(w.In[a] + w.PadEnd[a] - s, d), int64_t(0),
                             w.Kernel[a]);
    padded *= pHi;
    start[a] = s;
  }
  t.Padded[o] = padded;
  Dims j(lo);
  Dims extent(rank);
  for (unsigned a = 0; a < rank; ++a)
    extent[a] = hi[a] - lo[a];
  int64_t taps = product(extent);
  t.HasEmptyWindow |= taps == 0;
  Dims k(rank, 0);
  for (int64_t i = 0; i < taps; ++i, advance(k, extent)) {
    int64_t off = 0;
    for (unsigned a = 0; a < rank; ++a)
      off = off * w.In[a] + start[a] + (lo[a] + k[a]) * w.Dilations[a];
    t.Offsets[t.NumOffsets++] = off;
  }
  t.Begin[o + 1] = t.NumOffsets;
}

/// The window of a pool with input `x` [N, C, In...] and output `y`
/// [N, C, Out...]; kernel_shape is required.
llvm::Expected<Window> poolWindow(const KernelContext &ctx, const TensorView &x,
                                  const TensorView &y) {
  return orUnsupported(ctx, ops::poolWindow(ctx.Attrs, x.type(), y.type()));
}

/// The pool table of input `x` and output `y` (see poolWindow), with room
/// for divisors when `divisors`.
llvm::Expected<PoolTable> makePoolTable(const KernelContext &ctx,
                                        const TensorView &x,
                                        const TensorView &y, bool divisors) {
  auto w = poolWindow(ctx, x, y);
  if (!w)
    return w.takeError();
  PoolTable t;
  t.W = std::move(*w);
  t.Planes = x.Shape[0] * x.Shape[1];
  int64_t out = t.W.outSize();
  uint64_t bytes = poolTableBytes(t.W, divisors);
  auto *base = static_cast<uint8_t *>(ctx.Workspace);
  if (!base || ctx.WorkspaceBytes < bytes) {
    t.Own.reset(new uint8_t[bytes]);
    base = t.Own.get();
  }
  t.Begin = reinterpret_cast<int64_t *>(base);
  t.Padded = t.Begin + out + 1;
  t.Offsets = t.Padded + out;
  if (divisors)
    t.Divisors = reinterpret_cast<double *>(t.Offsets + out * t.W.kernelSize());
  t.Begin[0] = 0;
  Dims pos(t.W.rank(), 0);
  for (int64_t o = 0; o < out; ++o, advance(pos, t.W.Out))
    addWindowTaps(t, o, pos);
  return t;
}

/// The flat index MaxPool's Indices output reports for plane offset `off`:
/// over the whole tensor, row-major or (storage_order 1) column-major within
/// the plane.
int64_t argmaxIndex(const Window &w, int64_t plane, int64_t off,
                    bool columnMajor) {
  if (columnMajor) {
    Dims index(w.rank());
    for (unsigned a = w.rank(); a-- > 0; off /= w.In[a])
      index[a] = off % w.In[a];
    for (unsigned a = w.rank(); a-- > 0;)
      off = off * w.In[a] + index[a];
  }
  return plane * w.inSize() + off;
}

/// The plane offset of the first maximum of output o's window (non-empty).
template <typename T>
int64_t windowArgmax(const T *plane, const PoolTable &t, int64_t o) {
  int64_t best = t.Offsets[t.Begin[o]];
  for (int64_t i = t.Begin[o] + 1, e = t.Begin[o + 1]; i < e; ++i)
    if (plane[t.Offsets[i]] > plane[best])
      best = t.Offsets[i];
  return best;
}

template <typename T>
llvm::Error maxPool(const KernelContext &ctx, const PoolTable &t) {
  const T *x = ctx.Inputs[0].as<T>();
  T *y = ctx.Outputs[0].as<T>();
  int64_t *indices = ctx.Outputs.size() > 1 && ctx.Outputs[1].present()
                         ? ctx.Outputs[1].as<int64_t>()
                         : nullptr;
  bool columnMajor = ctx.attrInt("storage_order", 0) == 1;
  int64_t in = t.W.inSize(), out = t.W.outSize();
  for (int64_t p = 0; p < t.Planes; ++p) {
    const T *xp = x + p * in;
    for (int64_t o = 0; o < out; ++o) {
      int64_t best = windowArgmax(xp, t, o);
      y[p * out + o] = xp[best];
      if (indices)
        indices[p * out + o] = argmaxIndex(t.W, p, best, columnMajor);
    }
  }
  return llvm::Error::success();
}

/// The pool table of a pool whose windows must all read some input.
llvm::Expected<PoolTable> makeNonEmptyPoolTable(const KernelContext &ctx,
                                                const TensorView &x,
                                                const TensorView &y) {
  auto t = makePoolTable(ctx, x, y, /*divisors=*/false);
  if (t && t->HasEmptyWindow)
    return ctx.unsupported("a window lies entirely in the padding");
  return t;
}

/// MaxPool(X) {auto_pad, ceil_mode, dilations, kernel_shape, pads,
/// storage_order, strides} -> (Y, Indices?).
llvm::Error maxPoolKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  if (ctx.Outputs[0].Type != x.Type)
    return ctx.unsupported("Y must have X's element type");
  if (ctx.Outputs.size() > 1 && ctx.Outputs[1].present() &&
      (ctx.Outputs[1].type() != ctx.Outputs[0].type().withDType(DType::I64)))
    return ctx.unsupported("Indices must be i64 with Y's shape");
  auto t = makeNonEmptyPoolTable(ctx, x, ctx.Outputs[0]);
  if (!t)
    return t.takeError();
  switch (x.Type) {
  case DType::F32:
    return maxPool<float>(ctx, *t);
  case DType::F64:
    return maxPool<double>(ctx, *t);
  case DType::U8:
    return maxPool<uint8_t>(ctx, *t);
  case DType::I8:
    return maxPool<int8_t>(ctx, *t);
  default:
    return ctx.unsupported("element type " + dtypeName(x.Type) +
                           " is not supported");
  }
}

template <typename T>
llvm::Error maxPoolGrad(const KernelContext &ctx, const PoolTable &t) {
  const T *dy = ctx.Inputs[0].as<T>(), *x = ctx.Inputs[1].as<T>();
  T *dx = ctx.Outputs[0].as<T>();
  int64_t in = t.W.inSize(), out = t.W.outSize();
  std::memset(dx, 0, ctx.Outputs[0].sizeInBytes());
  for (int64_t p = 0; p < t.Planes; ++p)
    for (int64_t o = 0; o < out; ++o)
      dx[p * in + windowArgmax(x + p * in, t, o)] += dy[p * out + o];
  return llvm::Error::success();
}

/// MaxPoolGrad(dy, x) {MaxPool's attributes} -> dx: each dy goes to the
/// first maximum of its window, summed where windows overlap.
llvm::Error maxPoolGradKernel(const KernelContext &ctx) {
  const TensorView &dy = ctx.Inputs[0], &x = ctx.Inputs[1];
  if (dy.Type != x.Type || ctx.Outputs[0].type() != x.type())
    return ctx.unsupported("dy and dx must have x's element type");
  auto t = makeNonEmptyPoolTable(ctx, x, dy);
  if (!t)
    return t.takeError();
  return HR_DISPATCH_FLOAT(ctx, x.Type, maxPoolGrad, ctx, *t);
}

/// Fills t.Divisors with what each output of an AveragePool divides by: its
/// window's taps inside the input, or (count_include_pad) inside the padded
/// input.
llvm::Error poolDivisors(const KernelContext &ctx, PoolTable &t) {
  bool includePad = ctx.attrInt("count_include_pad", 0) != 0;
  double *div = t.Divisors;
  for (int64_t o = 0, e = t.W.outSize(); o < e; ++o) {
    div[o] = includePad ? t.Padded[o] : t.Begin[o + 1] - t.Begin[o];
    if (div[o] == 0)
      return ctx.unsupported("a window lies entirely in the padding");
  }
  return llvm::Error::success();
}

template <typename T>
llvm::Error averagePool(const KernelContext &ctx, const PoolTable &t) {
  const double *div = t.Divisors;
  const T *x = ctx.Inputs[0].as<T>();
  T *y = ctx.Outputs[0].as<T>();
  int64_t in = t.W.inSize(), out = t.W.outSize();
  for (int64_t p = 0; p < t.Planes; ++p) {
    const T *xp = x + p * in;
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (int64_t i = t.Begin[o], e = t.Begin[o + 1]; i < e; ++i)
        sum += xp[t.Offsets[i]];
      y[p * out + o] = sum / div[o];
    }
  }
  return llvm::Error::success();
}

/// AveragePool(X) {auto_pad, ceil_mode, count_include_pad, kernel_shape,
/// pads, strides} -> Y.
llvm::Error averagePoolKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  if (ctx.Outputs[0].Type != x.Type)
    return ctx.unsupported("Y must have X's element type");
  auto t = makePoolTable(ctx, x, ctx.Outputs[0], /*divisors=*/true);
  if (!t)
    return t.takeError();
  if (auto e = poolDivisors(ctx, *t))
    return e;
  return HR_DISPATCH_FLOAT(ctx, x.Type, averagePool, ctx, *t);
}

template <typename T>
llvm::Error averagePoolGrad(const KernelContext &ctx, const PoolTable &t) {
  const double *div = t.Divisors;
  const T *dy = ctx.Inputs[0].as<T>();
  T *dx = ctx.Outputs[0].as<T>();
  int64_t in = t.W.inSize(), out = t.W.outSize();
  std::memset(dx, 0, ctx.Outputs[0].sizeInBytes());
  for (int64_t p = 0; p < t.Planes; ++p) {
    T *dxp = dx + p * in;
    for (int64_t o = 0; o < out; ++o) {
      T g = dy[p * out + o] / div[o];
      for (int64_t i = t.Begin[o], e = t.Begin[o + 1]; i < e; ++i)
        dxp[t.Offsets[i]] += g;
    }
  }
  return llvm::Error::success();
}

/// AveragePoolGrad(dy) {AveragePool's attributes} -> dx, the input's type:
/// each dy spread evenly, dy / divisor, over its window's input taps.
llvm::Error averagePoolGradKernel(const KernelContext &ctx) {
  const TensorView &dy = ctx.Inputs[0], &dx = ctx.Outputs[0];
  if (dy.Type != dx.Type)
    return ctx.unsupported("dy and dx must have one element type");
  auto t = makePoolTable(ctx, dx, dy, /*divisors=*/true);
  if (!t)
    return t.takeError();
  if (auto e = poolDivisors(ctx, *t))
    return e;
  return HR_DISPATCH_FLOAT(ctx, dx.Type, averagePoolGrad, ctx, *t);
}

template <typename T>
llvm::Error globalAveragePool(const KernelContext &ctx, int64_t planes,
                              int64_t size) {
  const T *x = ctx.Inputs[0].as<T>();
  T *y = ctx.Outputs[0].as<T>();
  for (int64_t p = 0; p < planes; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < size; ++i)
      sum += x[p * size + i];
    y[p] = sum / size;
  }
  return llvm::Error::success();
}

/// GlobalAveragePool(X [N, C, spatial...]) -> Y [N, C, 1...].
llvm::Error globalAveragePoolKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0];
  auto p = globalPoolPlanes(ctx);
  if (!p)
    return p.takeError();
  int64_t planes = p->Planes, size = p->Size;
  return HR_DISPATCH_FLOAT(ctx, x.Type, globalAveragePool, ctx, planes, size);
}

/// The workspace of a pool call with input `x` and output `y`: its table.
uint64_t poolWorkspace(const KernelContext &ctx, const TensorView &x,
                       const TensorView &y, bool divisors) {
  auto w = poolWindow(ctx, x, y);
  if (!w) {
    llvm::consumeError(w.takeError());
    return 0;
  }
  return poolTableBytes(*w, divisors);
}

uint64_t maxPoolWorkspaceQuery(const KernelContext &ctx) {
  if (ctx.Inputs.empty() || ctx.Outputs.empty())
    return 0;
  return poolWorkspace(ctx, ctx.Inputs[0], ctx.Outputs[0], /*divisors=*/false);
}

uint64_t maxPoolGradWorkspaceQuery(const KernelContext &ctx) {
  if (ctx.Inputs.size() < 2)
    return 0;
  return poolWorkspace(ctx, ctx.Inputs[1], ctx.Inputs[0], /*divisors=*/false);
}

uint64_t averagePoolWorkspaceQuery(const KernelContext &ctx) {
  if (ctx.Inputs.empty() || ctx.Outputs.empty())
    return 0;
  return poolWorkspace(ctx, ctx.Inputs[0], ctx.Outputs[0], /*divisors=*/true);
}

uint64_t averagePoolGradWorkspaceQuery(const KernelContext &ctx) {
  if (ctx.Inputs.empty() || ctx.Outputs.empty())
    return 0;
  return poolWorkspace(ctx, ctx.Outputs[0], ctx.Inputs[0], /*divisors=*/true);
}

} // namespace

void headroom::cpu::registerConvPoolKernels() {
  registerKernel(OpKind::Conv, convKernel, FloatSupport::F32F64);
  registerKernel(OpKind::ConvGradInput, convGradInputKernel,
                 FloatSupport::F32F64);
  registerKernel(OpKind::ConvGradWeight, convGradWeightKernel,
                 FloatSupport::F32F64);
  registerWorkspace(OpKind::Conv, convWorkspaceQuery);
  registerWorkspace(OpKind::ConvGradInput, convGradInputWorkspaceQuery);
  registerWorkspace(OpKind::ConvGradWeight, convGradWeightWorkspaceQuery);
  registerWorkspace(OpKind::MaxPool, maxPoolWorkspaceQuery);
  registerWorkspace(OpKind::MaxPoolGrad, maxPoolGradWorkspaceQuery);
  registerWorkspace(OpKind::AveragePool, averagePoolWorkspaceQuery);
  registerWorkspace(OpKind::AveragePoolGrad, averagePoolGradWorkspaceQuery);
  registerKernel(OpKind::MaxPool, maxPoolKernel, FloatSupport::F32F64);
  registerKernel(OpKind::MaxPoolGrad, maxPoolGradKernel, FloatSupport::F32F64);
  registerKernel(OpKind::AveragePool, averagePoolKernel, FloatSupport::F32F64);
  registerKernel(OpKind::AveragePoolGrad, averagePoolGradKernel,
                 FloatSupport::F32F64);
  registerKernel(OpKind::GlobalAveragePool, globalAveragePoolKernel,
                 FloatSupport::F32F64);
}
