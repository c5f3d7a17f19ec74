//===- MoveKernels.h - Kernels that only move elements ----------*- C++ -*-===//
//
// Transpose, Concat, Split, Slice, SliceGrad, Expand and Tile, written once
// for both
// backends: each checks its operands by the rules of compiler/ops/Shape.h
// and moves elements with two primitives its backend gives as `Moves`:
//
//   static llvm::Error copy(const Ctx &ctx, unsigned bytes, void *dst,
//                           const void *src, ArrayRef<int64_t> shape,
//                           ArrayRef<int64_t> dstStrides,
//                           ArrayRef<int64_t> srcStrides);
//   static void zero(const Ctx &ctx, void *dst, uint64_t bytes);
//
// (a strided copy of `shape` elements of `bytes` bytes, strides in
// elements; and zeroing): memcpy loops on the CPU, launches on the GPU.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_MOVEKERNELS_H
#define HEADROOM_KERNELS_COMMON_MOVEKERNELS_H

#include "compiler/ops/Shape.h"
#include "kernels/common/KernelUtil.h"

namespace headroom {
namespace kernels {

template <typename Ctx, typename Moves>
llvm::Error transposeKernelOf(const Ctx &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  std::vector<int64_t> given = ctx.attrInts("perm");
  auto perm = orUnsupported(
      ctx, ops::transposePerm(ctx.attr("perm")
                                  ? llvm::makeArrayRef(given)
                                  : llvm::Optional<llvm::ArrayRef<int64_t>>(),
                              x.rank()));
  if (!perm)
    return perm.takeError();
  ops::TransposeLayout layout = ops::transposeLayout(x.Shape, *perm);
  if (llvm::Error e = expectResultShape(ctx, y, layout.Shape))
    return e;
  if (llvm::Error e = expectSameType(ctx, x, y))
    return e;
  return Moves::copy(ctx, dtypeSize(x.Type), y.Data, x.Data, y.Shape,
                     ops::contiguousStrides(y.Shape), layout.SourceStrides);
}

/// Concat and Split: copies `parts` into or out of `whole` along the axis.
/// Seen as [outer, axis, inner], a part is a block of rows in every outer
/// slice of the whole: one copy per part.
template <typename Ctx, typename Moves>
llvm::Error joinOrSplit(const Ctx &ctx, const TensorView &whole,
                        llvm::ArrayRef<TensorView> parts, bool join) {
  std::vector<TensorType> partTypes;
  for (const TensorView &p : parts)
    partTypes.push_back(p.type());
  auto axis = orUnsupported(
      ctx, ops::joinAxis(ctx.attrInt("axis", 0), whole.type(), partTypes));
  if (!axis)
    return axis.takeError();
  int64_t outer = ops::product(whole.Shape.take_front(*axis));
  int64_t inner = ops::product(whole.Shape.drop_front(*axis + 1));
  int64_t wholeRow = whole.Shape[*axis] * inner, offset = 0;
  unsigned bytes = dtypeSize(whole.Type);
  for (const TensorView &p : parts) {
    int64_t n = p.Shape[*axis];
    int64_t shape[] = {outer, n * inner};
    int64_t wholeStrides[] = {wholeRow, 1}, partStrides[] = {n * inner, 1};
    char *w = bytesAt(whole, offset);
    llvm::Error e = join ? Moves::copy(ctx, bytes, w, p.Data, shape,
                                       wholeStrides, partStrides)
                         : Moves::copy(ctx, bytes, p.Data, w, shape,
                                       partStrides, wholeStrides);
    if (e)
      return e;
    offset += n * inner;
  }
  return llvm::Error::success();
}

template <typename Ctx, typename Moves>
llvm::Error concatKernelOf(const Ctx &ctx) {
  return joinOrSplit<Ctx, Moves>(ctx, ctx.Outputs[0], ctx.Inputs,
                                 /*join=*/true);
}

template <typename Ctx, typename Moves>
llvm::Error splitKernelOf(const Ctx &ctx) {
  const TensorView &x = ctx.Inputs[0];
  if (hasOperand(ctx, 1)) {
    auto split = intOperand(ctx, 1, "split");
    if (!split)
      return split.takeError();
    std::vector<TensorType> results;
    for (const TensorView &y : ctx.Outputs)
      results.push_back(y.type());
    if (auto e = ops::checkSplitSizes(*split, ctx.attrInt("axis", 0), x.type(),
                                      results))
      return ctx.unsupported(llvm::toString(std::move(e)));
  }
  return joinOrSplit<Ctx, Moves>(ctx, x, ctx.Outputs, /*join=*/false);
}

template <typename Ctx, typename Moves>
llvm::Error sliceKernelOf(const Ctx &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto box = sliceBox(ctx, x.Shape);
  if (!box)
    return box.takeError();
  if (llvm::Error e = expectResultShape(ctx, y, box->Shape))
    return e;
  if (llvm::Error e = expectSameType(ctx, x, y))
    return e;
  if (y.numElements() == 0)
    return llvm::Error::success();
  ops::Dims strides;
  int64_t first = ops::boxLayout(*box, x.Shape, strides);
  return Moves::copy(ctx, dtypeSize(x.Type), y.Data, bytesAt(x, first), y.Shape,
                     ops::contiguousStrides(y.Shape), strides);
}

/// SliceGrad(dy, starts, ends, axes?, steps?): zeros shaped like Slice's
/// data, with dy written where Slice read. Slice reads each position at most
/// once, so writing (not adding) is exact.
template <typename Ctx, typename Moves>
llvm::Error sliceGradKernelOf(const Ctx &ctx) {
  const TensorView &dy = ctx.Inputs[0], &dx = ctx.Outputs[0];
  auto box = sliceBox(ctx, dx.Shape);
  if (!box)
    return box.takeError();
  if (dy.Shape != llvm::ArrayRef<int64_t>(box->Shape))
    return ctx.unsupported("dy is " + dy.type().str() + ", but the slice of " +
                           dx.type().str() + " is " + shapeString(box->Shape));
  if (llvm::Error e = expectSameType(ctx, dy, dx))
    return e;
  Moves::zero(ctx, dx.Data, dx.sizeInBytes());
  if (dy.numElements() == 0)
    return llvm::Error::success();
  ops::Dims strides;
  int64_t first = ops::boxLayout(*box, dx.Shape, strides);
  return Moves::copy(ctx, dtypeSize(dx.Type), bytesAt(dx, first), dy.Data,
                     dy.Shape, strides, ops::contiguousStrides(dy.Shape));
}

template <typename Ctx, typename Moves>
llvm::Error expandKernelOf(const Ctx &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (llvm::Error e = expectSameType(ctx, x, y))
    return e;
  if (x.rank() > y.rank())
    return ctx.unsupported(x.type().str() + " has a higher rank than " +
                           y.type().str());
  // x's axes align with y's last ones; a size-1 axis of x is read with
  // stride 0.
  size_t lead = y.rank() - x.rank();
  ops::Dims xStrides = ops::contiguousStrides(x.Shape), srcStrides(y.rank(), 0);
  for (size_t d = 0; d < x.rank(); ++d) {
    if (x.Shape[d] == y.Shape[lead + d])
      srcStrides[lead + d] = xStrides[d];
    else if (x.Shape[d] != 1)
      return ctx.unsupported(x.type().str() + " does not broadcast to " +
                             y.type().str());
  }
  return Moves::copy(ctx, dtypeSize(x.Type), y.Data, x.Data, y.Shape,
                     ops::contiguousStrides(y.Shape), srcStrides);
}

/// Tile sees the result's axis d as [repeats[d], x.Shape[d]]: a copy of x
/// with stride 0 over the repeats.
template <typename Ctx, typename Moves>
llvm::Error tileKernelOf(const Ctx &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  auto repeats = intOperand(ctx, 1, "repeats");
  if (!repeats)
    return repeats.takeError();
  if (repeats->size() != x.rank())
    return ctx.unsupported("repeats has " + llvm::Twine(repeats->size()) +
                           " entries for rank " + llvm::Twine(x.rank()));
  ops::Dims shape, xStrides = ops::contiguousStrides(x.Shape);
  for (size_t d = 0; d < x.rank(); ++d)
    shape.push_back(x.Shape[d] * (*repeats)[d]);
  if (llvm::Error e = expectResultShape(ctx, y, shape))
    return e;
  if (llvm::Error e = expectSameType(ctx, x, y))
    return e;
  ops::Dims yStrides = ops::contiguousStrides(y.Shape), loops, dst, src;
  for (size_t d = 0; d < x.rank(); ++d) {
    loops.append({(*repeats)[d], x.Shape[d]});
    dst.append({yStrides[d] * x.Shape[d], yStrides[d]});
    src.append({0, xStrides[d]});
  }
  return Moves::copy(ctx, dtypeSize(x.Type), y.Data, x.Data, loops, dst, src);
}

/// Trilu(x, k?) {upper}: the matrices of the last two axes, [Rows, Cols],
/// and the diagonal K (clamped so that row + K cannot overflow; the kept
/// columns are the same).
struct TriluShape {
  int64_t Rows = 0, Cols = 0, K = 0;
  bool Upper = true;
};
inline llvm::Expected<TriluShape> triluShape(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (x.rank() < 2)
    return ctx.unsupported("the input must have rank >= 2, not " +
                           x.type().str());
  if (x.type() != y.type())
    return ctx.unsupported("result " + y.type().str() + " differs from " +
                           x.type().str());
  TriluShape t;
  t.Rows = x.Shape[x.rank() - 2];
  t.Cols = x.Shape.back();
  if (hasOperand(ctx, 1)) {
    auto kv = intOperand(ctx, 1, "k");
    if (!kv)
      return kv.takeError();
    if (kv->size() != 1)
      return ctx.unsupported("k must have one element");
    t.K = std::max(-t.Rows - 1, std::min((*kv)[0], t.Cols + 1));
  }
  t.Upper = ctx.attrInt("upper", 1) != 0;
  return t;
}

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_MOVEKERNELS_H
