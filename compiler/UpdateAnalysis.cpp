//===- UpdateAnalysis.cpp - Which nodes serve state updates ---------------===//
#include "compiler/UpdateAnalysis.h"

#include "llvm/ADT/STLExtras.h"

#include <vector>

using namespace headroom;

UpdateAnalysis::UpdateAnalysis(const Function &f) {
  std::vector<const Node *> nodes;
  for (const Node &n : f.nodes())
    if (!n.info()->has(opflags::Terminator))
      nodes.push_back(&n);
  // Backwards: users come after their operands' definitions.
  for (size_t k = nodes.size(); k-- > 0;) {
    const Node &n = *nodes[k];
    // The function may also return what serves updates (the gradient norm
    // of clipping), so `return` neither makes nor breaks serving.
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
    if (n.info()->has(opflags::WritesState) &&
        !llvm::is_contained(WrittenTypes, n.state()->type()))
      WrittenTypes.push_back(n.state()->type());
  }
  // Forwards: an update's operands are defined before it.
  for (const Node *n : nodes) {
    if (!Serving.count(n))
      continue;
    // Integer constants are shape operands (a ReduceSum's axes), which do
    // not make the backward node using them an update.
    bool own = n->info()->has(opflags::WritesState) || n->op() == "Read" ||
               (n->op() == "Constant" && isFloat(n->result(0)->type().dtype()));
    for (Value *v : n->operands())
      own |= v && v->definingNode() && Updates.count(v->definingNode());
    if (own)
      Updates.insert(n);
  }
}

bool UpdateAnalysis::isGradient(const Value *v) const {
  const Node *def = v->definingNode();
  if (!def || !Serving.count(def) ||
      !llvm::is_contained(WrittenTypes, v->type()))
    return false;
  if (Updates.count(def))
    return true;
  for (const Node *user : v->users())
    if (Updates.count(user))
      return true;
  return false;
}
