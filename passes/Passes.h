//===- Passes.h - Pass factories and the registry -------------------------===//
#ifndef HEADROOM_PASSES_PASSES_H
#define HEADROOM_PASSES_PASSES_H

#include "compiler/Pass.h"

#include <memory>

namespace headroom {

#define HR_PASS(Name, Factory, Summary) std::unique_ptr<Pass> Factory();
#include "passes/Passes.def"

struct PassInfo {
  llvm::StringRef Name;
  std::unique_ptr<Pass> (*Create)();
  llvm::StringRef Summary;
};

/// Every registered pass, in Passes.def order.
llvm::ArrayRef<PassInfo> allPasses();
/// A new instance of the pass called `name`, or null.
std::unique_ptr<Pass> createPassByName(llvm::StringRef name);
/// docs/passes.md: a Markdown table of every pass.
std::string passesMarkdown();

} // namespace headroom

#endif // HEADROOM_PASSES_PASSES_H
