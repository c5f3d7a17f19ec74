//===- UpdateAnalysis.h - Parameter gradients and their updates -*- C++ -*-===//
//
// Which values of a training step are parameter gradients, and which nodes
// are the work of updating parameters from them:
//   gradients   values tagged `grad_of` (autodiff tags each parameter's
//               complete gradient: the attribute lists, per result of the
//               defining node, the parameter it is the gradient of, "" for
//               none), the gradient operands of ParamGrad, the optimizer
//               updates and Accumulate, and Reads of accumulators (state of
//               kind grad);
//   serving     nodes that write state, or whose results are used by serving
//               nodes and otherwise only returned: the whole backward exists
//               for the updates;
//   updates     serving nodes computed from a gradient (or from another
//               update), and state writes: sgd's `Mul(%g, %lr)`, `SgdUpdate`,
//               the norm's `Pow(%g, 2)`, AdamW's moment arithmetic once it
//               meets the gradient;
//   precompute  serving nodes computed from state and constants only (AdamW's
//               `exp_avg * beta1`, AdaLomo's RMS of the weight, step counts).
// Each precompute node also gets the gradient its updates combine it with
// when that is one gradient (`NeededGradient`): `schedule` runs it when that
// gradient is complete instead of during the forward, where it would hold
// a parameter-sized value for the whole step. Shared precompute (step
// counts, bias corrections; everything when one clip coefficient scales all
// updates) runs at once only when it is a scalar.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_UPDATEANALYSIS_H
#define HEADROOM_COMPILER_UPDATEANALYSIS_H

#include "compiler/IR.h"
#include "compiler/Protocol.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace headroom {

struct UpdateAnalysis {
  llvm::DenseSet<const Value *> Gradients;
  llvm::DenseSet<const Node *> Serving, Updates, Precompute;
  /// For precompute nodes used by the updates of one gradient: that
  /// gradient. The others are Shared: used with several gradients (a step
  /// count, or anything the clip coefficient scales).
  llvm::DenseMap<const Node *, const Value *> NeededGradient;
  llvm::DenseSet<const Node *> Shared;

  explicit UpdateAnalysis(const Function &f);
  /// A parameter gradient or the value of an update: what the memory report
  /// counts as gradients.
  bool isGradient(const Value *v) const;
};

} // namespace headroom

#endif // HEADROOM_COMPILER_UPDATEANALYSIS_H
