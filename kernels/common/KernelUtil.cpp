//===- KernelUtil.cpp - Helpers shared by the kernel families -------------===//
#include "kernels/common/KernelUtil.h"

#include "compiler/Types.h"

using namespace headroom;
using namespace headroom::kernels;

llvm::Expected<std::vector<int64_t>>
kernels::intOperand(const KernelContext &ctx, unsigned i,
                    llvm::StringRef what) {
  const TensorView &t = ctx.Inputs[i];
  if (t.Type != DType::I32 && t.Type != DType::I64)
    return ctx.unsupported("operand " + llvm::Twine(i) + " is " +
                           dtypeName(t.Type) + ", expected i32 or i64");
  if (i < ctx.Constants.size() && ctx.Constants[i])
    return ctx.Constants[i]->toInts();
  if (!ctx.HostData)
    return ctx.unsupported(what + " must be a constant on cuda");
  std::vector<int64_t> v(t.numElements());
  if (t.Type == DType::I64)
    std::copy_n(t.as<int64_t>(), v.size(), v.begin());
  else
    std::copy_n(t.as<int32_t>(), v.size(), v.begin());
  return v;
}

llvm::Expected<ops::SliceBox>
kernels::sliceBox(const KernelContext &ctx, llvm::ArrayRef<int64_t> dataShape) {
  static const char *const names[] = {"", "starts", "ends", "axes", "steps"};
  std::vector<int64_t> ints[5];
  for (unsigned operand = 1; operand < 5; ++operand) {
    if (operand >= 3 && !hasOperand(ctx, operand))
      continue;
    auto v = intOperand(ctx, operand, names[operand]);
    if (!v)
      return v.takeError();
    ints[operand] = std::move(*v);
  }
  auto given = [&](unsigned i) {
    return hasOperand(ctx, i) ? llvm::makeArrayRef(ints[i])
                              : llvm::Optional<llvm::ArrayRef<int64_t>>();
  };
  return orUnsupported(
      ctx, ops::sliceBox(dataShape, ints[1], ints[2], given(3), given(4)));
}

llvm::Expected<std::vector<int64_t>>
kernels::reduceAxes(const KernelContext &ctx, bool &noop) {
  std::vector<int64_t> axes;
  if (ctx.hasInput(1)) {
    if (ctx.Inputs[1].Type != DType::I64)
      return ctx.unsupported("axes must be i64");
    auto v = intOperand(ctx, 1, "axes");
    if (!v)
      return v.takeError();
    axes = std::move(*v);
  } else {
    axes = ctx.attrInts("axes");
  }
  int64_t rank = ctx.Inputs[0].rank();
  noop = axes.empty() && ctx.attrInt("noop_with_empty_axes", 0);
  for (int64_t &a : axes) {
    auto n = normAxis(ctx, a, rank);
    if (!n)
      return n.takeError();
    a = *n;
  }
  return axes;
}
