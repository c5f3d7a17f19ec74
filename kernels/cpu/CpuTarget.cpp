//===- CpuTarget.cpp - The CPU backend as lowering sees it ----------------===//
#include "kernels/cpu/CpuTarget.h"

#include "kernels/cpu/Kernel.h"

#include "compiler/Collectives.h"

using namespace headroom;

namespace {

/// Views with the node's types and no data: what the workspace queries take.
llvm::SmallVector<kernels::TensorView, 4>
typeViews(llvm::ArrayRef<Value *> values) {
  llvm::SmallVector<kernels::TensorView, 4> out;
  for (Value *v : values) {
    kernels::TensorView view;
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
    if (!cpu::lookupKernel(n.kind()))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "has no kernel for op '%s'",
                                     n.op().c_str());
    // Every float type: f16/bf16 are widened for f32-only kernels
    // (cpu::runKernel).
    return llvm::Error::success();
  }

  uint64_t workspaceBytes(const Node &n) const override {
    if (isCollective(n.kind()))
      return hostCollectiveWorkspace(n, n.parent()->parent()->ranks());
    auto ins = typeViews(n.operands()), outs = typeViews(n.results());
    // An update op's last outputs are its state slots (the executor's call).
    if (n.info()->has(opflags::WritesState))
      for (const StateSlot *s : n.states()) {
        kernels::TensorView slot;
        slot.Type = s->type().dtype();
        slot.Shape = s->type().shape();
        outs.push_back(slot);
      }
    return cpu::kernelWorkspaceBytes(
        kernels::KernelContext{n.op(), ins, outs, n.attrs()});
  }
};

} // namespace

const Target &headroom::cpuTarget() {
  static const CpuTarget target;
  return target;
}
