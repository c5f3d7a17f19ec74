//===- UpdateAnalysis.cpp - Parameter gradients and their updates ---------===//
#include "compiler/UpdateAnalysis.h"

#include "llvm/ADT/STLExtras.h"

#include <vector>

using namespace headroom;

namespace {
/// "No gradient", "one gradient" or "several": a tiny lattice.
const Value *const kSeveral = reinterpret_cast<const Value *>(uintptr_t(1));
const Value *merge(const Value *a, const Value *b) {
  if (!a)
    return b;
  if (!b || a == b)
    return a;
  return kSeveral;
}
} // namespace

UpdateAnalysis::UpdateAnalysis(const Function &f) {
  std::vector<const Node *> nodes;
  for (const Node &n : f.nodes())
    if (!n.info()->has(opflags::Terminator))
      nodes.push_back(&n);
  for (const Node *n : nodes) {
    for (Value *g : taggedGradients(*n))
      Gradients.insert(g);
    if (n->is(OpKind::ParamGrad) || n->is(OpKind::SgdUpdate) ||
        n->is(OpKind::MomentumUpdate) || n->is(OpKind::AdamWUpdate) ||
        n->is(OpKind::AdamW8bitUpdate) || n->is(OpKind::Accumulate))
      Gradients.insert(n->operand(0));
    // The sum in an accumulator is the gradient the last micro-step updates
    // from.
    if (n->is(OpKind::Read) && n->state()->kind() == StateKind::Gradient)
      Gradients.insert(n->result(0));
  }
  // Backwards: users come after their operands' definitions. The function
  // may also return what serves updates (the gradient norm of clipping), so
  // `return` neither makes nor breaks serving.
  for (size_t k = nodes.size(); k-- > 0;) {
    const Node &n = *nodes[k];
    bool serves = false, all = true;
    for (Value *r : n.results())
      for (Node *user : r->users()) {
        if (user->info()->has(opflags::Terminator))
          continue;
        bool s = Serving.count(user) > 0;
        serves |= s;
        all &= s;
      }
    if (n.info()->has(opflags::WritesState) || (serves && all))
      Serving.insert(&n);
  }
  // Forwards: updates meet a gradient; precompute meets none and reads only
  // state, constants and other precompute. `from` is the gradient an update
  // is computed from (kSeveral when more than one).
  llvm::DenseMap<const Node *, const Value *> from;
  for (const Node *n : nodes) {
    if (!Serving.count(n) || n->is(OpKind::Read) || n->is(OpKind::Constant))
      continue;
    const Value *g = nullptr;
    bool update = false, stateOnly = true;
    for (Value *v : n->operands()) {
      if (!v)
        continue;
      const Node *def = v->definingNode();
      if (Gradients.count(v)) {
        update = true;
        g = merge(g, v);
      } else if (def && Updates.count(def)) {
        update = true;
        g = merge(g, from.lookup(def));
      }
      stateOnly &= def && (def->is(OpKind::Read) || def->is(OpKind::Constant) ||
                           Precompute.count(def));
    }
    if (update || n->info()->has(opflags::WritesState)) {
      Updates.insert(n);
      from[n] = g;
    } else if (stateOnly) {
      Precompute.insert(n);
    }
  }
  // Backwards again: precompute stays precompute when all its users are
  // updates or precompute (a backward Transpose of a weight reads only
  // state, but it is not update work), and gets the gradient its users
  // combine it with.
  llvm::DenseMap<const Node *, const Value *> needed;
  for (size_t k = nodes.size(); k-- > 0;) {
    const Node *n = nodes[k];
    if (!Precompute.count(n))
      continue;
    const Value *g = nullptr;
    bool onlyUpdates = true;
    for (Value *r : n->results())
      for (const Node *user : r->users()) {
        if (user->info()->has(opflags::Terminator))
          continue;
        if (Updates.count(user))
          // An update from no gradient (a step counter's write) is shared:
          // no single gradient to wait for.
          g = merge(g, from.lookup(user) ? from.lookup(user) : kSeveral);
        else if (Precompute.count(user))
          g = merge(g, needed.lookup(user));
        else
          onlyUpdates = false;
      }
    if (!onlyUpdates) {
      Precompute.erase(n);
      continue;
    }
    needed[n] = g;
    if (g && g != kSeveral)
      NeededGradient[n] = g;
    else
      Shared.insert(n);
  }
}

bool UpdateAnalysis::isGradient(const Value *v) const {
  if (Gradients.count(v))
    return true;
  const Node *def = v->definingNode();
  return def && Updates.count(def);
}
