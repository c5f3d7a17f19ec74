//===- Canonicalize.cpp - Fold constants, drop no-ops, delete dead code ---===//
//
// Brings imported or hand-written IR to the form later passes expect:
//  * nodes whose operands are all constants are evaluated at compile time
//    (compiler/ConstantFolding.h: shape arithmetic, casts, small tensors);
//    Shape and Size of any value fold, since every shape is static;
//  * Identity, and Dropout in inference mode (training_mode absent or false,
//    or ratio 0) with an unused mask, forward their input;
//  * equal Constants are merged into the first of them;
//  * nodes without side effects whose results are unused are deleted, and so
//    are frozen state slots nothing reads any more.
// Requires: verified IR. Guarantees: no Identity; no node with all-constant
// operands that the folder can evaluate. Run it first and again after passes
// that create foldable patterns.
//
//===----------------------------------------------------------------------===//
#include "compiler/ConstantFolding.h"
#include "compiler/Verifier.h"
#include "passes/Passes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <map>

using namespace headroom;

namespace {

class Canonicalize : public Pass {
public:
  llvm::StringRef name() const override { return "canonicalize"; }
  llvm::Expected<bool> run(Module &m) override;

private:
  llvm::Expected<bool> foldNode(Node &n);
  static bool mergeConstants(Function &f);
  static bool deleteDeadNodes(Function &f);
};

const Tensor *constantValue(Value *v) {
  if (!v || v->isArgument() || !v->definingNode()->is(OpKind::Constant))
    return nullptr;
  return &v->definingNode()->attr("value")->asTensor();
}

/// Inference-mode Dropout is the identity on its first result.
bool isInferenceDropout(const Node &n) {
  if (!n.is(OpKind::Dropout) || (n.numResults() > 1 && n.result(1)->hasUses()))
    return false;
  if (n.numOperands() > 1) {
    const Tensor *ratio = constantValue(n.operand(1));
    if (ratio && ratio->numElements() == 1 && ratio->getDouble(0) == 0.0)
      return true;
  }
  if (n.numOperands() < 3 || !n.operand(2))
    return true; // training_mode defaults to false
  const Tensor *mode = constantValue(n.operand(2));
  return mode && mode->numElements() == 1 && mode->getInt(0) == 0;
}

} // namespace

/// Replaces `v` with a Constant holding `t`, inserted before `at`.
static void replaceWithConstant(Value *v, Tensor t, Node &at) {
  Value *c = Builder(*at.parent(), &at).constant(std::move(t));
  c->setName(v->name());
  v->replaceAllUsesWith(c);
}

llvm::Expected<bool> Canonicalize::foldNode(Node &n) {
  if (n.is(OpKind::Identity) || isInferenceDropout(n)) {
    n.result(0)->replaceAllUsesWith(n.operand(0));
    return true;
  }
  if (n.is(OpKind::Constant) || n.info()->hasSideEffects() ||
      n.is(OpKind::Read))
    return false;
  if (auto t = foldTypeOp(n.op(), n.attrs(), n.operand(0)->type())) {
    if (!n.result(0)->hasUses())
      return false;
    replaceWithConstant(n.result(0), std::move(*t), n);
    return true;
  }
  llvm::SmallVector<const Tensor *, 4> operands;
  for (Value *v : n.operands()) {
    const Tensor *t = constantValue(v);
    if (v && !t)
      return false;
    operands.push_back(t);
  }
  bool used = llvm::any_of(n.results(), [](Value *r) { return r->hasUses(); });
  if (!used || !isFoldableOp(n.op()))
    return false;
  auto folded = foldConstantOp(n.op(), n.attrs(), operands);
  if (!folded)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(), "in @%s, %s: cannot fold: %s",
        n.parent()->name().c_str(), describeNode(n).c_str(),
        llvm::toString(folded.takeError()).c_str());
  if (!*folded)
    return false;
  for (unsigned i = 0; i < n.numResults(); ++i) {
    Tensor &t = (**folded)[i];
    if (t.type() != n.result(i)->type())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "in @%s, %s: folds to %s but its result is declared %s",
          n.parent()->name().c_str(), describeNode(n).c_str(),
          t.type().str().c_str(), n.result(i)->type().str().c_str());
    replaceWithConstant(n.result(i), std::move(t), n);
  }
  return true;
}

bool Canonicalize::mergeConstants(Function &f) {
  std::map<std::pair<std::string, std::vector<uint8_t>>, Value *> seen;
  bool changed = false;
  for (Node &n : f.nodes()) {
    if (!n.is(OpKind::Constant))
      continue;
    const Tensor &t = n.attr("value")->asTensor();
    auto [it, inserted] =
        seen.try_emplace({t.type().str(), t.bytes()}, n.result(0));
    if (inserted || !n.result(0)->hasUses())
      continue;
    n.result(0)->replaceAllUsesWith(it->second);
    changed = true;
  }
  return changed;
}

bool Canonicalize::deleteDeadNodes(Function &f) {
  bool changed = false;
  // Walking backwards frees a node's producers before they are visited.
  for (auto it = f.nodes().rbegin(); it != f.nodes().rend();) {
    Node &n = *it++;
    if (n.info()->hasSideEffects() ||
        llvm::any_of(n.results(), [](Value *r) { return r->hasUses(); }))
      continue;
    n.erase();
    changed = true;
  }
  return changed;
}

llvm::Expected<bool> Canonicalize::run(Module &m) {
  bool changed = false;
  for (const auto &f : m.functions()) {
    for (auto it = f->nodes().begin(); it != f->nodes().end();) {
      Node &n = *it++;
      auto folded = foldNode(n);
      if (!folded)
        return folded.takeError();
      changed |= *folded;
    }
    changed |= mergeConstants(*f);
    changed |= deleteDeadNodes(*f);
  }
  llvm::SmallPtrSet<const StateSlot *, 32> used;
  for (const auto &f : m.functions())
    for (const Node &n : f->nodes())
      used.insert(n.states().begin(), n.states().end());
  llvm::SmallVector<StateSlot *, 4> unused;
  for (const auto &s : m.states())
    if (s->kind() == StateKind::Frozen && !used.count(s.get()))
      unused.push_back(s.get());
  for (StateSlot *s : unused)
    m.eraseState(s);
  return changed || !unused.empty();
}

llvm::Expected<std::unique_ptr<Pass>>
headroom::createCanonicalizePass(llvm::StringRef options) {
  if (auto e = checkNoOptions("canonicalize", options))
    return e;
  return std::make_unique<Canonicalize>();
}
