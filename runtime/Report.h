//===- Report.h - Rendering a plan's memory report ------------------------===//
//
// Every figure comes from Plan::Report (compiler/Plan.h); these functions only
// format it: a table for people, JSON for tools, an SVG of memory over the
// schedule.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_REPORT_H
#define HEADROOM_RUNTIME_REPORT_H

#include "compiler/ByteSize.h"
#include "compiler/Plan.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace headroom {

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

} // namespace headroom

#endif // HEADROOM_RUNTIME_REPORT_H
