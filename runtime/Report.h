//===- Report.h - Rendering a plan's memory report ------------------------===//
//
// Every figure comes from Plan::Report (compiler/Plan.h); these functions only
// format it: a table for people, JSON for tools, an SVG of memory over the
// schedule.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_REPORT_H
#define HEADROOM_RUNTIME_REPORT_H

#include "compiler/Plan.h"

#include "llvm/Support/raw_ostream.h"

namespace headroom {

/// "1.25 GiB" and friends.
std::string formatBytes(uint64_t bytes);

void printReportTable(const Plan &plan, llvm::StringRef title,
                      llvm::raw_ostream &os);
/// At least peak_bytes, lower_bound_bytes, target, alignment_bytes and
/// breakdown.{parameters, gradients, optimizer_state, activations,
/// workspace}.
void printReportJson(const Plan &plan, llvm::raw_ostream &os);
/// Memory over the schedule, stacked by category, with axes and a legend.
void printReportSvg(const Plan &plan, llvm::StringRef title,
                    llvm::raw_ostream &os);

} // namespace headroom

#endif // HEADROOM_RUNTIME_REPORT_H
