//===- Flags.h - The training flags on the command line -------------------===//
//
// One cl option per row of compileFlags() (pipeline/CompileOptions.h),
// registered on the subcommands that compile a step; cl only splits the
// command line and prints --help, pipeline/ gives the values their meaning.
//
//===----------------------------------------------------------------------===//
#ifndef HEADROOM_TOOLS_FLAGS_H
#define HEADROOM_TOOLS_FLAGS_H

#include "pipeline/CompileOptions.h"

#include "llvm/Support/CommandLine.h"

namespace headroom {

/// The groups --help shows flags in.
llvm::cl::OptionCategory &modelFlags();     // the model, data and the run
llvm::cl::OptionCategory &optimizerFlags(); // the update rule
llvm::cl::OptionCategory &memoryFlags();    // what fits, and how
llvm::cl::OptionCategory &outputFlags();    // what is written
/// Every group, for cl::HideUnrelatedOptions.
llvm::ArrayRef<const llvm::cl::OptionCategory *> flagGroups();

/// Registers every training flag on `subcommands`, each in its group; call
/// before cl::ParseCommandLineOptions.
void registerCompileFlags(llvm::ArrayRef<llvm::cl::SubCommand *> subcommands);

/// A flag on the command line that `sub` does not take, as one error line
/// with the nearest flag it does take (`--learning-rate`: did you mean
/// `--lr`?); success when every flag is known. LLVM's own parser would take
/// a misspelt flag's value for a positional argument and suggest by
/// spelling alone.
llvm::Error checkFlagNames(int argc, char **argv, llvm::cl::SubCommand &sub);

/// The training flags given on the command line, in compileFlags() order.
FlagList givenCompileFlags();

} // namespace headroom

#endif // HEADROOM_TOOLS_FLAGS_H
