//===- UpdateAnalysis.cpp - Which nodes only serve state updates ----------===//
#include "compiler/UpdateAnalysis.h"

#include <vector>

using namespace headroom;

llvm::DenseSet<const Node *> headroom::nodesServingUpdates(const Function &f) {
  std::vector<const Node *> nodes;
  for (const Node &n : f.nodes())
    nodes.push_back(&n);
  // Backwards: users come after their operands' definitions.
  llvm::DenseSet<const Node *> serving;
  for (size_t k = nodes.size(); k-- > 0;) {
    const Node &n = *nodes[k];
    if (n.info()->has(opflags::Terminator))
      continue;
    bool used = false, all = true;
    for (Value *r : n.results())
      for (Node *user : r->users()) {
        used = true;
        all &= serving.count(user) > 0;
      }
    if (n.info()->has(opflags::WritesState) || (used && all))
      serving.insert(&n);
  }
  return serving;
}
