//===- Pass.h - The pass interface ----------------------------------------===//
//
// A pass transforms a Module and says whether it changed anything. Passes are
// registered in passes/Passes.def; each is created by one factory function.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_COMPILER_PASS_H
#define HEADROOM_COMPILER_PASS_H

#include "compiler/IR.h"

#include "llvm/Support/Error.h"

namespace headroom {

class Pass {
public:
  virtual ~Pass() = default;
  virtual llvm::StringRef name() const = 0;
  /// Runs on `m`; returns whether the module changed, or an error a user can
  /// act on (naming the node and what was expected).
  virtual llvm::Expected<bool> run(Module &m) = 0;
};

} // namespace headroom

#endif // HEADROOM_COMPILER_PASS_H
