//===- Passes.h - Pass factories and the registry -------------------------===//
#ifndef HEADROOM_PASSES_PASSES_H
#define HEADROOM_PASSES_PASSES_H

#include "compiler/IR.h"
#include "compiler/Pass.h"

#include <memory>

namespace headroom {

/// Options as written in a pipeline: `optimizer{kind=adamw lr=1e-3}` passes
/// "kind=adamw lr=1e-3". Each factory parses its own and rejects unknown keys.
using PassFactory =
    llvm::Expected<std::unique_ptr<Pass>> (*)(llvm::StringRef options);

#define HR_PASS(Name, Factory, Summary)                                        \
  llvm::Expected<std::unique_ptr<Pass>> Factory(llvm::StringRef options);
#include "passes/Passes.def"

struct PassInfo {
  llvm::StringRef Name;
  PassFactory Create;
  llvm::StringRef Summary;
};

/// Every registered pass, in Passes.def order.
llvm::ArrayRef<PassInfo> allPasses();
/// A new instance of the pass called `name` with `options`, or null when no
/// pass has that name (an error when the options are bad).
llvm::Expected<std::unique_ptr<Pass>> createPassByName(llvm::StringRef name,
                                                       llvm::StringRef options);

/// Splits `key=value key=value`; an entry without '=' is an error.
llvm::Expected<std::vector<std::pair<std::string, std::string>>>
parsePassOptions(llvm::StringRef pass, llvm::StringRef options);
/// The error for a pass that takes no options but was given some.
llvm::Error checkNoOptions(llvm::StringRef pass, llvm::StringRef options);
/// docs/passes.md: a Markdown table of every pass.
std::string passesMarkdown();

/// Gives every Dropout of `f` its ordinal as `stream` attribute, the random
/// stream the executor draws its mask from (ONNX's `seed` is not used: two
/// Dropouts with the same seed would draw the same mask). autodiff calls it,
/// so that copies of the step made by later passes draw the same masks when
/// called with the same step (the two passes of LOMO with clipping).
void stampRandomStreams(Function &f);

/// A function name not yet in `m`: `base`, else base.1, base.2, ...
std::string freshFunctionName(const Module &m, llvm::StringRef base);

/// The state slot `name`, added with `type` and `kind` when there is none;
/// an error when a slot of that name exists with another type or kind (a
/// model parameter called `w.grad` must not become w's accumulator).
llvm::Expected<StateSlot *> stateSlotFor(Module &m, llvm::StringRef name,
                                         const TensorType &type, StateKind kind,
                                         llvm::StringRef pass);

} // namespace headroom

#endif // HEADROOM_PASSES_PASSES_H
