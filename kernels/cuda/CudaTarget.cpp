//===- CudaTarget.cpp - The CUDA backend as lowering sees it --------------===//
//
// cudaHasKernel is the CUDA backend's contract: a node outside it, or an
// element type the kernels do not compute, is refused when the plan is made.
// Matmuls go through cuBLASLt, whose workspace is the library bytes. The
// project's own kernels take per-call scratch only to split a big reduction
// into two passes (losses' sum and mean, Reduce* to few outputs):
// kernels/cuda/Workspace.h sizes it, for this and for the kernels alike.
//
//===----------------------------------------------------------------------===//
#include "kernels/cuda/CudaTarget.h"

#include "compiler/Collectives.h"
#include "kernels/cuda/Workspace.h"

#include <algorithm>

using namespace headroom;

namespace {

/// Operands kernels/cuda reads on the host when it launches the call (shape
/// operands, scalar parameters): a CUDA graph replays launches, so these must
/// be constants of the plan, never values computed on the device.
struct HostOperands {
  OpKind Op;
  std::initializer_list<unsigned> Operands;
  const char *Names;
};
const HostOperands kHostOperands[] = {
    {OpKind::Clip, {1, 2}, "min and max"},
    {OpKind::Dropout, {1, 2}, "ratio and training_mode"},
    {OpKind::Trilu, {1}, "k"},
    {OpKind::CumSum, {1}, "axis"},
    {OpKind::Split, {1}, "split"},
    {OpKind::Slice, {1, 2, 3, 4}, "starts, ends, axes and steps"},
    {OpKind::SliceGrad, {1, 2, 3, 4}, "starts, ends, axes and steps"},
    {OpKind::Tile, {1}, "repeats"},
    {OpKind::Pad, {1}, "pads"},
    {OpKind::ConstantOfShape, {0}, "shape"},
    {OpKind::Range, {0, 1, 2}, "start, limit and delta"},
    {OpKind::ReduceMean, {1}, "axes"},
    {OpKind::ReduceSum, {1}, "axes"},
    {OpKind::ReduceMax, {1}, "axes"},
    {OpKind::ReduceMin, {1}, "axes"},
    {OpKind::ReduceProd, {1}, "axes"},
};

constexpr DType kCudaIntTypes[] = {DType::I8, DType::I32, DType::I64, DType::U8,
                                   DType::Bool};

class CudaTarget : public Target {
public:
  llvm::StringRef name() const override { return "cuda"; }
  uint64_t alignment() const override { return 256; }
  uint64_t libraryBytes() const override { return kCublasLtWorkspaceBytes; }
  uint64_t collectiveLibraryBytes() const override { return kNcclBytes; }
  bool hasHostPool() const override { return true; }
  /// NCCL runs collectives on the copy stream; one padded through the
  /// compute stream's workspace stays in order.
  bool overlapsCollective(const Node &n) const override {
    return isCollective(n.kind()) && workspaceBytes(n) == 0;
  }

  uint64_t workspaceBytes(const Node &n) const override {
    // NCCL's reduce-scatter and all-gather take equal shards: a tensor the
    // ranks do not divide is padded in the workspace.
    if (n.is(OpKind::ReduceScatter) || n.is(OpKind::AllGather) ||
        n.is(OpKind::AllGatherState)) {
      const TensorType &whole = n.is(OpKind::ReduceScatter)
                                    ? n.operand(0)->type()
                                : n.is(OpKind::AllGather) ? n.result(0)->type()
                                                          : n.state()->type();
      unsigned ranks = n.parent()->parent()->ranks();
      int64_t padded = shardElements(whole.numElements(), ranks) * ranks;
      return padded == whole.numElements()
                 ? 0
                 : uint64_t(padded) * dtypeSize(whole.dtype());
    }
    if (isCollective(n.kind()))
      return 0;
    llvm::SmallVector<cuda::ws::CallValue, 4> ins, outs;
    for (const Value *v : n.operands())
      ins.push_back(
          v ? cuda::ws::CallValue{true, v->type().shape(), v->type().dtype()}
            : cuda::ws::CallValue{});
    for (const Value *v : n.results())
      outs.push_back({true, v->type().shape(), v->type().dtype()});
    return cuda::ws::workspaceBytes(n.op(), ins, outs, n.attrs());
  }

  llvm::Error checkSupported(const Node &n) const override {
    if (runByExecutor(n))
      return llvm::Error::success();
    if (!cudaHasKernel(n.kind()))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "has no kernel for op '%s'",
                                     n.op().c_str());
    for (const HostOperands &h : kHostOperands) {
      if (!n.is(h.Op))
        continue;
      for (unsigned i : h.Operands)
        if (i < n.numOperands() && n.operand(i) &&
            !(n.operand(i)->definingNode() &&
              n.operand(i)->definingNode()->is(OpKind::Constant)))
          return llvm::createStringError(
              llvm::inconvertibleErrorCode(),
              "needs %s to be constants on cuda (operand %u is computed)",
              h.Names, i);
    }
    // Integers: the types the kernels instantiate (kernels/cuda/Kernel.h).
    for (const Value *v : llvm::concat<Value *const>(n.operands(), n.results()))
      if (v && !isFloat(v->type().dtype()) &&
          !llvm::is_contained(kCudaIntTypes, v->type().dtype()))
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            "computes no %s on cuda (i8, i32, i64, u8 and bool only)",
            dtypeName(v->type().dtype()).str().c_str());
    // f32, bf16 and f16 everywhere; f64 only elementwise (the optimizers'
    // step counters and bias corrections).
    if (n.info()->has(opflags::Elementwise) || n.is(OpKind::Cast))
      return checkFloatTypes(n,
                             {DType::F32, DType::BF16, DType::F16, DType::F64});
    return checkFloatTypes(n, {DType::F32, DType::BF16, DType::F16});
  }
};

} // namespace

bool headroom::cudaHasKernel(OpKind op) {
  return !Target::runByExecutor(op) && op != OpKind::Shape &&
         op != OpKind::Size;
}

const Target &headroom::cudaTarget() {
  static const CudaTarget target;
  return target;
}
