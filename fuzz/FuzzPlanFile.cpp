//===- FuzzPlanFile.cpp - libFuzzer target: the plan-file reader ----------===//
//
// Any bytes as a plan file: a plan (every index, size and offset checked) or
// an error, never a crash. A plan that reads serializes again to bytes that
// read again.
//
//===----------------------------------------------------------------------===//
#include "runtime/PlanFile.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto plan = headroom::parsePlanFile(bytes, "fuzz.plan");
  if (!plan) {
    llvm::consumeError(plan.takeError());
    return 0;
  }
  auto again = headroom::serializePlanFile(plan->ThePlan, plan->Source,
                                           plan->Recipe);
  if (!again) {
    std::fprintf(stderr, "a plan that was read does not serialize: %s\n",
                 llvm::toString(again.takeError()).c_str());
    std::abort();
  }
  auto reread = headroom::parsePlanFile(*again, "again.plan");
  if (!reread) {
    std::fprintf(stderr, "a plan that was read does not read again: %s\n",
                 llvm::toString(reread.takeError()).c_str());
    std::abort();
  }
  return 0;
}
