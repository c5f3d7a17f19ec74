//===- Recompute.h - Activation recomputation: options and analysis -------===//
#ifndef HEADROOM_PASSES_RECOMPUTE_H
#define HEADROOM_PASSES_RECOMPUTE_H

#include "compiler/Pass.h"

#include <memory>
#include <string>
#include <vector>

namespace headroom {

/// Which forward values the backward reads are kept, the rest recomputed.
struct RecomputeOptions {
  enum class Policy {
    None,      // keep everything (the pass changes nothing)
    All,       // keep only the cut points: every value all data flows through
    Every,     // keep the output of every N-th repeated block
    Sqrt,      // keep every round(sqrt(k))-th of the k cut points
    Selective, // recompute attention score chains, keep matmul outputs
  };
  Policy Kind = Policy::None;
  unsigned N = 1; // Every
  /// Value names (their name hints) always kept: `--recompute-keep`.
  std::vector<std::string> Keep;
  /// Repeated blocks (by index) whose values are all kept, recomputing the
  /// others: what the budget search of pipeline/ varies.
  std::vector<unsigned> KeepBlocks;

  /// `policy=every n=2 keep=a;b keep_blocks=0;3`, what parse reads back.
  std::string text() const;
};

llvm::Expected<RecomputeOptions> parseRecomputeOptions(llvm::StringRef text);
std::unique_ptr<Pass> createRecomputePass(const RecomputeOptions &options);

/// The forward of a training step as recomputation sees it: the nodes up to
/// the loss, the repeated blocks their ONNX scopes name (`/h.3/attn/...` is
/// block 3 of `h`; without scopes, the graph's repeated layers between
/// residual cuts), and the cut points: values that all data flows through
/// (nothing else but side inputs -- data arguments, weights, values used by
/// several blocks such as RoPE tables and masks -- is live across them).
struct ForwardChain {
  /// Cut points in forward order, and the block each is defined in (-1:
  /// outside the repeated blocks).
  std::vector<const Value *> CutPoints;
  std::vector<int> CutBlock;
  /// Distinct repeated blocks (0 when the scopes name none).
  unsigned NumBlocks = 0;
};

ForwardChain analyzeForwardChain(const Function &f);

} // namespace headroom

#endif // HEADROOM_PASSES_RECOMPUTE_H
