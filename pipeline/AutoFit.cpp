//===- AutoFit.cpp - The cheapest mix of techniques that fits a budget ----===//
#include "pipeline/AutoFit.h"

#include "compiler/ByteSize.h"
#include "compiler/Cost.h"
#include "compiler/Protocol.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

using namespace headroom;

namespace {

using Kind = enum OptimizerOptions::Kind;
using Policy = RecomputeOptions::Policy;

/// One precision/optimizer setting the search tries, in rank order.
struct Setting {
  DType Precision;
  bool Master;
  Kind Optimizer;
  int Rank;
  bool Int8State = false;
  bool Lora = false;
  bool Nf4 = false;
};

/// What `--allow lora` trains: PEFT's usual adapter on every linear layer.
const char *const kAutoLora = "rank=8 alpha=16 dropout=0 targets=all-linear";

std::string settingLabel(const CompileOptions &o) {
  std::string s = o.Precision == DType::F32    ? "fp32"
                  : o.Precision == DType::BF16 ? "bf16"
                                               : "fp16";
  if (o.Precision != DType::F32)
    s += o.MasterWeights ? " (master fp32)" : " (no master weights)";
  s += ", " + o.Optimizer.kindName().str();
  if (o.Optimizer.Int8State)
    s += " (8-bit state)";
  if (o.Optimizer.FuseUpdate)
    s += ", --fuse-update";
  if (!o.Lora.empty())
    s += (o.BaseNf4 ? ", QLoRA (" : ", LoRA (") + o.Lora + ")";
  if (o.Accumulate > 1)
    s += ", --accum " + std::to_string(o.Accumulate);
  if (!o.Offload.empty())
    s += ", --offload " + o.Offload;
  return s;
}

class Search {
public:
  Search(llvm::StringRef model, const CompileOptions &base)
      : Model(model), Base(base) {}
  llvm::Expected<FitResult> run();

private:
  /// The precision/optimizer settings to try, in rank order.
  std::vector<Setting> settings() const;
  /// The micro-batch counts: the divisors of the batch, fewest first.
  std::vector<unsigned> accumCounts() const;
  /// The base options with setting `s` applied.
  CompileOptions optionsFor(const Setting &s) const;
  /// The best fitting candidate of setting `s` over the micro-batch counts
  /// (`alt`: the alternative to an offloading winner, without offload), or
  /// null.
  llvm::Expected<const FitCandidate *>
  bestOfSetting(const Setting &s, llvm::ArrayRef<unsigned> accums, bool alt);
  /// The error when nothing fits, naming the smallest peak reachable.
  llvm::Error nothingFits(llvm::ArrayRef<Setting> settings,
                          llvm::ArrayRef<unsigned> accums);
  /// Why `winner` won, for the report.
  std::string explain(const FitCandidate *winner,
                      const FitCandidate *alternative, const Plan &best) const;
  /// Every candidate tried, best first (`w` is the winner's index).
  std::vector<FitCandidate> ranked(size_t w) const;

  /// The step the base pipeline builds for `o`: built once per buildKey
  /// from the model imported once per importKey and differentiated once
  /// per gradient pipeline.
  llvm::Expected<const Module *> built(const CompileOptions &o);
  /// Compiles `o`; records it as a candidate labelled `recompute`.
  llvm::Expected<const FitCandidate *> tryCompile(CompileOptions o, int rank,
                                                  const std::string &recompute);
  /// The fewest recomputed FLOPs that fit with these settings and K, or
  /// null when none does.
  llvm::Expected<const FitCandidate *> bestRecompute(const CompileOptions &o,
                                                     int rank);

  /// The fewest extra FLOPs that fit at these settings and K: unfused, then
  /// (when clipping needs it) with --fuse-update's norm pass; null if none.
  llvm::Expected<const FitCandidate *> bestAt(CompileOptions o, int rank);

  /// The offload sets worth trying at these settings, fewest bytes moved
  /// first (accumulators only with K >= 2, optimizer only with state).
  std::vector<std::string> offloadSets(const CompileOptions &o) const;
  /// The fastest fitting candidate (estimated) with state offloaded at these
  /// settings and K: each set without recomputation, then with every=1;
  /// null when none fits.
  llvm::Expected<const FitCandidate *> bestOffloaded(CompileOptions o,
                                                     int rank);
  /// Whether `a` is the better of two fitting candidates of one setting:
  /// the faster estimated step with --allow-offload (transfers count),
  /// else the fewer extra FLOPs (the same order without transfers).
  bool better(const FitCandidate *a, const FitCandidate *b) const {
    return Base.AllowOffload ? a->StepSeconds < b->StepSeconds
                             : a->ExtraFlops < b->ExtraFlops;
  }

  llvm::StringRef Model;
  CompileOptions Base;
  /// The recomputation candidates (the step's repeated blocks).
  RecomputeSpace Space{0};
  /// The setting's plain step (K = 1, nothing recomputed, unfused): what
  /// ExtraFlops is counted from.
  uint64_t PlainFlops = 0;
  /// The model as importStep made it (by importKey), differentiated by a
  /// copy's gradientPipeline, and each setting's step: a copy of that with
  /// its updatePipeline (by buildKey).
  std::map<std::string, std::unique_ptr<Module>> Imported, Differentiated,
      Built;
  // Deques: candidates are pointed to while more are added.
  std::deque<FitCandidate> Tried;
  std::deque<Compiled> Compiles; // parallel to Tried; empty unless it fits
};

llvm::Expected<const Module *> Search::built(const CompileOptions &o) {
  std::unique_ptr<Module> &built = Built[buildKey(o)];
  if (built)
    return built.get();
  std::unique_ptr<Module> &imported = Imported[importKey(o)];
  if (!imported) {
    auto m = importStep(Model, o);
    if (!m)
      return m.takeError();
    imported = std::move(*m);
  }
  // Settings that differ only in the optimizer share their gradient.
  std::string gradient = o.gradientPipeline();
  std::unique_ptr<Module> &differentiated =
      Differentiated[gradient + "|" + importKey(o)];
  if (!differentiated) {
    auto d = runPipeline(imported->clone(), gradient);
    if (!d)
      return d.takeError();
    differentiated = std::move(*d);
  }
  PassManagerOptions verified;
  verified.InputVerified = true;
  auto b = runPipeline(differentiated->clone(), o.updatePipeline(), verified);
  if (!b)
    return b.takeError();
  built = std::move(*b);
  return built.get();
}

llvm::Expected<const FitCandidate *>
Search::tryCompile(CompileOptions o, int rank, const std::string &recompute) {
  o.MemoryBudget = 0;
  // Candidates compile copies of their setting's step (recomputation,
  // rematerialization, schedule and lowering).
  auto b = built(o);
  if (!b)
    return b.takeError();
  auto c = compileBuilt((*b)->clone(), o);
  if (!c)
    return c.takeError();
  FitCandidate f;
  f.Options = o;
  f.Rank = rank;
  f.Label = settingLabel(o) + ", --recompute " + recompute;
  const MemoryReport &r = c->ThePlan.Report;
  f.PeakBytes = r.PeakBytes();
  f.RecomputeFlops = r.RecomputeFlops;
  f.StepFlops = r.StepFlops;
  f.ExtraFlops = r.StepFlops > PlainFlops ? r.StepFlops - PlainFlops : 0;
  f.Fits = f.PeakBytes <= Base.MemoryBudget;
  if (c->ThePlan.TargetName == "cuda")
    f.StepSeconds = estimateStep(c->ThePlan).StepSeconds;
  f.HostPeakBytes = r.HostPeakBytes();
  f.StateBytes = r.StateBytes() + r.StatePadding;
  f.Fits &= !Base.HostMemoryBudget || f.HostPeakBytes <= Base.HostMemoryBudget;
  Tried.push_back(std::move(f));
  // Only a fitting candidate can win: the others' modules and plans are
  // freed at once (their memory serves the next candidate).
  Compiles.push_back(Tried.back().Fits ? std::move(*c) : Compiled());
  return &Tried.back();
}

llvm::Expected<const FitCandidate *>
Search::bestRecompute(const CompileOptions &o, int rank) {
  const FitCandidate *best = nullptr;
  auto tryChoice = [&](const RecomputeChoice &choice) -> llvm::Expected<bool> {
    CompileOptions r = o;
    choice.applyTo(r.Recompute);
    auto c = tryCompile(r, rank, choice.Label);
    if (!c)
      return c.takeError();
    if ((*c)->Fits && (!best || better(*c, best)))
      best = *c;
    return (*c)->Fits;
  };
  // The plain step was tried already (bestAt's caller, or --fuse-update's).
  if (auto e = Space.search(tryChoice, /*withNone=*/false))
    return e;
  return best;
}

llvm::Expected<const FitCandidate *> Search::bestAt(CompileOptions o,
                                                    int rank) {
  auto unfused = bestRecompute(o, rank);
  if (!unfused || *unfused)
    return unfused;
  // Clipping needs every gradient before the first update, so unfused ones
  // live to the end of the backward; --fuse-update frees each at its update
  // and pays a norm pass (exact, the same weights).
  bool fusable = o.Optimizer.Kind == Kind::Sgd ||
                 o.Optimizer.Kind == Kind::Momentum ||
                 o.Optimizer.Kind == Kind::AdamW;
  if (!fusable || o.Optimizer.FuseUpdate || o.Optimizer.ClipGradNorm <= 0)
    return nullptr;
  o.Optimizer.FuseUpdate = true;
  auto none = tryCompile(o, rank, "none");
  if (!none)
    return none.takeError();
  if ((*none)->Fits)
    return *none;
  return bestRecompute(o, rank);
}

std::vector<std::string> Search::offloadSets(const CompileOptions &o) const {
  bool accum = o.Accumulate >= 2;
  bool state = o.ApplyOptimizer && o.Optimizer.keepsState();
  std::vector<std::string> sets;
  if (accum)
    sets.push_back("accumulators");
  if (state)
    sets.push_back("optimizer");
  if (accum && state)
    sets.push_back("optimizer,accumulators");
  std::string most = sets.empty() ? "" : sets.back() + ",";
  sets.push_back(most + "activations");
  std::string stream = accum ? "accumulators,parameters" : "parameters";
  sets.push_back(stream);
  sets.push_back(stream + ",activations");
  return sets;
}

llvm::Expected<const FitCandidate *> Search::bestOffloaded(CompileOptions o,
                                                           int rank) {
  const FitCandidate *best = nullptr;
  for (const std::string &set : offloadSets(o)) {
    o.Offload = set;
    for (Policy p : {Policy::None, Policy::Every}) {
      o.Recompute = RecomputeOptions();
      o.Recompute.Kind = p;
      auto c = tryCompile(o, rank, p == Policy::None ? "none" : "every=1");
      if (!c)
        return c.takeError();
      if (!(*c)->Fits)
        continue;
      if (!best || better(*c, best))
        best = *c;
      break;
    }
  }
  return best;
}

std::vector<Setting> Search::settings() const {
  Kind user = Base.Optimizer.Kind;
  std::vector<Setting> settings = {{DType::F32, true, user, 0},
                                   {DType::BF16, true, user, 1}};
  if (user != Kind::AdaLomo) // bf16 weights updated in f32, rounded once
    settings.push_back({DType::BF16, false, user, 2});
  // bitsandbytes' 8-bit moments: an approximation, after every exact mix.
  if (user == Kind::AdamW && !Base.Optimizer.Int8State)
    settings.push_back({DType::BF16, false, user, 3, true});
  for (Kind alt : Base.AllowOptimizers) {
    if (alt == user)
      continue;
    settings.push_back({DType::F32, true, alt, 4});
    settings.push_back({DType::BF16, true, alt, 5});
    if (alt == Kind::Lomo)
      settings.push_back({DType::BF16, false, alt, 6});
  }
  // Adapters instead of every weight: last, and only when allowed.
  if (Base.AllowLora)
    settings.push_back({DType::BF16, false, user, 7, false, true});
  if (Base.AllowQlora)
    settings.push_back({DType::BF16, false, user, 8, false, true, true});
  std::stable_sort(
      settings.begin(), settings.end(),
      [](const Setting &a, const Setting &b) { return a.Rank < b.Rank; });
  return settings;
}

std::vector<unsigned> Search::accumCounts() const {
  std::vector<unsigned> accums;
  int64_t batch = Base.Import.Batch;
  for (int64_t k = 1; k <= std::max<int64_t>(batch, 1); ++k)
    if (batch <= 0 ? k == 1 : batch % k == 0)
      accums.push_back(unsigned(k));
  return accums;
}

CompileOptions Search::optionsFor(const Setting &s) const {
  CompileOptions o = Base;
  o.Precision = s.Precision;
  o.MasterWeights = s.Master;
  o.Optimizer.Kind = s.Optimizer;
  o.Optimizer.LossScale = false;
  o.Optimizer.Int8State |= s.Int8State;
  if (s.Lora)
    o.Lora = kAutoLora;
  o.BaseNf4 = s.Nf4;
  if (s.Optimizer != Base.Optimizer.Kind) { // the new optimizer's defaults
    o.Optimizer.Lr = s.Optimizer == Kind::AdaLomo ? 1e-3 : Base.Optimizer.Lr;
    o.Optimizer.WeightDecay = 0;
    o.Optimizer.FuseUpdate = false;
  }
  return o;
}

llvm::Expected<const FitCandidate *>
Search::bestOfSetting(const Setting &s, llvm::ArrayRef<unsigned> accums,
                      bool alt) {
  CompileOptions o = optionsFor(s);
  PlainFlops = 0;
  const FitCandidate *best = nullptr;
  for (unsigned k : accums) {
    o.Accumulate = k;
    o.Recompute = RecomputeOptions();
    auto none = tryCompile(o, s.Rank, "none");
    if (!none)
      return none.takeError();
    if (!PlainFlops) {
      PlainFlops = (*none)->StepFlops;
      Tried.back().ExtraFlops = 0;
    }
    // State alone (more with accumulators) over the budget: no K helps,
    // unless state may move to the host.
    bool stateFits = (*none)->StateBytes <= Base.MemoryBudget;
    if (!stateFits && !Base.AllowOffload)
      break;
    const FitCandidate *here = (*none)->Fits ? *none : nullptr;
    if (!here && stateFits) {
      auto rc = bestAt(o, s.Rank);
      if (!rc)
        return rc.takeError();
      here = *rc;
    }
    if (!here && Base.AllowOffload && o.Offload.empty() && !alt) {
      auto off = bestOffloaded(o, s.Rank);
      if (!off)
        return off.takeError();
      here = *off;
    }
    if (here && (!best || better(here, best)))
      best = here;
    if (best && best->ExtraFlops == 0 && best->Options.Offload.empty())
      break; // fewer FLOPs are impossible, more micro-steps only cost
  }
  return best;
}

llvm::Error Search::nothingFits(llvm::ArrayRef<Setting> settings,
                                llvm::ArrayRef<unsigned> accums) {
  if (!settings.empty()) {
    // How close the leanest setting gets (the pruned search may not have
    // compiled it), so the error can say.
    const Setting &s = settings.back();
    CompileOptions o = optionsFor(s);
    for (unsigned k : {accums.front(), accums.back()}) {
      o.Accumulate = k;
      // Every candidate the search falls back to when nothing fits.
      auto lean = [&](const RecomputeChoice &choice) -> llvm::Expected<bool> {
        choice.applyTo(o.Recompute);
        auto c = tryCompile(o, s.Rank, choice.Label);
        if (!c)
          return c.takeError();
        return false;
      };
      if (auto e = Space.search(lean, /*withNone=*/false))
        return e;
    }
  }
  if (Base.HostMemoryBudget) {
    // Offloading fits the device, but no host pool fits the host.
    const FitCandidate *lean = nullptr;
    for (const FitCandidate &c : Tried)
      if (c.PeakBytes <= Base.MemoryBudget && c.HostPeakBytes &&
          (!lean || c.HostPeakBytes < lean->HostPeakBytes))
        lean = &c;
    if (lean)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--memory-budget %s: nothing fits; offloading fits the device (%s "
          "in %s) but its pinned host pool of %s exceeds the host memory "
          "budget of %s (--host-memory-budget; by default the memory "
          "available here)",
          formatBytes(Base.MemoryBudget).c_str(), lean->Label.c_str(),
          formatBytes(lean->PeakBytes).c_str(),
          formatBytes(lean->HostPeakBytes).c_str(),
          formatBytes(Base.HostMemoryBudget).c_str());
  }
  auto lowest = std::min_element(
      Tried.begin(), Tried.end(),
      [](const auto &a, const auto &b) { return a.PeakBytes < b.PeakBytes; });
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "--memory-budget %s: nothing fits; the smallest peak reachable is "
      "%s (%s)%s",
      formatBytes(Base.MemoryBudget).c_str(),
      formatBytes(lowest->PeakBytes).c_str(), lowest->Label.c_str(),
      Base.AllowOptimizers.empty()
          ? "; --allow-optimizer lomo lets it change the optimizer"
      : !Base.AllowLora  ? "; --allow lora lets it train LoRA adapters instead"
      : !Base.AllowQlora ? "; --allow qlora also stores their base as NF4"
                         : "");
}

std::string Search::explain(const FitCandidate *winner,
                            const FitCandidate *alternative,
                            const Plan &best) const {
  std::string offload;
  if (!winner->Options.Offload.empty() && Base.Offload.empty())
    offload =
        llvm::formatv(" (host pool {0}, an estimated {1:f2} s per "
                      "step with its transfers)",
                      formatBytes(winner->HostPeakBytes), winner->StepSeconds)
            .str();
  std::string why =
      winner->Label + " fits in " + formatBytes(winner->PeakBytes) + offload +
      (winner->Rank == 0   ? ", with the user's precision and optimizer"
       : winner->Rank <= 2 ? ": no exact technique fits"
       : winner->Rank == 3 ? ": nothing fits without approximating AdamW's "
                             "moments in 8 bits"
       : winner->Rank == 7 ? ": nothing that trains every weight fits; LoRA "
                             "trains adapters beside the frozen weights"
       : winner->Rank == 8 ? ": neither full training nor LoRA on bf16 "
                             "weights fits; QLoRA stores the frozen base as "
                             "NF4 (4-bit, approximate)"
                           : ": no technique with the user's "
                             "optimizer fits") +
      (Base.AllowOffload    ? ", the fastest estimated step of its kind"
       : winner->ExtraFlops ? ", at the fewest extra FLOPs of its kind"
                            : ", recomputing nothing");
  // What offloading would have cost, when it fit and lost on time.
  if (Base.AllowOffload && winner->Options.Offload.empty()) {
    const FitCandidate *off = nullptr;
    for (const FitCandidate &c : Tried)
      if (c.Fits && !c.Options.Offload.empty() &&
          (!off || c.StepSeconds < off->StepSeconds))
        off = &c;
    if (off)
      why += llvm::formatv("; offloading also fits ({0}, {1}) but its "
                           "transfers make a step an estimated {2:f2} s "
                           "against {3:f2} s",
                           off->Label, formatBytes(off->PeakBytes),
                           off->StepSeconds, winner->StepSeconds)
                 .str();
    else
      why += "; nothing needed offloading";
  }
  if (alternative)
    why += llvm::formatv(
               "; without offload the fastest fit is {0} ({1}, "
               "rank {2}): an estimated {3:f2} s per step",
               alternative->Label, formatBytes(alternative->PeakBytes),
               std::to_string(alternative->Rank), alternative->StepSeconds)
               .str();
  else if (!winner->Options.Offload.empty() && Base.Offload.empty())
    why += "; nothing fits without offload";
  // Fused attention is exact (up to rounding) and on in every candidate.
  unsigned fused = 0;
  for (const PlanFunction &f : best.Functions)
    for (const KernelCall &c : f.Calls)
      fused += c.Kind == OpKind::FusedAttention && !isRecomputed(c.Attrs);
  if (fused && Base.FuseAttention)
    why += "; attention fused in every candidate (exact, no [seq, seq] "
           "tensors)";
  return why;
}

std::vector<FitCandidate> Search::ranked(size_t w) const {
  // Best first: fitting by cost, then the rest by peak.
  std::vector<size_t> order(Tried.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const FitCandidate &x = Tried[a], &y = Tried[b];
    if (x.Fits != y.Fits)
      return x.Fits;
    if (!x.Fits)
      return x.PeakBytes < y.PeakBytes;
    if (Base.AllowOffload)
      return std::make_tuple(a != w, x.Rank, x.StepSeconds,
                             x.Options.Accumulate) <
             std::make_tuple(b != w, y.Rank, y.StepSeconds,
                             y.Options.Accumulate);
    return std::make_tuple(a != w, x.Rank, x.ExtraFlops, x.Options.Accumulate) <
           std::make_tuple(b != w, y.Rank, y.ExtraFlops, y.Options.Accumulate);
  });
  std::vector<FitCandidate> out;
  for (size_t i : order)
    out.push_back(Tried[i]);
  return out;
}

llvm::Expected<FitResult> Search::run() {
  // The repeated blocks, for the block chain.
  {
    auto b = built(Base);
    if (!b)
      return b.takeError();
    Space = RecomputeSpace::of(**b);
  }
  std::vector<Setting> ranks = settings();
  // Micro-batch counts: the divisors of the batch, fewest first.
  std::vector<unsigned> accums = accumCounts();

  const FitCandidate *winner = nullptr;
  // A winner that offloads is exact but slow: the later settings are
  // searched without offload for the fastest alternative, which the
  // explanation names.
  const FitCandidate *alternative = nullptr;
  for (const Setting &s : ranks) {
    bool alt =
        winner && !winner->Options.Offload.empty() && Base.Offload.empty();
    if (winner && (s.Rank == winner->Rank || (s.Rank > winner->Rank && !alt)))
      break;
    auto best = bestOfSetting(s, accums, alt);
    if (!best)
      return best.takeError();
    if (*best && alt) {
      alternative = *best;
      break;
    }
    if (*best)
      winner = *best;
  }
  if (!winner)
    return nothingFits(ranks, accums);

  size_t w = 0;
  while (&Tried[w] != winner)
    ++w;
  FitResult out;
  out.Best = std::move(Compiles[w]);
  out.Why = explain(winner, alternative, out.Best.ThePlan);
  out.Tried = ranked(w);
  return out;
}

} // namespace

llvm::Expected<FitResult> headroom::autoFit(llvm::StringRef modelPath,
                                            const CompileOptions &options) {
  return Search(modelPath, options).run();
}
