//===- Canonicalize.cpp - Fold constants, drop no-ops, delete dead code ---===//
//
// Brings imported or hand-written IR to the form later passes expect:
//  * nodes whose operands are all constants are evaluated at compile time
//    (compiler/ConstantFolding.h: shape arithmetic, casts, small tensors);
//    Shape and Size of any value fold, since every shape is static;
//  * Identity, and Dropout in inference mode (training_mode absent or false,
//    or ratio 0) with an unused mask, forward their input;
//  * equal Constants are merged into the first of them;
//  * a Transpose that swaps the last two axes and feeds only MatMuls is
//    folded into them (their transA/transB): the GEMM reads the operand as
//    it lies instead of a transposed copy (attention's K^T, a tied LM
//    head's embedding^T); one of a MatMul's result used nowhere else
//    becomes the product the other way round, (A B)^T = B^T A^T (the
//    gradient of K^T);
//  * nodes without side effects whose results are unused are deleted, and so
//    are frozen state slots nothing reads any more.
// Requires: verified IR. Guarantees: no Identity; no node with all-constant
// operands that the folder can evaluate. Run it first and again after passes
// that create foldable patterns.
//
//===----------------------------------------------------------------------===//
#include "compiler/ConstantFolding.h"
#include "compiler/Protocol.h"
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

/// Whether Transpose node `t` swaps the last two axes and keeps the others.
static bool swapsLastTwo(const Node &t) {
  unsigned rank = t.operand(0)->type().rank();
  if (rank < 2)
    return false;
  std::vector<int64_t> perm;
  if (const Attribute *a = t.attr("perm"))
    perm = a->asInts();
  else // ONNX's default reverses the axes
    for (unsigned d = rank; d-- > 0;)
      perm.push_back(d);
  if (perm.size() != rank)
    return false;
  for (unsigned d = 0; d < rank; ++d) {
    unsigned want = d + 2 < rank ? d : (d + 2 == rank ? rank - 1 : rank - 2);
    if (perm[d] != want)
      return false;
  }
  return true;
}

/// Sets MatMul flag `name` to `on`; absent means 0.
static void setTransposeFlag(Node &matMul, llvm::StringRef name, bool on) {
  if (on)
    matMul.setAttr(name, Attribute::getInt(1));
  else
    matMul.removeAttr(name);
}

/// Folds Transpose `t` into the MatMuls that are its only users, or into
/// the MatMul it transposes.
static bool foldTransposeIntoMatMuls(Node &t) {
  Value *y = t.result(0);
  if (!swapsLastTwo(t) || !y->hasUses())
    return false;
  Node *def = t.operand(0)->definingNode();
  if (def && def->is(OpKind::MatMul) && t.operand(0)->users().size() == 1 &&
      !hasGradientTag(*def) && def->operand(0)->type().rank() >= 2 &&
      def->operand(1)->type().rank() >= 2) {
    // (op(A) op(B))^T = op(B)^T op(A)^T: the same node, operands swapped.
    bool ta = def->intAttr("transA", 0), tb = def->intAttr("transB", 0);
    Value *a = def->operand(0), *b = def->operand(1);
    def->setOperand(0, b);
    def->setOperand(1, a);
    setTransposeFlag(*def, "transA", !tb);
    setTransposeFlag(*def, "transB", !ta);
    def->result(0)->setType(y->type());
    copyGradientTags(t, *def); // the gradient is the product
    y->replaceAllUsesWith(def->result(0));
    return true;
  }
  if (llvm::any_of(y->users(),
                   [](const Node *u) { return !u->is(OpKind::MatMul); }))
    return false;
  llvm::SmallVector<Node *, 4> users(y->users().begin(), y->users().end());
  for (Node *u : users)
    for (unsigned i = 0; i < 2; ++i) {
      if (u->operand(i) != y)
        continue;
      const char *flag = i == 0 ? "transA" : "transB";
      u->setOperand(i, t.operand(0));
      setTransposeFlag(*u, flag, !u->intAttr(flag, 0));
    }
  return true;
}

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
  if (n.is(OpKind::Transpose) && !constantValue(n.operand(0)))
    return foldTransposeIntoMatMuls(n);
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
