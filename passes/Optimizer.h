//===- Optimizer.h - Optimizer options ------------------------------------===//
#ifndef HEADROOM_PASSES_OPTIMIZER_H
#define HEADROOM_PASSES_OPTIMIZER_H

#include "compiler/Pass.h"

#include <memory>

namespace headroom {

/// Hyperparameters, with PyTorch's meaning and defaults where it has them.
struct OptimizerOptions {
  enum class Kind { Sgd, Momentum, AdamW };
  Kind Kind = Kind::Sgd;
  double Lr = 0.01;
  double Momentum = 0.9; // momentum
  bool Nesterov = false; // momentum
  double WeightDecay =
      0.0; // sgd, momentum: L2 in the gradient; adamw: decoupled
  double Beta1 = 0.9, Beta2 = 0.999, Eps = 1e-8; // adamw
  /// Clip the global L2 norm of all gradients to this (0: no clipping), as
  /// torch.nn.utils.clip_grad_norm_; the step then also returns the norm.
  double ClipGradNorm = 0.0;
};

std::unique_ptr<Pass> createOptimizerPass(const OptimizerOptions &options);

/// Parses "kind=adamw lr=1e-3 ..." (the pipeline syntax) into options.
llvm::Expected<OptimizerOptions> parseOptimizerOptions(llvm::StringRef text);

} // namespace headroom

#endif // HEADROOM_PASSES_OPTIMIZER_H
