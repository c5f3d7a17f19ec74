//===- CpuTarget.cpp - The CPU backend as lowering sees it ----------------===//
#include "kernels/cpu/CpuTarget.h"

#include "kernels/cpu/Kernel.h"

using namespace headroom;

namespace {

/// Views with the node's types and no data: what the workspace queries take.
llvm::SmallVector<cpu::TensorView, 4>
typeViews(llvm::ArrayRef<Value *> values) {
  llvm::SmallVector<cpu::TensorView, 4> out;
  for (Value *v : values) {
    cpu::TensorView view;
    if (v) {
      view.Type = v->type().dtype();
      view.Shape = v->type().shape();
    }
    out.push_back(view);
  }
  return out;
}

class CpuTarget : public Target {
public:
  llvm::StringRef name() const override { return "cpu"; }
  uint64_t alignment() const override { return 64; }

  llvm::Error checkSupported(const Node &n) const override {
    if (runByExecutor(n))
      return llvm::Error::success();
    if (!cpu::lookupKernel(n.op()))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "has no kernel for op '%s'",
                                     n.op().c_str());
    if (cpu::kernelFloatTypes(n.op()) == cpu::FloatTypes::All)
      return llvm::Error::success();
    return checkFloatTypes(n, {DType::F32, DType::F64});
  }

  uint64_t workspaceBytes(const Node &n) const override {
    cpu::WorkspaceFn query = cpu::lookupWorkspace(n.op());
    if (!query)
      return 0;
    auto ins = typeViews(n.operands()), outs = typeViews(n.results());
    return query(cpu::KernelContext{n.op(), ins, outs, n.attrs()});
  }
};

} // namespace

const Target &headroom::cpuTarget() {
  static const CpuTarget target;
  return target;
}
