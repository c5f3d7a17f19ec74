//===- RecomputeSearch.cpp - The recomputation candidates, and their search
//===//
#include "pipeline/RecomputeSearch.h"

#include "compiler/IR.h"

using namespace headroom;
using Policy = RecomputeOptions::Policy;

static RecomputeChoice choice(Policy kind, unsigned n, std::string label,
                              std::vector<unsigned> keepBlocks = {}) {
  RecomputeChoice c;
  c.Options.Kind = kind;
  c.Options.N = n;
  c.Options.KeepBlocks = std::move(keepBlocks);
  c.Label = std::move(label);
  return c;
}

RecomputeSpace RecomputeSpace::of(const Module &built) {
  return RecomputeSpace(
      built.functions().empty()
          ? 0
          : analyzeForwardChain(*built.functions().front()).NumBlocks);
}

RecomputeChoice RecomputeSpace::none() const {
  return choice(Policy::None, 1, "none");
}
RecomputeChoice RecomputeSpace::selective() const {
  return choice(Policy::Selective, 1, "selective");
}
RecomputeChoice RecomputeSpace::every(unsigned n) const {
  return choice(Policy::Every, n, "every=" + std::to_string(n));
}
RecomputeChoice RecomputeSpace::sqrt() const {
  return choice(Policy::Sqrt, 1, "sqrt");
}
RecomputeChoice RecomputeSpace::allCuts() const {
  return choice(Policy::All, 1, "all");
}

RecomputeChoice RecomputeSpace::chain(unsigned k) const {
  std::vector<unsigned> keep;
  for (unsigned b = Blocks - k; b < Blocks; ++b)
    keep.push_back(b);
  return choice(Policy::Every, 1,
                "every=1, keeping the last " + std::to_string(k) + " of " +
                    std::to_string(Blocks) + " blocks",
                std::move(keep));
}

std::vector<RecomputeChoice> RecomputeSpace::all() const {
  std::vector<RecomputeChoice> out = {none(), selective()};
  // The block chain: the last k blocks kept whole (the backward frees them
  // first), the others recomputed from their inputs.
  for (unsigned k = Blocks; k-- > 1;)
    out.push_back(chain(k));
  for (unsigned n = 1; n <= Blocks; n *= 2)
    out.push_back(every(n));
  out.push_back(sqrt());
  out.push_back(allCuts());
  return out;
}

llvm::Error RecomputeSpace::search(
    llvm::function_ref<llvm::Expected<bool>(const RecomputeChoice &)> tryChoice,
    bool withNone) const {
  if (withNone) {
    auto fits = tryChoice(none());
    if (!fits || *fits)
      return fits.takeError();
  }
  // The leanest policies first: when none of them fits, nothing does.
  bool any = false;
  for (const RecomputeChoice &c : {every(1), allCuts(), sqrt()}) {
    auto fits = tryChoice(c);
    if (!fits)
      return fits.takeError();
    any |= *fits;
  }
  if (!any) {
    // Longer segments keep fewer block outputs (llama-7B's every=2 peaks
    // below sqrt): the last resort, since each keeps more than every=1 of
    // the blocks it recomputes and no chain keeps less than every=1.
    for (unsigned n = 2; n <= Blocks; n *= 2) {
      auto fits = tryChoice(every(n));
      if (!fits || *fits)
        return fits.takeError();
    }
    return llvm::Error::success();
  }
  if (auto fits = tryChoice(selective()); !fits)
    return fits.takeError();
  // The block chain: keeping more blocks whole costs fewer FLOPs and more
  // memory, so the most that still fits is found by bisection.
  unsigned lo = 1, hi = Blocks ? Blocks - 1 : 0;
  while (lo <= hi) {
    unsigned k = (lo + hi) / 2;
    auto fits = tryChoice(chain(k));
    if (!fits)
      return fits.takeError();
    if (*fits)
      lo = k + 1;
    else
      hi = k - 1;
  }
  return llvm::Error::success();
}
