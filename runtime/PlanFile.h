//===- PlanFile.h - Plans on disk -----------------------------------------===//
//
// `headroom compile` writes a lowered, memory-planned step (compiler/Plan.h)
// to a file and `headroom run` executes it later without the compiler. The
// file (runtime/plan.proto, docs/plan.md) holds the whole Plan (its driver
// loop included), the training flags it was compiled with, and the source
// model's absolute path and SHA-256: the initial weights are read from that
// model at run time, so a model that changed since is refused rather than
// trained with a plan that may not fit it. Reading refuses a file that is not a
// plan, a corrupt or truncated one (the body carries its own SHA-256), a format
// version this headroom does not read, and any index out of range: a bad
// file is an error, never a crash.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_RUNTIME_PLANFILE_H
#define HEADROOM_RUNTIME_PLANFILE_H

#include "compiler/Plan.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace headroom {

/// The format runtime/plan.proto describes. Bump it with any change that an
/// older headroom would misread; files of another version are refused.
constexpr uint32_t kPlanFormatVersion = 3;

/// The ONNX model a plan was compiled from.
struct PlanSource {
  std::string ModelPath; // absolute
  std::string Sha256;    // of the file's bytes, lowercase hex
};

/// The source of a plan compiled from the model at `modelPath` now.
llvm::Expected<PlanSource> describePlanSource(llvm::StringRef modelPath);

/// How a plan was compiled and how it is driven.
struct PlanRecipe {
  std::string Flags;    // the training flags, as a command line
  std::string Pipeline; // the passes that made the step
  double Lr = 0;        // the learning rate, for logs
};

struct LoadedPlan {
  Plan ThePlan;
  PlanSource Source;
  PlanRecipe Recipe;
};

/// The bytes of a plan file. Deterministic: the same plan gives the same
/// bytes.
llvm::Expected<std::string> serializePlanFile(const Plan &plan,
                                              const PlanSource &source,
                                              const PlanRecipe &recipe);
/// Reads the bytes of a plan file; `name` (the file's path) starts every
/// error message.
llvm::Expected<LoadedPlan> parsePlanFile(llvm::StringRef bytes,
                                         llvm::StringRef name);

/// SHA-256 (hex) of what `plan` computes: its functions, buffers, state and
/// driver, not its source, flags or report. Equal plans have equal
/// fingerprints wherever they were compiled; a checkpoint names the plan it
/// was written by with it.
std::string planFingerprint(const Plan &plan);

/// Writes a plan file atomically (a temporary file, then rename).
llvm::Error writePlanFile(const Plan &plan, const PlanSource &source,
                          const PlanRecipe &recipe, llvm::StringRef path);
llvm::Expected<LoadedPlan> readPlanFile(llvm::StringRef path);

/// Fails when the source model is missing or its bytes changed since the
/// plan at `planPath` was compiled.
llvm::Error checkPlanSource(const PlanSource &source, llvm::StringRef planPath);

} // namespace headroom

#endif // HEADROOM_RUNTIME_PLANFILE_H
