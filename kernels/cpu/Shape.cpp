//===- Shape.cpp - Shape and data-movement kernels on the CPU -------------===//
//
// These ops only move elements, so all of them but Range and GatherGrad work
// on raw elements of the type's size (1, 2, 4 or 8 bytes) and so accept every
// element type; zero is all-zero bytes in every type. Reshape, Flatten,
// Squeeze and Unsqueeze keep the layout: one memcpy, none when the executor
// gave input and result the same buffer. Transpose, Slice, SliceGrad,
// Expand and Tile are one strided copy (copyStrided): a loop nest with
// independent source and destination strides that drops size-1 axes and
// merges axes contiguous on both sides first, so that it ends in memcpy rows,
// fills, or a blocked 2-D transpose (4-byte elements through SSE registers
// where the target has SSE2). GatherGrad adds rows of dy into a zeroed table
// with a contiguous inner loop.
//
// Shape operands (Reshape's shape, Slice's starts, Gather's indices, ...) are
// read at run time as i32 or i64. Where they determine a layout, the kernel
// checks them against the result type the compiler computed and returns an
// error on a mismatch (or an out-of-range index) rather than write outside a
// buffer.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/KernelUtil.h"
#include "kernels/common/MoveKernels.h"
#include "kernels/common/ShapeCheck.h"
#include "kernels/cpu/Kernel.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSwitch.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

using namespace headroom;
using namespace headroom::cpu;
using llvm::ArrayRef;
using llvm::Error;
using llvm::Expected;
using llvm::Twine;

namespace {

using ops::contiguousStrides;
using ops::Dims;
using ops::product;

/// Calls fn(T()) with T the unsigned integer of `bytes` bytes, the type that
/// kernels which only move elements copy them as.
template <typename Fn> void withBits(unsigned bytes, Fn fn) {
  switch (bytes) {
  case 1:
    return fn(uint8_t());
  case 2:
    return fn(uint16_t());
  case 4:
    return fn(uint32_t());
  default:
    assert(bytes == 8 && "element types are 1, 2, 4 or 8 bytes");
    return fn(uint64_t());
  }
}

//===----------------------------------------------------------------------===//
// The strided copy
//===----------------------------------------------------------------------===//

/// A loop nest over Shape that copies Src[sum(i * SrcStrides)] to
/// Dst[sum(i * DstStrides)]. Strides are in elements and may be 0 (a
/// broadcast source) or negative (a reversed slice).
struct CopyLoops {
  Dims Shape, DstStrides, SrcStrides;
};

/// Drops size-1 axes and merges each axis into its outer neighbour when both
/// sides step over it contiguously, so the innermost loop is as long as it
/// can be.
CopyLoops simplify(ArrayRef<int64_t> shape, ArrayRef<int64_t> dst,
                   ArrayRef<int64_t> src) {
  CopyLoops l;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1)
      continue;
    if (!l.Shape.empty() && l.DstStrides.back() == dst[i] * shape[i] &&
        l.SrcStrides.back() == src[i] * shape[i]) {
      l.Shape.back() *= shape[i];
      l.DstStrides.back() = dst[i];
      l.SrcStrides.back() = src[i];
      continue;
    }
    l.Shape.push_back(shape[i]);
    l.DstStrides.push_back(dst[i]);
    l.SrcStrides.push_back(src[i]);
  }
  return l;
}

/// When the innermost axis strides through one side (a transpose), moves the
/// axis that is contiguous on that side next to it, so that copy2D can work
/// in tiles that keep both sides in cache. The loop order does not change
/// what is copied.
void orderForTiles(CopyLoops &l) {
  size_t r = l.Shape.size();
  if (r < 3)
    return;
  ArrayRef<int64_t> side;
  if (std::abs(l.DstStrides.back()) > 1)
    side = l.DstStrides;
  else if (std::abs(l.SrcStrides.back()) > 1)
    side = l.SrcStrides;
  else
    return;
  for (size_t a = 0; a + 2 < r; ++a) {
    if (std::abs(side[a]) != 1)
      continue;
    for (Dims *v : {&l.Shape, &l.DstStrides, &l.SrcStrides})
      std::rotate(v->begin() + a, v->begin() + a + 1, v->begin() + r - 1);
    return;
  }
}

template <typename T>
void copyRow(T *dst, const T *src, int64_t n, int64_t ds, int64_t ss) {
  if (ds == 1 && ss == 1) {
    std::memcpy(dst, src, n * sizeof(T));
    return;
  }
  if (ds == 1 && ss == 0) {
    std::fill_n(dst, n, *src);
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    dst[j * ds] = src[j * ss];
}

/// Copies the rectangle [i0, i1) x [j0, j1) of a 2-D loop nest.
template <typename T>
void copyRect(T *dst, const T *src, int64_t i0, int64_t i1, int64_t j0,
              int64_t j1, int64_t d1, int64_t s1, int64_t d2, int64_t s2) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j)
      dst[i * d1 + j * d2] = src[i * s1 + j * s2];
}

/// Elements of T in a 64-byte cache line.
template <typename T> constexpr int64_t kLine = 64 / sizeof(T);

/// dst[i*d1 + j] = src[i + j*s2] on one kLine x kLine block, through a
/// local buffer: each side is read or written one whole row (a cache line's
/// worth) at a time, so a block needs no line to stay cached, whatever
/// cache sets power-of-two strides map the rows to.
template <typename T>
void transposeBlock(T *dst, const T *src, int64_t d1, int64_t s2) {
  constexpr int64_t n = kLine<T>;
  T b[n][n];
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < n; ++i)
      b[i][j] = src[i + j * s2];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      dst[i * d1 + j] = b[i][j];
}

#if defined(__SSE2__)
/// 4-byte elements move as float bit patterns through SSE registers:
/// shuffles do not touch the bits, so any 4-byte type is copied exactly.
template <>
void transposeBlock<uint32_t>(uint32_t *dst, const uint32_t *src, int64_t d1,
                              int64_t s2) {
  constexpr int64_t n = kLine<uint32_t>;
  alignas(64) float b[n][n];
  for (int64_t j = 0; j < n; j += 4) {
    for (int64_t i = 0; i < n; i += 4) {
      __m128 r0 =
          _mm_loadu_ps(reinterpret_cast<const float *>(src + i + j * s2));
      __m128 r1 =
          _mm_loadu_ps(reinterpret_cast<const float *>(src + i + (j + 1) * s2));
      __m128 r2 =
          _mm_loadu_ps(reinterpret_cast<const float *>(src + i + (j + 2) * s2));
      __m128 r3 =
          _mm_loadu_ps(reinterpret_cast<const float *>(src + i + (j + 3) * s2));
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_store_ps(&b[i][j], r0);
      _mm_store_ps(&b[i + 1][j], r1);
      _mm_store_ps(&b[i + 2][j], r2);
      _mm_store_ps(&b[i + 3][j], r3);
    }
  }
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(dst + i * d1, b[i], sizeof(b[i]));
}
#endif

/// The two innermost axes: row by row, or, when the inner axis strides
/// through one side and the outer one is contiguous there (a 2-D
/// transpose), in kTile x kTile tiles so that the lines a tile touches stay
/// cached until they are used fully. A transpose into a contiguous result
/// (the Transpose op) moves whole-line blocks instead, down strips of kLine
/// source rows so that the source is read as kLine sequential streams.
template <typename T>
void copy2D(T *dst, const T *src, int64_t n1, int64_t n2, int64_t d1,
            int64_t s1, int64_t d2, int64_t s2) {
  bool tiled = (std::abs(d2) > 1 && std::abs(d1) == 1) ||
               (std::abs(s2) > 1 && std::abs(s1) == 1);
  if (!tiled) {
    for (int64_t i = 0; i < n1; ++i)
      copyRow(dst + i * d1, src + i * s1, n2, d2, s2);
    return;
  }
  if (d2 == 1 && s1 == 1) {
    constexpr int64_t n = kLine<T>;
    int64_t iEnd = n1 / n * n, jEnd = n2 / n * n;
    for (int64_t j = 0; j < jEnd; j += n)
      for (int64_t i = 0; i < iEnd; i += n)
        transposeBlock(dst + i * d1 + j, src + i + j * s2, d1, s2);
    copyRect(dst, src, 0, iEnd, jEnd, n2, d1, s1, d2, s2);
    copyRect(dst, src, iEnd, n1, 0, n2, d1, s1, d2, s2);
    return;
  }
  constexpr int64_t kTile = 32;
  for (int64_t i0 = 0; i0 < n1; i0 += kTile)
    for (int64_t j0 = 0; j0 < n2; j0 += kTile)
      copyRect(dst, src, i0, std::min(n1, i0 + kTile), j0,
               std::min(n2, j0 + kTile), d1, s1, d2, s2);
}

template <typename T> void runCopy(const CopyLoops &l, T *dst, const T *src) {
  size_t r = l.Shape.size();
  if (r == 0) {
    *dst = *src;
    return;
  }
  if (r == 1) {
    copyRow(dst, src, l.Shape[0], l.DstStrides[0], l.SrcStrides[0]);
    return;
  }
  size_t outerRank = r - 2;
  int64_t outerCount =
      product(ArrayRef<int64_t>(l.Shape).take_front(outerRank));
  Dims index(outerRank, 0);
  int64_t dOff = 0, sOff = 0;
  for (int64_t o = 0; o < outerCount; ++o) {
    copy2D(dst + dOff, src + sOff, l.Shape[r - 2], l.Shape[r - 1],
           l.DstStrides[r - 2], l.SrcStrides[r - 2], l.DstStrides[r - 1],
           l.SrcStrides[r - 1]);
    for (int d = static_cast<int>(outerRank) - 1; d >= 0; --d) {
      dOff += l.DstStrides[d];
      sOff += l.SrcStrides[d];
      if (++index[d] < l.Shape[d])
        break;
      dOff -= l.DstStrides[d] * l.Shape[d];
      sOff -= l.SrcStrides[d] * l.Shape[d];
      index[d] = 0;
    }
  }
}

/// Copies a `shape` of elements of `bytes` bytes; dst and src point at the
/// element of index 0 on each side.
void copyStrided(unsigned bytes, void *dst, const void *src,
                 ArrayRef<int64_t> shape, ArrayRef<int64_t> dstStrides,
                 ArrayRef<int64_t> srcStrides) {
  if (product(shape) == 0)
    return;
  CopyLoops l = simplify(shape, dstStrides, srcStrides);
  orderForTiles(l);
  withBits(bytes, [&](auto zero) {
    using T = decltype(zero);
    runCopy(l, static_cast<T *>(dst), static_cast<const T *>(src));
  });
}

//===----------------------------------------------------------------------===//
// Layout-preserving ops, Transpose, Concat, Split
//===----------------------------------------------------------------------===//

/// Reshape, Flatten, Squeeze, Unsqueeze: the bytes are unchanged.
Error copyKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (Error e = checkSameBytes(ctx))
    return e;
  if (y.Data != x.Data && y.sizeInBytes())
    std::memcpy(y.Data, x.Data, y.sizeInBytes());
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Slice and SliceGrad
//===----------------------------------------------------------------------===//

/// The CPU's element moves for the shared kernels
/// (kernels/common/MoveKernels.h).
struct Moves {
  static Error copy(const KernelContext &, unsigned bytes, void *dst,
                    const void *src, ArrayRef<int64_t> shape,
                    ArrayRef<int64_t> dstStrides,
                    ArrayRef<int64_t> srcStrides) {
    copyStrided(bytes, dst, src, shape, dstStrides, srcStrides);
    return Error::success();
  }
  static void zero(const KernelContext &, void *dst, uint64_t bytes) {
    if (bytes)
      std::memset(dst, 0, bytes);
  }
};

//===----------------------------------------------------------------------===//
// Gather and GatherGrad
//===----------------------------------------------------------------------===//

/// Gather's data seen as [Outer, N, Inner] around the axis, and the indices,
/// normalized into [0, N).
struct GatherLayout {
  int64_t Outer, N, Inner;
  std::vector<int64_t> Indices;
};

/// `data` is Gather's data (for GatherGrad, its result); `gathered` is
/// Gather's result (GatherGrad's dy), checked against data and indices.
Expected<GatherLayout> gatherLayout(const KernelContext &ctx,
                                    const TensorView &data,
                                    const TensorView &gathered) {
  auto axis = normAxis(ctx, ctx.attrInt("axis", 0), data.rank());
  if (!axis)
    return axis.takeError();
  auto idx = intOperand(ctx, 1, "indices");
  if (!idx)
    return idx.takeError();
  GatherLayout l{product(data.Shape.take_front(*axis)), data.Shape[*axis],
                 product(data.Shape.drop_front(*axis + 1)), std::move(*idx)};
  for (int64_t &i : l.Indices) {
    if (i < -l.N || i >= l.N)
      return ctx.unsupported("index " + Twine(i) +
                             " is out of range for axis " + Twine(*axis) +
                             " of " + data.type().str());
    i = i < 0 ? i + l.N : i;
  }
  if (auto e = checkGathered(ctx, data, gathered, *axis))
    return e;
  return l;
}

Error gatherKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto l = gatherLayout(ctx, x, y);
  if (!l)
    return l.takeError();
  int64_t k = l->Indices.size();
  if (y.numElements() == 0)
    return Error::success();
  withBits(dtypeSize(x.Type), [&](auto zero) {
    using T = decltype(zero);
    const T *src = x.as<T>();
    T *dst = y.as<T>();
    for (int64_t o = 0; o < l->Outer; ++o) {
      for (int64_t j = 0; j < k; ++j) {
        const T *row = src + (o * l->N + l->Indices[j]) * l->Inner;
        T *out = dst + (o * k + j) * l->Inner;
        if (l->Inner == 1)
          *out = *row;
        else
          std::memcpy(out, row, l->Inner * sizeof(T));
      }
    }
  });
  return Error::success();
}

template <typename T>
Error gatherGrad(const TensorView &dy, const TensorView &dx,
                 const GatherLayout &l) {
  T *out = dx.as<T>();
  const T *g = dy.as<T>();
  std::fill_n(out, dx.numElements(), T(0));
  int64_t k = l.Indices.size();
  for (int64_t o = 0; o < l.Outer; ++o) {
    for (int64_t j = 0; j < k; ++j) {
      T *row = out + (o * l.N + l.Indices[j]) * l.Inner;
      const T *grow = g + (o * k + j) * l.Inner;
      for (int64_t i = 0; i < l.Inner; ++i)
        row[i] += grow[i];
    }
  }
  return Error::success();
}

/// GatherGrad(dy, indices) {axis}: zeros shaped like Gather's data with each
/// row of dy added at the row it was gathered from, so repeated indices
/// accumulate (the embedding gradient: rows of a table for axis 0).
Error gatherGradKernel(const KernelContext &ctx) {
  const TensorView &dy = ctx.Inputs[0], &dx = ctx.Outputs[0];
  auto l = gatherLayout(ctx, dx, dy);
  if (!l)
    return l.takeError();
  return HR_DISPATCH_FLOAT(ctx, dx.Type, gatherGrad, dy, dx, *l);
}

//===----------------------------------------------------------------------===//
// GatherElements, ScatterElements, GatherElementsGrad
//===----------------------------------------------------------------------===//

/// For each element of the indices (operand `indicesInput`, of `shape`),
/// the flat offset into `data` of the element it addresses: its own
/// coordinates, with the index (normalized) along the axis. The indices
/// have data's rank and no larger extent on any other axis.
Expected<std::vector<int64_t>> elementOffsets(const KernelContext &ctx,
                                              const TensorView &data,
                                              unsigned indicesInput,
                                              ArrayRef<int64_t> shape) {
  auto axis = normAxis(ctx, ctx.attrInt("axis", 0), data.rank());
  if (!axis)
    return axis.takeError();
  if (shape.size() != data.rank())
    return ctx.unsupported("indices of shape " + shapeString(shape) +
                           " do not have the rank of " + data.type().str());
  for (size_t d = 0; d < shape.size(); ++d)
    if (int64_t(d) != *axis && shape[d] > data.Shape[d])
      return ctx.unsupported("indices of shape " + shapeString(shape) +
                             " exceed " + data.type().str() + " on axis " +
                             Twine(d));
  auto idx = intOperand(ctx, indicesInput, "indices");
  if (!idx)
    return idx.takeError();
  Dims strides = contiguousStrides(data.Shape);
  int64_t n = data.Shape[*axis];
  std::vector<int64_t> coord(shape.size(), 0), out(idx->size());
  for (size_t e = 0; e < idx->size(); ++e) {
    int64_t i = (*idx)[e];
    if (i < -n || i >= n)
      return ctx.unsupported("index " + Twine(i) +
                             " is out of range for axis " + Twine(*axis) +
                             " of " + data.type().str());
    int64_t off = (i < 0 ? i + n : i) * strides[*axis];
    for (size_t d = 0; d < shape.size(); ++d)
      if (int64_t(d) != *axis)
        off += coord[d] * strides[d];
    out[e] = off;
    for (size_t d = shape.size(); d-- > 0;) { // next coordinate
      if (++coord[d] < shape[d])
        break;
      coord[d] = 0;
    }
  }
  return out;
}

/// GatherElements(data, indices) {axis}: y[e] = data[offset(e)].
Error gatherElementsKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (Error e = checkShapedLikeIndices(ctx, "result", y, x.Type))
    return e;
  auto offsets = elementOffsets(ctx, x, 1, ctx.Inputs[1].Shape);
  if (!offsets)
    return offsets.takeError();
  withBits(dtypeSize(x.Type), [&](auto zero) {
    using T = decltype(zero);
    const T *src = x.as<T>();
    T *dst = y.as<T>();
    for (size_t e = 0; e < offsets->size(); ++e)
      dst[e] = src[(*offsets)[e]];
  });
  return Error::success();
}

/// How a reduction other than "none" combines an update into its element.
enum class ScatterKind { Add, Mul, Max, Min };

template <typename T>
Error scatterReduce(const TensorView &u, const TensorView &y,
                    ArrayRef<int64_t> offsets, ScatterKind kind) {
  using C = typename Elem<T>::Compute;
  const T *src = u.as<T>();
  T *dst = y.as<T>();
  for (size_t e = 0; e < offsets.size(); ++e) {
    C a = Elem<T>::load(dst[offsets[e]]), b = Elem<T>::load(src[e]);
    // max and min propagate NaN (numpy's maximum, ONNX's reference).
    C r = kind == ScatterKind::Add   ? a + b
          : kind == ScatterKind::Mul ? a * b
          : kind == ScatterKind::Max ? (b > a || b != b ? b : a)
                                     : (b < a || b != b ? b : a);
    dst[offsets[e]] = Elem<T>::store(r);
  }
  return Error::success();
}

/// The output of ScatterElements and ScatterND: a copy of data (operand 0)
/// with updates[e] (operand 2, flat) written at element offsets[e]
/// ("none"; a repeated offset keeps the last, as onnxruntime), added
/// ("add"), multiplied ("mul"), or the larger or smaller kept ("max",
/// "min", opset 18).
Error scatterAt(const KernelContext &ctx, ArrayRef<int64_t> offsets) {
  const TensorView &x = ctx.Inputs[0], &u = ctx.Inputs[2], &y = ctx.Outputs[0];
  std::string reduction = ctx.attrString("reduction", "none");
  auto kind = llvm::StringSwitch<llvm::Optional<ScatterKind>>(reduction)
                  .Case("add", ScatterKind::Add)
                  .Case("mul", ScatterKind::Mul)
                  .Case("max", ScatterKind::Max)
                  .Case("min", ScatterKind::Min)
                  .Default(llvm::None);
  if (reduction != "none" && !kind)
    return ctx.unsupported("reduction '" + reduction + "'");
  if (y.Data != x.Data)
    std::memcpy(y.Data, x.Data, x.numElements() * dtypeSize(x.Type));
  if (reduction == "none") {
    withBits(dtypeSize(x.Type), [&](auto zero) {
      using T = decltype(zero);
      const T *src = u.as<T>();
      T *dst = y.as<T>();
      for (size_t e = 0; e < offsets.size(); ++e)
        dst[offsets[e]] = src[e];
    });
    return Error::success();
  }
  return dispatchType<FloatTypes | IntTypes>(ctx, x.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return scatterReduce<T>(u, y, offsets, *kind);
  });
}

/// ScatterElements(data, indices, updates) {axis, reduction}: scatterAt the
/// per-element offsets of the indices.
Error scatterElementsKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &u = ctx.Inputs[2], &y = ctx.Outputs[0];
  if (auto e = expectSameType(ctx, x, y))
    return e;
  if (u.Type != x.Type || u.Shape != ctx.Inputs[1].Shape)
    return ctx.unsupported("updates " + u.type().str() + " are not " +
                           dtypeName(x.Type) + " shaped like the indices " +
                           ctx.Inputs[1].type().str());
  auto offsets = elementOffsets(ctx, x, 1, u.Shape);
  if (!offsets)
    return offsets.takeError();
  return scatterAt(ctx, *offsets);
}

/// GatherElementsGrad(dy, indices) {axis}: zeros of the result's type (the
/// gathered data's) with dy[e] added at offset(e).
Error gatherElementsGradKernel(const KernelContext &ctx) {
  const TensorView &dy = ctx.Inputs[0], &dx = ctx.Outputs[0];
  if (Error e = checkShapedLikeIndices(ctx, "dy", dy, dx.Type))
    return e;
  auto offsets = elementOffsets(ctx, dx, 1, dy.Shape);
  if (!offsets)
    return offsets.takeError();
  std::memset(dx.Data, 0, dx.numElements() * dtypeSize(dx.Type));
  return dispatchType<FloatTypes>(ctx, dx.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return scatterReduce<T>(dy, dx, *offsets, ScatterKind::Add);
  });
}

//===----------------------------------------------------------------------===//
// GatherND, ScatterND
//===----------------------------------------------------------------------===//

/// The index tuples of operand `indicesInput` (shape [..., k]) into `data`:
/// the flat offset of the slice each addresses (k leading coordinates,
/// normalized and bounds-checked) and the slice's element count (the
/// product of data's dimensions after the k-th).
struct NdLayout {
  std::vector<int64_t> Offsets;
  int64_t Slice = 1;
  int64_t K = 0;
  int64_t Batch = 0;
  /// GatherND's result shape, ScatterND's updates'.
  Dims SliceShape;
};

Expected<NdLayout> ndLayout(const KernelContext &ctx, const TensorView &data,
                            unsigned indicesInput) {
  auto nd = orUnsupported(ctx, ops::ndIndexing(data.type(),
                                               ctx.Inputs[indicesInput].type(),
                                               ctx.attrInt("batch_dims", 0)));
  if (!nd)
    return nd.takeError();
  NdLayout l;
  l.Batch = nd->Batch;
  l.K = nd->K;
  l.Slice = nd->Slice;
  l.SliceShape = nd->SliceShape;
  int64_t b = nd->Batch, batchStride = nd->BatchStride, perBatch = nd->PerBatch;
  auto idx = intOperand(ctx, indicesInput, "indices");
  if (!idx)
    return idx.takeError();
  Dims strides = contiguousStrides(data.Shape);
  size_t tuples = idx->size() / size_t(l.K);
  l.Offsets.resize(tuples);
  for (size_t t = 0; t < tuples; ++t) {
    int64_t off = perBatch ? int64_t(t) / perBatch * batchStride : 0;
    for (int64_t j = 0; j < l.K; ++j) {
      int64_t i = (*idx)[t * l.K + j], n = data.Shape[b + j];
      if (i < -n || i >= n)
        return ctx.unsupported("index " + Twine(i) +
                               " is out of range for axis " + Twine(b + j) +
                               " of " + data.type().str());
      off += (i < 0 ? i + n : i) * strides[b + j];
    }
    l.Offsets[t] = off;
  }
  return l;
}

/// GatherND(data, indices): the slice at each index tuple.
Error gatherNdKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto l = ndLayout(ctx, x, 1);
  if (!l)
    return l.takeError();
  if (Error e = checkNdSlices(ctx, "result", "is", y, x, l->SliceShape))
    return e;
  size_t bytes = l->Slice * dtypeSize(x.Type);
  for (size_t t = 0; t < l->Offsets.size(); ++t)
    std::memcpy(bytesAt(y, t * l->Slice), bytesAt(x, l->Offsets[t]), bytes);
  return Error::success();
}

/// ScatterND(data, indices, updates) {reduction}: scatterAt every element
/// of the slice at each index tuple.
Error scatterNdKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &u = ctx.Inputs[2], &y = ctx.Outputs[0];
  if (auto e = expectSameType(ctx, x, y))
    return e;
  auto l = ndLayout(ctx, x, 1);
  if (!l)
    return l.takeError();
  if (Error e = checkNdSlices(ctx, "updates", "are", u, x, l->SliceShape))
    return e;
  std::vector<int64_t> offsets;
  offsets.reserve(l->Offsets.size() * l->Slice);
  for (int64_t off : l->Offsets)
    for (int64_t i = 0; i < l->Slice; ++i)
      offsets.push_back(off + i);
  return scatterAt(ctx, offsets);
}

//===----------------------------------------------------------------------===//
// Expand, Tile, Pad, Trilu
//===----------------------------------------------------------------------===//

/// For each index of a padded axis, the index of the input it copies, or -1
/// for the constant. `o - before` is the unpadded position.
std::vector<int64_t> padSources(int64_t outDim, int64_t inDim, int64_t before,
                                PadMode mode) {
  std::vector<int64_t> src(outDim);
  int64_t period = 2 * (inDim - 1);
  for (int64_t o = 0; o < outDim; ++o) {
    int64_t i = o - before;
    if (i >= 0 && i < inDim)
      src[o] = i;
    else if (mode == PadMode::Constant)
      src[o] = -1;
    else if (mode == PadMode::Wrap) // opset 19: numpy.pad's wrap
      src[o] = ((i % inDim) + inDim) % inDim;
    else if (mode == PadMode::Edge || inDim == 1)
      src[o] = i < 0 ? 0 : inDim - 1;
    else { // reflect without repeating the edge, as numpy.pad does
      i = ((i % period) + period) % period;
      src[o] = i < inDim ? i : period - i;
    }
  }
  return src;
}

template <typename T>
void padCopy(const TensorView &x, const TensorView &y,
             ArrayRef<std::vector<int64_t>> sources, T fill) {
  const T *in = x.as<T>();
  T *out = y.as<T>();
  size_t rank = y.rank();
  if (rank == 0) {
    *out = *in;
    return;
  }
  Dims xStrides = contiguousStrides(x.Shape), index(rank - 1, 0);
  const std::vector<int64_t> &inner = sources.back();
  int64_t n = y.Shape.back(), rows = y.numElements() / n;
  for (int64_t r = 0; r < rows; ++r, out += n) {
    int64_t off = 0;
    bool padded = false;
    for (size_t d = 0; d + 1 < rank; ++d) {
      int64_t s = sources[d][index[d]];
      padded |= s < 0;
      off += s * xStrides[d];
    }
    if (padded)
      std::fill_n(out, n, fill);
    for (int64_t j = 0; !padded && j < n; ++j)
      out[j] = inner[j] < 0 ? fill : in[off + inner[j]];
    for (int d = static_cast<int>(rank) - 2; d >= 0; --d) {
      if (++index[d] < y.Shape[d])
        break;
      index[d] = 0;
    }
  }
}

/// Pad(data, pads, constant_value?) {mode: constant, reflect, edge, wrap}.
/// Negative pads crop.
Error padKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto params = padParams(ctx);
  if (!params)
    return params.takeError();
  PadMode mode = params->Mode;
  std::string modeName = ctx.attrString("mode", "constant");
  const std::vector<int64_t> *pads = &params->Pads;
  size_t rank = x.rank();
  Dims shape;
  std::vector<std::vector<int64_t>> sources;
  for (size_t d = 0; d < rank; ++d) {
    int64_t before = (*pads)[d], after = (*pads)[rank + d];
    shape.push_back(x.Shape[d] + before + after);
    if (shape.back() < 0)
      return ctx.unsupported("pads crop axis " + Twine(d) + " of " +
                             x.type().str() + " below nothing");
    if (mode != PadMode::Constant && x.Shape[d] == 0 && shape.back() > 0)
      return ctx.unsupported("cannot pad an empty axis in mode '" + modeName +
                             "'");
    sources.push_back(padSources(shape.back(), x.Shape[d], before, mode));
  }
  if (auto e = expectResultShape(ctx, y, shape))
    return e;
  if (y.numElements() == 0)
    return Error::success();
  bool hasFill = hasOperand(ctx, 2) && ctx.Inputs[2].numElements() > 0;
  if (hasFill)
    if (auto e = expectSameType(ctx, x, ctx.Inputs[2]))
      return e;
  withBits(dtypeSize(x.Type), [&](auto zero) {
    using T = decltype(zero);
    padCopy<T>(x, y, sources, hasFill ? *ctx.Inputs[2].as<T>() : T(0));
  });
  return Error::success();
}

/// CumSum's result along one line of `n` elements `inner` apart: running
/// sums in the compute type (f16/bf16 in float, rounded per result;
/// integers wrap), from the end with `reverse`, each excluding its own
/// element with `exclusive`.
template <typename T>
void cumSumLines(const TensorView &x, const TensorView &y, int64_t outer,
                 int64_t n, int64_t inner, bool exclusive, bool reverse) {
  using C = typename Elem<T>::Compute;
  const T *in = x.as<T>();
  T *out = y.as<T>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      C acc = C(0);
      for (int64_t k = 0; k < n; ++k) {
        int64_t at = (o * n + (reverse ? n - 1 - k : k)) * inner + i;
        C v = Elem<T>::load(in[at]);
        C next;
        if constexpr (std::is_integral_v<C>)
          next = C(std::make_unsigned_t<C>(acc) + std::make_unsigned_t<C>(v));
        else
          next = acc + v;
        out[at] = Elem<T>::store(exclusive ? acc : next);
        acc = next;
      }
    }
}

/// CumSum(x, axis) {exclusive, reverse}.
Error cumSumKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (auto e = expectSameType(ctx, x, y))
    return e;
  auto axis = cumSumAxis(ctx);
  if (!axis)
    return axis.takeError();
  auto s = splitAtAxis(ctx, x, *axis);
  if (!s)
    return s.takeError();
  bool exclusive = ctx.attrInt("exclusive", 0) != 0;
  bool reverse = ctx.attrInt("reverse", 0) != 0;
  return dispatchType<FloatTypes | IntTypes>(ctx, x.Type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cumSumLines<T>(x, y, s->Outer, s->N, s->Inner, exclusive, reverse);
    return Error::success();
  });
}

/// Trilu(x, k?) {upper}: keeps, in each matrix of the last two axes, the
/// elements with col - row >= k (upper) or <= k (lower), one row at a time.
Error triluKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto t = triluShape(ctx);
  if (!t)
    return t.takeError();
  int64_t rows = t->Rows, cols = t->Cols, k = t->K;
  bool upper = t->Upper;
  if (x.numElements() == 0)
    return Error::success();
  int64_t bytes = dtypeSize(x.Type), count = x.numElements() / cols;
  for (int64_t r = 0; r < count; ++r) {
    int64_t row = r % rows;
    // Columns [0, split) are zeroed (upper) or kept (lower).
    int64_t split =
        std::max<int64_t>(0, std::min(cols, upper ? row + k : row + k + 1));
    char *out = bytesAt(y, r * cols);
    const char *in = bytesAt(x, r * cols);
    if (out != in)
      std::memcpy(out, in, cols * bytes);
    if (upper)
      std::memset(out, 0, split * bytes);
    else
      std::memset(out + split * bytes, 0, (cols - split) * bytes);
  }
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Shape, Size, ConstantOfShape, Range
//===----------------------------------------------------------------------===//

Error shapeKernel(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  int64_t rank = x.rank();
  auto clampAxis = [&](int64_t a) {
    return std::max<int64_t>(0, std::min(a < 0 ? a + rank : a, rank));
  };
  int64_t start = clampAxis(ctx.attrInt("start", 0));
  int64_t end = std::max(start, clampAxis(ctx.attrInt("end", rank)));
  if (y.Type != DType::I64 || y.Shape != ArrayRef<int64_t>{end - start})
    return ctx.unsupported("the result must be i64[" + Twine(end - start) +
                           "], not " + y.type().str());
  std::copy(x.Shape.begin() + start, x.Shape.begin() + end, y.as<int64_t>());
  return Error::success();
}

Error sizeKernel(const KernelContext &ctx) {
  const TensorView &y = ctx.Outputs[0];
  if (y.Type != DType::I64 || y.numElements() != 1)
    return ctx.unsupported("the result must be one i64, not " + y.type().str());
  *y.as<int64_t>() = ctx.Inputs[0].numElements();
  return Error::success();
}

/// ConstantOfShape(shape) {value}: the result type already has the shape;
/// the fill is the one element of `value` (default f32 0).
Error constantOfShapeKernel(const KernelContext &ctx) {
  const TensorView &y = ctx.Outputs[0];
  auto value = constantOfShapeFill(ctx);
  if (!value)
    return value.takeError();
  if (!*value) {
    if (y.sizeInBytes())
      std::memset(y.Data, 0, y.sizeInBytes());
    return Error::success();
  }
  withBits(dtypeSize(y.Type), [&](auto zero) {
    using T = decltype(zero);
    T fill;
    std::memcpy(&fill, (*value)->bytes().data(), sizeof(T));
    std::fill_n(y.as<T>(), y.numElements(), fill);
  });
  return Error::success();
}

/// Range's element i is start + i * delta (the ONNX spec's formula, not a
/// running sum), computed in double for floats and int64 for integers.
template <typename T> Error range(const KernelContext &ctx) {
  const TensorView &y = ctx.Outputs[0];
  auto p = rangeParams<T>(ctx, [&](unsigned i, const char *, T &v) {
    v = *ctx.Inputs[i].as<T>();
    return Error::success();
  });
  if (!p)
    return p.takeError();
  T start = p->Start, delta = p->Delta;
  T *out = y.as<T>();
  for (int64_t i = 0; i < y.Shape[0]; ++i) {
    if constexpr (std::is_floating_point_v<T>)
      out[i] = T(double(start) + double(i) * double(delta));
    else
      out[i] = T(int64_t(start) + i * int64_t(delta));
  }
  return Error::success();
}

Error rangeKernel(const KernelContext &ctx) {
  return dispatchRange(ctx, /*withI16=*/true,
                       [&](auto zero) { return range<decltype(zero)>(ctx); });
}

} // namespace

void headroom::cpu::registerShapeKernels() {
  for (OpKind op :
       {OpKind::Reshape, OpKind::Flatten, OpKind::Squeeze, OpKind::Unsqueeze})
    registerKernel(op, copyKernel);
  registerKernel(OpKind::Transpose, transposeKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Concat, concatKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Split, splitKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Slice, sliceKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::SliceGrad, sliceGradKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Gather, gatherKernel);
  registerKernel(OpKind::GatherGrad, gatherGradKernel, FloatSupport::F32F64);
  registerKernel(OpKind::GatherElements, gatherElementsKernel);
  registerKernel(OpKind::GatherND, gatherNdKernel);
  registerKernel(OpKind::ScatterND, scatterNdKernel);
  registerKernel(OpKind::ScatterElements, scatterElementsKernel);
  registerKernel(OpKind::GatherElementsGrad, gatherElementsGradKernel);
  registerKernel(OpKind::Expand, expandKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Tile, tileKernelOf<KernelContext, Moves>);
  registerKernel(OpKind::Pad, padKernel);
  registerKernel(OpKind::Trilu, triluKernel);
  registerKernel(OpKind::CumSum, cumSumKernel);
  registerKernel(OpKind::Shape, shapeKernel);
  registerKernel(OpKind::Size, sizeKernel);
  registerKernel(OpKind::ConstantOfShape, constantOfShapeKernel);
  registerKernel(OpKind::Range, rangeKernel);
}
