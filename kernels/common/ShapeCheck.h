//===- ShapeCheck.h - The shape family's operands, host side ---*- C++ -*-===//
//
// What the CPU and CUDA kernels of the shape family (Reshape and its kin,
// Gather and GatherElements with their gradients, GatherND/ScatterND, Pad,
// CumSum, Range) check before they move elements, written once (the
// pattern of NormCheck.h). Shapes come from compiler/ops/Shape.h; shape
// operands are read through intOperand (data on the CPU, the plan's
// constants on the GPU).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_KERNELS_COMMON_SHAPECHECK_H
#define HEADROOM_KERNELS_COMMON_SHAPECHECK_H

#include "compiler/ops/Shape.h"
#include "kernels/common/KernelUtil.h"

#include <cmath>
#include <string>

namespace headroom {
namespace kernels {

/// Reshape, Flatten, Squeeze, Unsqueeze: the same bytes.
inline llvm::Error checkSameBytes(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  if (x.Type != y.Type || x.numElements() != y.numElements())
    return ctx.unsupported("input " + x.type().str() + " and result " +
                           y.type().str() + " differ in size");
  return llvm::Error::success();
}

/// `gathered` (Gather's result, GatherGrad's dy) is what `data` and the
/// indices (operand 1) gather along `axis`.
inline llvm::Error checkGathered(const KernelContext &ctx,
                                 const TensorView &data,
                                 const TensorView &gathered, int64_t axis) {
  const TensorView &indices = ctx.Inputs[1];
  ops::Dims shape = ops::gatherShape(data.Shape, indices.Shape, axis);
  if (gathered.Shape != llvm::ArrayRef<int64_t>(shape))
    return ctx.unsupported(
        "data " + data.type().str() + " and indices " + indices.type().str() +
        " gather " + shapeString(shape) + ", not " + gathered.type().str());
  return expectSameType(ctx, data, gathered);
}

/// GatherElements' result (`what` "result") or its gradient's dy: of
/// `type`, shaped like the indices (operand 1).
inline llvm::Error checkShapedLikeIndices(const KernelContext &ctx,
                                          llvm::StringRef what,
                                          const TensorView &v, DType type) {
  const TensorView &indices = ctx.Inputs[1];
  if (v.Type != type || v.Shape != indices.Shape)
    return ctx.unsupported(what + " " + v.type().str() + " is not " +
                           dtypeName(type) + " shaped like the indices " +
                           indices.type().str());
  return llvm::Error::success();
}

/// GatherND's result or ScatterND's updates (`what`, e.g. "result ... is"
/// or "updates ... are"): data's element type, the slices' shape.
inline llvm::Error checkNdSlices(const KernelContext &ctx, llvm::StringRef what,
                                 llvm::StringRef verb, const TensorView &v,
                                 const TensorView &data,
                                 llvm::ArrayRef<int64_t> sliceShape) {
  if (v.Type != data.Type || v.Shape != sliceShape)
    return ctx.unsupported(what + " " + v.type().str() + " " + verb + " not " +
                           TensorType(data.Type, sliceShape).str());
  return llvm::Error::success();
}

/// ConstantOfShape(shape) {value}: the result has the shape; the fill is
/// the one element of `value` of the result's type, or null for the
/// default f32 0.
inline llvm::Expected<const Tensor *>
constantOfShapeFill(const KernelContext &ctx) {
  const TensorView &y = ctx.Outputs[0];
  auto shape = intOperand(ctx, 0, "shape");
  if (!shape)
    return shape.takeError();
  if (llvm::Error e = expectResultShape(ctx, y, *shape))
    return llvm::Expected<const Tensor *>(std::move(e));
  const Attribute *value = ctx.attr("value");
  if (!value) {
    if (y.Type != DType::F32)
      return ctx.unsupported("without `value` the result must be f32");
    return nullptr;
  }
  if (value->kind() != Attribute::Kind::Tensor ||
      value->asTensor().numElements() != 1 ||
      value->asTensor().type().dtype() != y.Type)
    return ctx.unsupported("`value` must be one element of the result type");
  return &value->asTensor();
}

/// Pad's mode and pads (operand 1: before for each axis, then after).
enum class PadMode { Constant, Reflect, Edge, Wrap };
struct PadParams {
  PadMode Mode = PadMode::Constant;
  std::vector<int64_t> Pads;
};
inline llvm::Expected<PadParams> padParams(const KernelContext &ctx) {
  const TensorView &x = ctx.Inputs[0], &y = ctx.Outputs[0];
  PadParams p;
  std::string modeName = ctx.attrString("mode", "constant");
  p.Mode = modeName == "reflect" ? PadMode::Reflect
           : modeName == "edge"  ? PadMode::Edge
           : modeName == "wrap"  ? PadMode::Wrap
                                 : PadMode::Constant;
  if (p.Mode == PadMode::Constant && modeName != "constant")
    return ctx.unsupported("mode '" + modeName + "' is not supported");
  if (hasOperand(ctx, 3))
    return ctx.unsupported("the axes operand (opset 18) is not supported");
  auto pads = intOperand(ctx, 1, "pads");
  if (!pads)
    return pads.takeError();
  size_t rank = x.rank();
  if (pads->size() != 2 * rank)
    return ctx.unsupported("pads has " + llvm::Twine(pads->size()) +
                           " entries for rank " + llvm::Twine(rank));
  if (llvm::Error e = expectSameType(ctx, x, y))
    return llvm::Expected<PadParams>(std::move(e));
  p.Pads = std::move(*pads);
  return p;
}

/// CumSum's axis (operand 1, one integer), not yet normalized.
inline llvm::Expected<int64_t> cumSumAxis(const KernelContext &ctx) {
  auto axes = intOperand(ctx, 1, "axis");
  if (!axes)
    return axes.takeError();
  if (axes->size() != 1)
    return ctx.unsupported("axis must be one integer");
  return (*axes)[0];
}

/// Range's start, limit and delta (scalars of the result's type, read by
/// `read(i, name, T &value)`) and its element count, checked against the
/// result.
template <typename T> struct RangeParams {
  T Start, Limit, Delta;
  int64_t Count;
};
template <typename T, typename Read>
llvm::Expected<RangeParams<T>> rangeParams(const KernelContext &ctx,
                                           Read read) {
  const TensorView &y = ctx.Outputs[0];
  T v[3];
  const char *names[] = {"start", "limit", "delta"};
  for (unsigned i = 0; i < 3; ++i) {
    const TensorView &t = ctx.Inputs[i];
    if (t.numElements() != 1 || t.Type != y.Type)
      return ctx.unsupported("start, limit and delta must be scalars of the "
                             "result's element type");
    if (llvm::Error e = read(i, names[i], v[i]))
      return llvm::Expected<RangeParams<T>>(std::move(e));
  }
  if (v[2] == 0)
    return ctx.unsupported("delta is 0");
  double count = std::ceil((double(v[1]) - double(v[0])) / double(v[2]));
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  if (y.rank() != 1 || y.Shape[0] != n)
    return ctx.unsupported("the operands give " + llvm::Twine(n) +
                           " elements, but the result type is " +
                           y.type().str());
  return RangeParams<T>{v[0], v[1], v[2], n};
}

/// Range's kernel for the result's element type: `fn(T())` for f32, f64,
/// i16 (when `withI16`), i32 and i64.
template <typename Fn>
llvm::Error dispatchRange(const KernelContext &ctx, bool withI16, Fn fn) {
  switch (ctx.Outputs[0].Type) {
  case DType::F32:
    return fn(float());
  case DType::F64:
    return fn(double());
  case DType::I16:
    if (withI16)
      return fn(int16_t());
    break;
  case DType::I32:
    return fn(int32_t());
  case DType::I64:
    return fn(int64_t());
  default:
    break;
  }
  return ctx.unsupported("element type " + dtypeName(ctx.Outputs[0].Type) +
                         " is not supported");
}

} // namespace kernels
} // namespace headroom

#endif // HEADROOM_KERNELS_COMMON_SHAPECHECK_H
