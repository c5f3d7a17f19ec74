//===- UpdateAnalysis.h - Which nodes only serve state updates -*- C++ -*-===//
//
// A node serves updates when it writes state, or when it has results and
// every use of them is by a node that serves updates: the parameter
// gradients (the weight-gradient MatMul whose only user is the update), the
// optimizer's arithmetic, a gradient norm that feeds only the clipped
// updates. The `schedule` pass runs these nodes as soon as they are ready,
// and the memory report counts their values as gradients.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_UPDATEANALYSIS_H
#define HEADROOM_COMPILER_UPDATEANALYSIS_H

#include "compiler/IR.h"

#include "llvm/ADT/DenseSet.h"

namespace headroom {

/// The nodes of `f` that serve updates (never its `return`).
llvm::DenseSet<const Node *> nodesServingUpdates(const Function &f);

} // namespace headroom

#endif // HEADROOM_COMPILER_UPDATEANALYSIS_H
