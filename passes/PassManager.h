//===- PassManager.h - Run a list of passes -------------------------------===//
#ifndef HEADROOM_PASSES_PASSMANAGER_H
#define HEADROOM_PASSES_PASSMANAGER_H

#include "compiler/Pass.h"

#include <memory>
#include <vector>

namespace headroom {

struct PassManagerOptions {
  /// Run the verifier after every pass (always on in tests).
  bool VerifyEach = true;
  /// Print the IR before the first pass and after every pass to PrintStream.
  bool PrintAfterAll = false;
  llvm::raw_ostream *PrintStream = nullptr;
};

class PassManager {
public:
  explicit PassManager(PassManagerOptions options = {})
      : Options(std::move(options)) {}
  void add(std::unique_ptr<Pass> p) { Passes.push_back(std::move(p)); }
  /// Adds passes by name from a comma-separated list ("canonicalize,...");
  /// an unknown name is an error listing the known ones.
  llvm::Error addPipeline(llvm::StringRef list);
  llvm::Error run(Module &m);

private:
  PassManagerOptions Options;
  std::vector<std::unique_ptr<Pass>> Passes;
};

} // namespace headroom

#endif // HEADROOM_PASSES_PASSMANAGER_H
