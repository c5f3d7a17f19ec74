//===- Optimizer.h - Optimizer options ------------------------------------===//
#ifndef HEADROOM_PASSES_OPTIMIZER_H
#define HEADROOM_PASSES_OPTIMIZER_H

#include "compiler/Pass.h"

#include "llvm/ADT/Optional.h"

#include <memory>

namespace headroom {

/// Hyperparameters, with PyTorch's meaning and defaults where it has them.
struct OptimizerOptions {
  enum class Kind { Sgd, Momentum, AdamW, Lomo, AdaLomo };
  Kind Kind = Kind::Sgd;
  double Lr = 0.01;
  double Momentum = 0.9; // momentum
  bool Nesterov = false; // momentum
  double WeightDecay =
      0.0; // sgd, momentum: L2 in the gradient; adamw: decoupled
  double Beta1 = 0.9, Beta2 = 0.999, Eps = 1e-8; // adamw
  // adalomo (Lv et al. 2023; the authors' defaults): eps1 regularizes the
  // squared gradient, eps2 floors the relative step size, updates are scaled
  // down to RMS <= clip_threshold, beta2_t = 1 - t^decay_rate.
  double Eps1 = 1e-30, Eps2 = 1e-3, ClipThreshold = 1.0, DecayRate = -0.8;
  /// Clip the global L2 norm of all gradients to this (0: no clipping), as
  /// torch.nn.utils.clip_grad_norm_; the step then also returns the norm.
  /// lomo and adalomo need the norm before their first update: without
  /// accumulators holding the gradients, a norm-only pass over the batch
  /// (@grad_norm) runs first, so the step costs two forward + backward passes.
  double ClipGradNorm = 0.0;
  /// Dynamic loss scaling (fp16), torch.cuda.amp.GradScaler's rule: the
  /// backward is seeded with scale = 2^(16 + offset) (state
  /// `loss_scale.log2_offset`, starting at 0); gradients are unscaled in
  /// the coefficient the update applies; a step whose gradients are not all
  /// finite changes no parameter or moment and halves the scale; 2000
  /// finite steps in a row double it (`loss_scale.good_steps`). With lomo
  /// and adalomo the check runs before any update: in the norm pass, or on
  /// the accumulators in the last micro-step.
  bool LossScale = false;
  /// A step whose loss or gradients are not all finite changes no state
  /// (`--on-nan skip`): the same check and write-back as loss scaling's.
  bool SkipNonFinite = false;
  /// sgd, momentum and adamw fused into the backward as lomo is
  /// (`--fuse-update`): each update runs as soon as its gradient is complete
  /// (always scheduled), and what needs every gradient first -- clipping's
  /// norm, the loss scale's overflow check -- comes from a norm-only pass
  /// before the first update, so no gradient outlives its update.
  bool FuseUpdate = false;
  /// adamw's moments stored as bitsandbytes' block-wise 8-bit optimizers
  /// store them (`--optimizer-state int8`): u8 codes of its dynamic maps and
  /// an f32 absmax per 256 elements (compiler/StateQuantization.h), for
  /// parameters of at least Int8MinElements; smaller ones keep full moments.
  /// An approximation of AdamW, as bitsandbytes' AdamW8bit is.
  bool Int8State = false;
  /// With Int8State: the fewest elements a parameter's moments are quantized
  /// at (bitsandbytes' min_8bit_size).
  int64_t Int8MinElements = 4096;

  /// Updates fused into the backward, one parameter at a time (lomo,
  /// adalomo, or FuseUpdate): no gradient outlives its update.
  bool fused() const;
  /// Whether it keeps state beside the weights (momentum, adamw, adalomo):
  /// what `--offload optimizer` moves.
  bool keepsState() const;
  /// Whether a parameter of `elements` gets 8-bit moments (adamw with
  /// Int8State, at least Int8MinElements).
  bool int8Moments(int64_t elements) const;
  /// The option value of `kind` (sgd, momentum, adamw, lomo, adalomo).
  llvm::StringRef kindName() const;
};

std::unique_ptr<Pass> createOptimizerPass(const OptimizerOptions &options);

/// Parses "kind=adamw lr=1e-3 ..." (the pipeline syntax) into options.
llvm::Expected<OptimizerOptions> parseOptimizerOptions(llvm::StringRef text);
/// The options as that syntax, every value the kind uses written so that
/// it reads back exactly: parseOptimizerOptions(optimizerOptionsText(o))
/// gives `o` again (for the fields its kind uses).
std::string optimizerOptionsText(const OptimizerOptions &o);
/// The kind called `name` (sgd, momentum, adamw, lomo, adalomo).
llvm::Optional<enum OptimizerOptions::Kind>
parseOptimizerKind(llvm::StringRef name);

} // namespace headroom

#endif // HEADROOM_PASSES_OPTIMIZER_H
