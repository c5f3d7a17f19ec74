//===- PassManager.h - Run a list of passes -------------------------------===//
#ifndef HEADROOM_PASSES_PASSMANAGER_H
#define HEADROOM_PASSES_PASSMANAGER_H

#include "compiler/Pass.h"

#include <memory>
#include <vector>

namespace headroom {

struct PassManagerOptions {
  /// Run the verifier on the input and after every pass that changed the
  /// module (always on in tests; a pass that says it changed nothing left
  /// the module as verified, which CompileTest.PassesThatChangeNothingSaySo
  /// checks).
  bool VerifyEach = true;
  /// The input is a pass manager's output, or a copy of one: VerifyEach
  /// skips verifying it again.
  bool InputVerified = false;
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
