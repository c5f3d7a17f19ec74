//===- UpdateAnalysis.cpp - Which nodes serve state updates ---------------===//
#include "compiler/UpdateAnalysis.h"

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
    bool used = false, all = true;
    for (Value *r : n.results())
      for (Node *user : r->users()) {
        used = true;
        all &= Serving.count(user) > 0;
      }
    if (n.info()->has(opflags::WritesState) || (used && all))
      Serving.insert(&n);
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
  if (!def || !Serving.count(def))
    return false;
  if (Updates.count(def))
    return true;
  for (const Node *user : v->users())
    if (Updates.count(user))
      return true;
  return false;
}
