//===- DisableDropout.cpp - Every Dropout's ratio becomes 0 ---------------===//
//
// Reproducing a reference that was computed without dropout (the e2e tests'
// PyTorch runs, `--disable-dropout`) needs the same graph with every
// training-mode Dropout's ratio set to 0: the masks are then all ones and the
// step is deterministic. The trained model is then not the one the graph
// describes, so this runs only when asked. A Dropout with one operand is in
// inference mode already and is left alone. Runs before autodiff.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

using namespace headroom;

namespace {

class DisableDropout : public Pass {
public:
  llvm::StringRef name() const override { return "disable-dropout"; }
  llvm::Expected<bool> run(Module &m) override {
    bool changed = false;
    for (const auto &f : m.functions())
      for (Node &n : f->nodes()) {
        if (!n.is(OpKind::Dropout) || n.numOperands() < 2 || !n.operand(1))
          continue;
        Builder b(*f, &n);
        b.setLoc(n.loc());
        DType t = n.operand(1)->type().dtype();
        n.setOperand(1, b.constant(Tensor::fromDoubles(t, {}, {0.0})));
        changed = true;
      }
    return changed;
  }
};

} // namespace

llvm::Expected<std::unique_ptr<Pass>>
headroom::createDisableDropoutPass(llvm::StringRef options) {
  if (auto e = checkNoOptions("disable-dropout", options))
    return e;
  return std::make_unique<DisableDropout>();
}
