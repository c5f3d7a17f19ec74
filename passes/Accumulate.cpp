//===- Accumulate.cpp - Gradient accumulation over micro-batches ----------===//
//
// `accumulate{steps=k}` turns one step on a batch into k calls on its
// micro-batches (the model is imported with the micro-batch size):
//   @accumulate.first   forward + backward; acc = g / k       (k >= 2)
//   @accumulate         forward + backward; acc += g / k      (k >= 3)
//   @step               forward + backward; acc += g / k; the optimizer
//                       updates from acc
// driven as `@accumulate.first, @accumulate repeat k-2, @step`. Each
// parameter's accumulator `<param>.grad` is state of kind `grad`, in the
// parameter's type: the first call writes it, so it never needs zeroing.
// Scaling each gradient by 1/k makes the sum the gradient of the mean loss
// over the k micro-batches (for a mean-reduced loss: the batch's loss), as
// PyTorch's `(loss / k).backward()` does; for k a power of two the scaling
// is exact and the two agree bit for bit.
//
// Requires: autodiff has run (ParamGrad nodes), no driver yet. Guarantees:
// only @step has ParamGrads, each of a Read of its accumulator; the
// optimizer pass runs next and sees the accumulated gradients.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "compiler/UpdateAnalysis.h"

#include "llvm/ADT/STLExtras.h"

using namespace headroom;

namespace {

class Accumulate : public Pass {
public:
  explicit Accumulate(unsigned steps) : Steps(steps) {}
  llvm::StringRef name() const override { return "accumulate"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  unsigned Steps;
};

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "accumulate: " + msg.str());
}

/// Replaces every ParamGrad of `f` with an Accumulate into its accumulator;
/// in the last step the ParamGrad stays and takes the accumulated sum.
llvm::Error rewrite(Module &m, Function &f, double scale, bool first,
                    bool last) {
  std::vector<Node *> grads;
  for (Node &n : f.nodes())
    if (n.is(OpKind::ParamGrad))
      grads.push_back(&n);
  for (Node *n : grads) {
    auto slot =
        stateSlotFor(m, n->state()->name() + ".grad", n->state()->type(),
                     StateKind::Gradient, "accumulate");
    if (!slot)
      return slot.takeError();
    StateSlot *acc = *slot;
    AttributeMap a;
    a["scale"] = Attribute::getFloat(scale);
    a["first"] = Attribute::getInt(first);
    Builder b(f, n);
    b.create("Accumulate", {n->operand(0)}, {}, a, acc);
    if (last)
      n->setOperand(0, b.read(acc));
    else
      n->erase();
  }
  return llvm::Error::success();
}

} // namespace

llvm::Expected<bool> Accumulate::run(Module &m) {
  if (Steps == 1)
    return false;
  Function *step = nullptr;
  for (const auto &f : m.functions())
    if (llvm::any_of(f->nodes(),
                     [](const Node &n) { return n.is(OpKind::ParamGrad); })) {
      if (step)
        return fail("more than one function has parameter gradients (@" +
                    step->name() + ", @" + f->name() + ")");
      step = f.get();
    }
  if (!step)
    return fail("no parameter gradients; run autodiff first");
  if (!m.driver().empty())
    return fail("the module already has a driver; accumulate runs once, "
                "before the optimizer");
  stampRandomStreams(*step);
  for (Node &n : step->nodes())
    if (n.is(OpKind::ParamGrad))
      tagGradient(n.operand(0), n.state());
  double scale = 1.0 / Steps;
  Function *first =
      m.cloneFunction(*step, freshFunctionName(m, "accumulate.first"));
  if (auto e = rewrite(m, *first, scale, /*first=*/true, /*last=*/false))
    return e;
  std::vector<DriverStep> driver = {{first, 1, false}};
  if (Steps > 2) {
    Function *middle =
        m.cloneFunction(*step, freshFunctionName(m, "accumulate"));
    if (auto e = rewrite(m, *middle, scale, /*first=*/false, /*last=*/false))
      return e;
    driver.push_back({middle, Steps - 2, false});
  }
  if (auto e = rewrite(m, *step, scale, /*first=*/false, /*last=*/true))
    return e;
  driver.push_back({step, 1, false});
  m.setDriver(std::move(driver));
  return true;
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createAccumulatePass(llvm::StringRef options) {
  auto items = parsePassOptions("accumulate", options);
  if (!items)
    return items.takeError();
  unsigned steps = 0;
  for (const auto &[key, value] : *items) {
    if (key != "steps")
      return fail("unknown option '" + key + "' (steps)");
    if (llvm::StringRef(value).getAsInteger(10, steps) || steps == 0)
      return fail("steps=" + value + ": expected a whole number >= 1");
  }
  if (steps == 0)
    return fail("steps=k is required");
  return std::make_unique<Accumulate>(steps);
}
