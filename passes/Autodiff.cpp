//===- Autodiff.cpp - Reverse-mode differentiation of the loss ------------===//
//
// Turns @forward (which returns the loss) into @step: the forward nodes, then
// the backward nodes built by the rule table (passes/GradientRules.cpp) in
// reverse order, then one `ParamGrad(@w, %dw)` per trainable parameter the
// loss depends on, whose gradient is tagged `grad_of`
// (compiler/UpdateAnalysis.h). Gradients reaching a value along several uses
// are summed. Only float values on a path from a parameter to the loss are
// differentiated: integer tensors, shape operands, indices and masks are
// never on such a path, so the cut is automatic.
//
// Requires: canonicalized IR with one function returning a scalar float
// loss. Guarantees: @step returns the loss; every parameter with a
// gradient has exactly one ParamGrad, after all nodes its gradient needs.
// The optimizer pass runs next; it turns ParamGrad into updates.
//
//===----------------------------------------------------------------------===//
#include "compiler/Protocol.h"
#include "compiler/UpdateAnalysis.h"
#include "compiler/Verifier.h"
#include "passes/GradientRules.h"
#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

using namespace headroom;

namespace {

class Autodiff : public Pass {
public:
  llvm::StringRef name() const override { return "autodiff"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  llvm::Error differentiate(Function &f);
};

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "autodiff: " + msg.str());
}

bool isDifferentiable(const Value *v) { return isFloat(v->type().dtype()); }

/// Training-mode Dropout needs its mask for the backward pass; give it the
/// mask result when the model did not ask for it.
void addDropoutMasks(Function &f) {
  for (auto it = f.nodes().begin(); it != f.nodes().end();) {
    Node &n = *it++;
    if (!n.is(OpKind::Dropout) || n.numResults() > 1)
      continue;
    llvm::SmallVector<Value *, 3> operands(n.operands().begin(),
                                           n.operands().end());
    TensorType maskType = n.result(0)->type().withDType(DType::Bool);
    Node *with =
        f.createNode("Dropout", operands, {n.result(0)->type(), maskType},
                     n.attrs(), nullptr, &n);
    with->setLoc(n.loc());
    with->result(0)->setName(n.result(0)->name());
    n.result(0)->replaceAllUsesWith(with->result(0));
    n.erase();
  }
}

} // namespace

llvm::Error Autodiff::differentiate(Function &f) {
  if (f.returnValues().empty())
    return fail("@" + f.name() + " returns nothing; it must return the loss");
  Value *loss = f.loss();
  if (!isFloat(loss->type().dtype()) || loss->type().numElements() != 1)
    return fail("the loss must be a scalar float, @" + f.name() + " returns " +
                loss->type().str());
  addDropoutMasks(f);

  // Forward: which values depend on a trainable parameter.
  llvm::DenseSet<const Value *> requiresGrad;
  for (Node &n : f.nodes()) {
    bool fromParam =
        n.is(OpKind::Read) && n.state()->kind() == StateKind::Param;
    for (Value *v : n.operands())
      fromParam |= v && requiresGrad.count(v);
    if (!fromParam)
      continue;
    for (Value *r : n.results())
      if (isDifferentiable(r))
        requiresGrad.insert(r);
  }
  if (!requiresGrad.count(loss))
    return fail("the loss does not depend on any trainable parameter");

  // Backward, in reverse order, from dloss = 1.
  Node *ret = f.returnNode();
  Builder b(f, ret);
  if (loss->definingNode())
    b.setLoc(loss->definingNode()->loc());
  llvm::DenseMap<const Value *, Value *> grads;
  // The seed, marked: loss scaling (the optimizer's loss_scale) replaces it.
  grads[loss] = b.constant(
      Tensor::fromDoubles(loss->type().dtype(), loss->type().shape(), {1.0}));
  markLossSeed(*grads[loss]->definingNode());
  auto accumulate = [&](Value *v, Value *g) {
    auto [it, inserted] = grads.try_emplace(v, g);
    if (!inserted)
      it->second = b.apply("Add", {it->second, g});
  };
  llvm::SmallVector<Node *, 64> forward;
  for (Node &n : f.nodes())
    if (&n != ret)
      forward.push_back(&n);
  llvm::MapVector<StateSlot *, Value *> paramGrads;
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    Node &n = **it;
    llvm::SmallVector<Value *, 2> dOut;
    bool any = false;
    for (Value *r : n.results()) {
      Value *g = grads.lookup(r);
      dOut.push_back(g);
      any |= g != nullptr;
    }
    if (!any)
      continue;
    // The backward of a node is from where the node is from.
    b.setLoc(n.loc());
    if (n.is(OpKind::Read)) {
      if (n.state()->kind() == StateKind::Param) {
        auto [pit, inserted] = paramGrads.insert({n.state(), dOut[0]});
        if (!inserted)
          pit->second = b.apply("Add", {pit->second, dOut[0]});
      }
      continue;
    }
    llvm::SmallVector<bool, 4> needs;
    bool anyNeeds = false;
    for (Value *v : n.operands()) {
      needs.push_back(v && requiresGrad.count(v));
      anyNeeds |= needs.back();
    }
    if (!anyNeeds)
      continue;
    GradRule rule = lookupGradRule(n.kind());
    if (!rule)
      return fail(describeNode(n) + ": no gradient rule for op '" + n.op() +
                  "' (docs/autodiff.md lists the ops that have one)");
    GradContext ctx(b, n, dOut, needs);
    if (auto e = rule(ctx))
      return e;
    for (unsigned i = 0; i < n.numOperands(); ++i) {
      if (!needs[i] || !ctx.DIn[i])
        continue;
      assert(ctx.DIn[i]->type() == n.operand(i)->type() &&
             "gradient rule produced a gradient of the wrong type");
      accumulate(n.operand(i), ctx.DIn[i]);
    }
  }
  b.setLoc("");
  for (auto &kv : paramGrads) {
    tagGradient(kv.second, kv.first);
    b.create("ParamGrad", {kv.second}, {}, {}, kv.first);
  }
  return llvm::Error::success();
}

llvm::Expected<bool> Autodiff::run(Module &m) {
  auto forward = forwardOf(m, "autodiff");
  if (!forward)
    return forward.takeError();
  Function &f = **forward;
  // Fixed random streams, so that copies of the step made by later passes
  // (accumulation's micro-steps, LOMO's norm pass) draw the same masks.
  stampRandomStreams(f);
  if (auto e = differentiate(f))
    return e;
  f.setName("step");
  return true;
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createAutodiffPass(llvm::StringRef options) {
  if (auto e = checkNoOptions("autodiff", options))
    return e;
  return std::make_unique<Autodiff>();
}
