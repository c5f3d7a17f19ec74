//===- RecomputeSearch.h - The recomputation candidates, and their search -===//
//
// One definition of which recomputation policies a search may pick, shared
// by `--recompute budget=SIZE`, `report --recompute sweep` and auto-fit
// (docs/recompute.md, docs/autofit.md). `all()` lists every candidate (the
// sweep compiles them all); `search()` visits the ones a budget search
// needs, using what it learns: when none of the leanest policies fits,
// nothing does; keeping more blocks whole costs more memory and fewer
// FLOPs, so the most blocks that fit are found by bisection.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_PIPELINE_RECOMPUTESEARCH_H
#define HEADROOM_PIPELINE_RECOMPUTESEARCH_H

#include "passes/Recompute.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace headroom {

class Module;

/// One recomputation policy a search tries, with how a person would name it.
struct RecomputeChoice {
  RecomputeOptions Options;
  std::string Label;
  /// Sets `o`'s policy to this one; the user's --recompute-keep stays.
  void applyTo(RecomputeOptions &o) const {
    o.Kind = Options.Kind;
    o.N = Options.N;
    o.KeepBlocks = Options.KeepBlocks;
  }
};

/// The candidates for a step whose forward has `blocks` repeated blocks.
class RecomputeSpace {
public:
  explicit RecomputeSpace(unsigned blocks) : Blocks(blocks) {}
  /// The repeated blocks of the step the base pipeline built (its first
  /// function's forward).
  static RecomputeSpace of(const Module &built);

  /// Every candidate: none, selective, the block chain (the last k blocks
  /// kept whole, k = blocks-1 .. 1), every=N (N = 1, 2, 4, ... <= blocks),
  /// sqrt, all.
  std::vector<RecomputeChoice> all() const;

  /// The candidates a budget search compiles, through `tryChoice` (which
  /// compiles one, keeps the best fitting one by its caller's order, and
  /// says whether it fit): none first when `withNone` (when it fits, nothing
  /// else is tried), then the leanest -- every=1, all, sqrt; when none of
  /// them fits, every=2, 4, ... until one does, and the search stops --
  /// then selective, then the block chain by bisection on k.
  llvm::Error
  search(llvm::function_ref<llvm::Expected<bool>(const RecomputeChoice &)>
             tryChoice,
         bool withNone) const;

  unsigned blocks() const { return Blocks; }

private:
  RecomputeChoice none() const;
  RecomputeChoice selective() const;
  RecomputeChoice every(unsigned n) const;
  RecomputeChoice sqrt() const;
  RecomputeChoice allCuts() const;
  /// every=1 with the last `k` blocks kept whole.
  RecomputeChoice chain(unsigned k) const;

  unsigned Blocks;
};

} // namespace headroom

#endif // HEADROOM_PIPELINE_RECOMPUTESEARCH_H
