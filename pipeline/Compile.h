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
#include "pipeline/CompileOptions.h"

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

/// The target called `name` ("cpu", "cuda").
llvm::Expected<const Target *> lookupTarget(llvm::StringRef name);

} // namespace headroom

#endif // HEADROOM_PIPELINE_COMPILE_H
