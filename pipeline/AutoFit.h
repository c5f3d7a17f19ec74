//===- AutoFit.h - The cheapest mix of techniques that fits a budget ------===//
//
// `--memory-budget SIZE` without technique flags: compile candidate steps
// with the real pipeline and keep the cheapest whose planned peak fits.
// Cheapest is ranked by what a technique costs the user: first the exact
// techniques (schedule, recomputation, accumulation: the same weights),
// then lower precision (bf16 with f32 master weights, then without), then
// another optimizer (only those --allow-optimizer names); within a rank, the
// fewest recomputed FLOPs, then the fewest micro-steps. The search is pruned
// by lower bounds: a precision/optimizer whose state alone exceeds the
// budget is not compiled further, a micro-batch count whose leanest
// recomputation does not fit is skipped, and the block chain (keep the last
// k blocks whole) is searched by bisection.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_PIPELINE_AUTOFIT_H
#define HEADROOM_PIPELINE_AUTOFIT_H

#include "pipeline/Compile.h"

namespace headroom {

struct FitCandidate {
  /// How a person would write it: "bf16, master fp32, lomo, --accum 2,
  /// --recompute every=1".
  std::string Label;
  CompileOptions Options;
  /// 0 exact; 1 bf16; 2 bf16 without master weights; 3 that with adamw's
  /// moments in 8 bits (an approximation); 4, 5, 6: 0-2 with another
  /// optimizer; 7: LoRA adapters instead of every weight (--allow lora).
  int Rank = 0;
  uint64_t PeakBytes = 0, RecomputeFlops = 0, StepFlops = 0;
  /// What the candidate costs over its setting's plain step: recomputed
  /// FLOPs, plus --fuse-update's norm pass (a forward and backward) when it
  /// has one.
  uint64_t ExtraFlops = 0;
  /// The estimated step time (cuda plans, compiler/Cost.h: compute at the
  /// nominal rate plus exposed transfers) and the pinned host pool.
  double StepSeconds = 0;
  uint64_t HostPeakBytes = 0;
  /// The state with its padding (weights, optimizer state, accumulators):
  /// what more micro-batches do not shrink.
  uint64_t StateBytes = 0;
  bool Fits = false;
};

struct FitResult {
  /// Every candidate compiled, best first (fitting ones by cost).
  std::vector<FitCandidate> Tried;
  /// The winner's compile (Tried.front() when it fits).
  Compiled Best;
  /// Why it won, in a sentence.
  std::string Why;
};

/// Searches for `options.MemoryBudget`. An impossible budget is an error
/// naming the smallest peak reached and with which flags.
llvm::Expected<FitResult> autoFit(llvm::StringRef modelPath,
                                  const CompileOptions &options);

} // namespace headroom

#endif // HEADROOM_PIPELINE_AUTOFIT_H
