//===- Compile.h - Model + options -> module and plan ---------------------===//
//
// The one compile pipeline: import the model at the micro-batch size, run
// the passes CompileOptions::passPipeline() names, choose the schedule, and
// lower for the target. `headroom train`, `compile`, `report` and `opt
// --compile` all call it, so they show and run the same step. Pure: it reads
// the model file and nothing else (no device is asked).
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_PIPELINE_COMPILE_H
#define HEADROOM_PIPELINE_COMPILE_H

#include "compiler/Plan.h"
#include "compiler/Target.h"
#include "passes/PassManager.h"
#include "pipeline/CompileOptions.h"
#include "pipeline/RecomputeSearch.h"

#include <memory>

namespace headroom {

struct Compiled {
  /// The module the plan was lowered from (scheduled or not, as the plan).
  std::unique_ptr<Module> M;
  Plan ThePlan;
  /// The passes that made M, `headroom opt --passes=` syntax.
  std::string Pipeline;
};

/// Imports `modelPath` and compiles it.
llvm::Expected<Compiled> compile(llvm::StringRef modelPath,
                                 const CompileOptions &options);
/// Compiles a module imported (or parsed) already at the micro-batch size.
llvm::Expected<Compiled> compileModule(std::unique_ptr<Module> m,
                                       const CompileOptions &options);

/// Imports `modelPath` at the options' micro-batch size (--batch and
/// every --shape divided by --ranks and --accum).
llvm::Expected<std::unique_ptr<Module>>
importStep(llvm::StringRef modelPath, const CompileOptions &options);
/// What decides importStep's module: the micro-batch's import bindings.
/// Options with the same key import the same module.
std::string importKey(const CompileOptions &options);
/// Runs `pipeline` (`headroom opt --passes=` syntax) on `m`.
llvm::Expected<std::unique_ptr<Module>>
runPipeline(std::unique_ptr<Module> m, llvm::StringRef pipeline,
            PassManagerOptions options = {});
/// importStep, then the base pipeline (options.basePipeline(): no
/// recomputation, no schedule): what the recompute candidates start from.
llvm::Expected<std::unique_ptr<Module>>
buildStep(llvm::StringRef modelPath, const CompileOptions &options);
/// compileModule's work after the base pipeline: `built` is what buildStep
/// made for these options (auto-fit builds once and compiles copies).
llvm::Expected<Compiled> compileBuilt(std::unique_ptr<Module> built,
                                      const CompileOptions &options);
/// What decides buildStep's module: importKey and the base pipeline.
/// Options with the same key build the same module.
std::string buildKey(const CompileOptions &options);

/// Each candidate recomputed, scheduled and lowered from a copy of `built`.
llvm::Expected<std::vector<Compiled>>
compileRecomputeCandidates(const Module &built, const CompileOptions &options,
                           llvm::ArrayRef<RecomputeChoice> choices);

/// The target called `name` ("cpu", "cuda").
llvm::Expected<const Target *> lookupTarget(llvm::StringRef name);

} // namespace headroom

#endif // HEADROOM_PIPELINE_COMPILE_H
