//===- UpdateAnalysis.h - Which nodes serve state updates ------*- C++ -*-===//
//
// Two sets of nodes of a function:
//   serving  nodes that write state, or whose results are used by serving
//            nodes and otherwise only returned: the whole backward of a
//            training step (it exists
//            for the updates), the optimizer's arithmetic, a gradient norm
//            that feeds only the updates;
//   updates  serving nodes that are the updates' own work: state writes,
//            Reads, float Constants, and serving nodes computing from
//            another update -- not the backward computation of the gradient
//            they consume.
// A parameter gradient is then a value with an update among its users (the
// weight gradient feeding `Mul(%g, %lr)`, `SgdUpdate`, `Accumulate`, or the
// norm's `Pow(%g, 2)`) and the type of a slot the function writes: backward
// nodes may also use float constants (GELU's 0.5), so the type tells the
// activation gradient they scale from the parameter's gradient. The
// `schedule` pass runs updates as soon as they are
// ready, so each gradient dies where it is complete; the memory report counts
// parameter gradients and update values as gradients.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_UPDATEANALYSIS_H
#define HEADROOM_COMPILER_UPDATEANALYSIS_H

#include "compiler/IR.h"

#include "llvm/ADT/DenseSet.h"

#include <vector>

namespace headroom {

struct UpdateAnalysis {
  llvm::DenseSet<const Node *> Serving, Updates;
  std::vector<TensorType> WrittenTypes; // of the slots the function writes

  explicit UpdateAnalysis(const Function &f);
  /// A parameter gradient or an update's own value.
  bool isGradient(const Value *v) const;
};

} // namespace headroom

#endif // HEADROOM_COMPILER_UPDATEANALYSIS_H
