//===- Report.h - Rendering a plan's memory report ------------------------===//
//
// Every figure comes from Plan::Report (compiler/Plan.h); these functions only
// format it: a table for people, JSON for tools, SVGs of memory over the
// schedule and of the recomputation frontier, and one HTML page of it all
// (runtime/ReportHtml.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_REPORT_H
#define HEADROOM_RUNTIME_REPORT_H

#include "compiler/ByteSize.h"
#include "compiler/Plan.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace headroom {

/// `extra` FLOPs as a share of a step of `step` FLOPs that includes them
/// (recomputation, a norm pass): extra / (step - extra), 0 when undefined.
inline double extraShare(uint64_t extra, uint64_t step) {
  return step > extra ? double(extra) / double(step - extra) : 0.0;
}

/// Frozen weights stored as NF4 (`--base-weights nf4`): how many, the bytes
/// of their codes and scales, and the bytes they take in bf16 (two per
/// element; an odd element count counts its pad element).
struct Nf4Weights {
  unsigned Weights = 0;
  uint64_t Bytes = 0, Bf16Bytes = 0;
};
Nf4Weights countNf4(const Plan &plan);

/// Bytes of the slots of kind `k` that live in the host pool (offload).
uint64_t hostStateBytes(const Plan &plan, StateKind k);

void printReportTable(const Plan &plan, llvm::StringRef title,
                      llvm::raw_ostream &os);
/// At least peak_bytes, lower_bound_bytes, target, alignment_bytes and
/// breakdown.{parameters, gradients, optimizer_state, activations,
/// workspace}.
void printReportJson(const Plan &plan, llvm::raw_ostream &os);
/// The object printReportJson prints.
llvm::json::Value reportJson(const Plan &plan);
/// Memory over the schedule, stacked by category, with axes and a legend.
void printReportSvg(const Plan &plan, llvm::StringRef title,
                    llvm::raw_ostream &os);

/// One compile of a step with a recomputation policy: how the policy is
/// named and its plan's report.
struct SweepPoint {
  std::string Label;
  const MemoryReport *Report = nullptr;
};
/// Whether no other point has a peak and recomputed FLOPs both at most its
/// own, one of them lower: the memory/FLOPs frontier.
std::vector<bool> frontierOf(llvm::ArrayRef<SweepPoint> points);
/// `headroom report --recompute sweep`: peak, activations and extra FLOPs
/// per policy, the frontier marked.
void printSweepTable(llvm::ArrayRef<SweepPoint> points, llvm::StringRef title,
                     llvm::raw_ostream &os);
void printSweepJson(llvm::ArrayRef<SweepPoint> points, llvm::raw_ostream &os);
/// Peak over extra FLOPs, each policy a dot, the frontier joined.
void printSweepSvg(llvm::ArrayRef<SweepPoint> points, llvm::StringRef title,
                   llvm::raw_ostream &os);

/// One candidate of an auto-fit search, as the page shows it.
struct PageCandidate {
  std::string Label;
  uint64_t PeakBytes = 0, ExtraFlops = 0, StepFlops = 0;
  int Rank = 0;
  bool Fits = false, Approximate = false;
};

/// What `report --html` shows (runtime/ReportHtml.cpp): the plan's peak by
/// part against the budget, its timeline and what lives at its peak; with
/// auto-fit, every candidate (the chosen one first) and why; with
/// `--recompute sweep`, the frontier (and no plan).
struct ReportPage {
  std::string Title;
  const Plan *ThePlan = nullptr;
  uint64_t BudgetBytes = 0; // 0: none given
  std::vector<PageCandidate> Candidates;
  std::string Why;
  std::vector<SweepPoint> Sweep;
};

/// One self-contained HTML page: inline SVG and CSS, no script, nothing
/// fetched; byte counts also in data-bytes attributes.
void printReportHtml(const ReportPage &page, llvm::raw_ostream &os);

} // namespace headroom

#endif // HEADROOM_RUNTIME_REPORT_H
