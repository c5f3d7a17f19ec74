//===- FuzzPlanFile.cpp - libFuzzer target: the plan-file reader ----------===//
//
// Any bytes as a plan file: a plan (every index, size and offset checked) or
// an error, never a crash. Mutations rarely keep the body's SHA-256 right,
// so each input is also tried with its checksum, magic and version repaired:
// that reaches the validation of every field. A plan that reads serializes
// again to bytes that read again.
//
//===----------------------------------------------------------------------===//
#include "runtime/PlanFile.h"
#include "runtime/plan.pb.h"

#include "llvm/Support/SHA256.h"

#include <cstdio>
#include <cstdlib>

static void readOne(llvm::StringRef bytes) {
  auto plan = headroom::parsePlanFile(bytes, "fuzz.plan");
  if (!plan) {
    llvm::consumeError(plan.takeError());
    return;
  }
  auto again =
      headroom::serializePlanFile(plan->ThePlan, plan->Source, plan->Recipe);
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
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  readOne(bytes);
  headroom::planfile::PlanFile file;
  if (!file.ParseFromArray(data, int(size)))
    return 0;
  file.set_magic("headroom plan");
  file.set_format_version(headroom::kPlanFormatVersion);
  auto digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(file.body()));
  file.set_body_sha256(digest.data(), digest.size());
  readOne(file.SerializeAsString());
  return 0;
}
